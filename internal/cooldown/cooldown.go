// Package cooldown keeps each endpoint's overload cooldown: after a RESOURCE_EXHAUSTED, an
// endpoint is skipped for new calls for a while when another endpoint of its group is
// available, and a group moves away from it once the endpoint the group would move to
// has answered a call since it began (Served, ConfirmedBy; spannerme's docs/health.md,
// "Overload cooldown"). It is not an ejection: no
// probe ends it, only its time. The Spanner client's location-aware routing keeps such an
// endpoint out of selection the same way (cloud.google.com/go/spanner v1.96.1,
// endpoint_overload_cooldown.go: 10 s, doubling to 1 min, forgotten after 10 min); this is
// our own, with the server's RetryInfo delay preferred. It decides nothing about groups: the
// verdicts read Cooling and ConfirmedBy.
package cooldown

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

const (
	// Min and Max bound the first cooldown of an endpoint whose server sent no RetryInfo:
	// a length drawn uniformly in [Min, Max).
	Min = 5 * time.Second
	Max = 10 * time.Second
	// Cap is the longest cooldown: the doubling of repeated cooldowns and a server's
	// RetryInfo delay both stop there.
	Cap = 60 * time.Second
	// Quiet is how long an endpoint must go without RESOURCE_EXHAUSTED for its repeated
	// cooldowns to be forgotten (its next one starts at the first length again).
	Quiet = 10 * time.Minute
	// SharedWindow is how recent another endpoint's RESOURCE_EXHAUSTED must be for an
	// overload to be shared (Shared): the database's, not the endpoint's. An overload found
	// shared stays so while RESOURCE_EXHAUSTED keep coming less than SharedWindow apart, for
	// at most ShareHold after it was last confirmed by another endpoint; then the next one
	// cools its endpoint again, and the calls sent elsewhere test the judgment anew.
	SharedWindow = 2 * time.Second
	ShareHold    = 10 * time.Second
)

// Set holds the overload cooldown of each endpoint (shared by every group that lists it).
// Safe for concurrent use; Active and Cooling take no lock while nothing cools. Its timers
// run on the injected clock; a stale timer (replaced, or after Close) does nothing
// (generation counters).
type Set struct {
	clock clock.Clock
	// ended is called, with no lock held, when a cooldown's time is over.
	ended func(endpoint string, length time.Duration)

	active atomic.Int32 // endpoints cooling now; 0 lets the call path skip the map
	// heard holds the endpoints recorded as answering by every cooldown in progress
	// (Served): an answer from one of them takes no lock. Replaced whole, under mu; cleared
	// when a cooldown starts.
	heard  atomic.Pointer[map[string]struct{}]
	mu     sync.Mutex // guards m and the entries, closed, sharedUntil, confirmed
	m      map[string]*entry
	closed bool
	// sharedUntil: overloads are judged shared until then (Shared); confirmed: when another
	// endpoint last confirmed it.
	sharedUntil, confirmed time.Time
}

// entry is one endpoint's overload state.
type entry struct {
	cooling  bool
	until    time.Time     // end of the cooldown in progress (or of the last one)
	length   time.Duration // of the cooldown in progress (or of the last one)
	repeats  int           // cooldowns since the last quiet period, this one included
	last     time.Time     // last RESOURCE_EXHAUSTED
	total    int64         // cooldowns started since creation
	gen      uint64        // current timer's generation
	timer    clock.Timer
	fromInfo bool // the length came from the server's RetryInfo
	// answered lists the endpoints that have answered a call since this cooldown began
	// (Served), in the order heard.
	answered []string
}

// Status is one endpoint's cooldown state.
type Status struct {
	Cooling       bool
	AnsweredBy    []string
	Until         time.Time
	Length        time.Duration
	FromRetryInfo bool
	Repeats       int
	Total         int64
	LastOverload  time.Time
}

// New returns an empty Set on clk, which calls ended (with no lock held; nil: nothing) when
// a cooldown's time is over.
func New(clk clock.Clock, ended func(endpoint string, length time.Duration)) *Set {
	return &Set{clock: clk, ended: ended, m: make(map[string]*entry)}
}

// Active returns how many endpoints cool now: one atomic load. A nil Set has none.
func (c *Set) Active() int {
	if c == nil {
		return 0
	}
	return int(c.active.Load())
}

// Cooling reports whether endpoint is in a cooldown. It takes no lock and allocates nothing
// while no endpoint cools.
func (c *Set) Cooling(endpoint string) bool {
	if c.Active() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[endpoint]
	return e != nil && e.cooling
}

// ConfirmedBy reports whether endpoint is in a cooldown during which one of by (other
// endpoints: those a group of endpoint would use instead) has answered a call (Served):
// moving that group's calls is then known to reach an endpoint that answers. A cooldown
// none of them has answered during keeps endpoint in that group's choice (only new calls
// are steered elsewhere, and they test the other endpoints): when they do not answer (a
// restart, a path that hangs), moving the group would serve nothing better. It takes no
// lock and allocates nothing while no endpoint cools.
func (c *Set) ConfirmedBy(endpoint string, by []string) bool {
	if c.Active() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[endpoint]
	if e == nil || !e.cooling {
		return false
	}
	for _, b := range by {
		if b != endpoint && slices.Contains(e.answered, b) {
			return true
		}
	}
	return false
}

// Served records that endpoint answered a call (a success, or an error the backend sent)
// in every cooldown in progress of another endpoint that had not heard from it yet, and
// returns those endpoints (the groups' verdicts are then due again: they read ConfirmedBy);
// nil when there were none. One atomic load when nothing cools, and one more and a map
// lookup, with no lock or allocation, once every cooldown in progress has heard from
// endpoint. Nil on a nil or closed Set.
func (c *Set) Served(endpoint string) []string {
	if c.Active() == 0 {
		return nil
	}
	if h := c.heard.Load(); h != nil {
		if _, ok := (*h)[endpoint]; ok {
			return nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	var newly []string
	for ep, e := range c.m {
		if ep != endpoint && e.cooling && !slices.Contains(e.answered, endpoint) {
			e.answered = append(e.answered, endpoint)
			newly = append(newly, ep)
		}
	}
	heard := map[string]struct{}{endpoint: {}}
	if h := c.heard.Load(); h != nil {
		for k := range *h {
			heard[k] = struct{}{}
		}
	}
	c.heard.Store(&heard)
	return newly
}

// StatusOf returns endpoint's cooldown state; false if it never cooled.
func (c *Set) StatusOf(endpoint string) (Status, bool) {
	if c == nil {
		return Status{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[endpoint]
	if e == nil {
		return Status{}, false
	}
	var answered []string
	if e.cooling {
		answered = slices.Clone(e.answered)
	}
	return Status{Cooling: e.cooling, AnsweredBy: answered, Until: e.until, Length: e.length, FromRetryInfo: e.fromInfo,
		Repeats: e.repeats, Total: e.total, LastOverload: e.last}, true
}

// Note records a RESOURCE_EXHAUSTED of endpoint, with the server's RetryInfo delay when
// fromInfo. Outside a cooldown it starts one: for delay when fromInfo, else for a length
// drawn in [Min, Max) doubled for each cooldown since the endpoint's last quiet period; both
// capped at Cap. During a cooldown it only extends it to its own RetryInfo delay (the calls
// in flight when it began end the same way: they are no repeat). It returns whether a
// cooldown started, its length and its repeats. After Close it does nothing.
func (c *Set) Note(endpoint string, delay time.Duration, fromInfo bool) (started bool, length time.Duration, repeats int) {
	if c == nil {
		return false, 0, 0
	}
	delay = min(delay, Cap)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false, 0, 0
	}
	e := c.m[endpoint]
	if e == nil {
		e = &entry{}
		c.m[endpoint] = e
	}
	now := c.clock.Now()
	if !e.last.IsZero() && now.Sub(e.last) >= Quiet {
		e.repeats = 0
	}
	e.last = now
	if e.cooling {
		if fromInfo && now.Add(delay).After(e.until) {
			e.until, e.length, e.fromInfo = now.Add(delay), delay, true
			c.armLocked(endpoint, e, delay)
		}
		return false, e.length, e.repeats
	}
	e.repeats++
	if !fromInfo {
		base := Min + rand.N(Max-Min)
		delay = min(base<<min(e.repeats-1, 8), Cap)
	}
	e.cooling, e.until, e.length, e.fromInfo, e.answered = true, now.Add(delay), delay, fromInfo, nil
	e.total++
	c.active.Add(1)
	c.heard.Store(nil) // the new cooldown has heard from no endpoint
	c.armLocked(endpoint, e, delay)
	return true, delay, e.repeats
}

// Shared records a RESOURCE_EXHAUSTED of endpoint that would start or extend its cooldown
// and reports whether another endpoint had one within SharedWindow, or the overload was
// found shared and still holds (SharedWindow, ShareHold): the overload is then shared (every PSC endpoint leads to the same database, which sheds load on all of them),
// and moving calls between endpoints relieves nothing. The caller then starts no cooldown
// and ends the ones in progress (EndAll). False on a nil or closed Set.
func (c *Set) Shared(endpoint string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	now := c.clock.Now()
	shared := now.Before(c.sharedUntil) && now.Sub(c.confirmed) < ShareHold
	for ep, e := range c.m {
		if ep != endpoint && !e.last.IsZero() && now.Sub(e.last) < SharedWindow {
			shared, c.confirmed = true, now
			break
		}
	}
	if shared {
		c.sharedUntil = now.Add(SharedWindow)
	}
	e := c.m[endpoint]
	if e == nil {
		e = &entry{}
		c.m[endpoint] = e
	}
	e.last = now
	return shared
}

// EndAll ends every cooldown in progress at once, as their timers would (ended is told of
// each), because the overload was found shared (Shared).
func (c *Set) EndAll() {
	if c == nil {
		return
	}
	type ending struct {
		endpoint string
		gen      uint64
	}
	var ends []ending
	c.mu.Lock()
	for ep, e := range c.m {
		if e.cooling {
			ends = append(ends, ending{ep, e.gen})
		}
	}
	c.mu.Unlock()
	for _, x := range ends {
		c.end(x.endpoint, x.gen)
	}
}

// armLocked (re)starts e's timer for d; c.mu is held.
func (c *Set) armLocked(endpoint string, e *entry, d time.Duration) {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.gen++
	gen := e.gen
	e.timer = c.clock.AfterFunc(d, func() { c.end(endpoint, gen) })
}

// end ends endpoint's cooldown of generation gen, unless a later one replaced it or the Set
// closed, and tells ended.
func (c *Set) end(endpoint string, gen uint64) {
	c.mu.Lock()
	e := c.m[endpoint]
	if c.closed || e == nil || e.gen != gen || !e.cooling {
		c.mu.Unlock()
		return
	}
	e.cooling = false
	e.timer = nil
	c.active.Add(-1)
	length := e.length
	c.mu.Unlock()
	if c.ended != nil {
		c.ended(endpoint, length)
	}
}

// EndNow ends endpoint's cooldown at once, as its timer would (tests).
func (c *Set) EndNow(endpoint string) {
	c.mu.Lock()
	e := c.m[endpoint]
	var gen uint64
	if e != nil {
		gen = e.gen
	}
	c.mu.Unlock()
	if e != nil {
		c.end(endpoint, gen)
	}
}

// Close stops every timer; later overloads start nothing. Idempotent; nothing on a nil Set.
func (c *Set) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, e := range c.m {
		if e.timer != nil {
			e.timer.Stop()
		}
		e.gen++
	}
}
