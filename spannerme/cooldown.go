package spannerme

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/textform"
)

// Overload cooldown: an endpoint that answers RESOURCE_EXHAUSTED is skipped for new calls
// for a while when another endpoint of the group is available (a verdict input,
// internal/verdict Cooling; docs/health.md, "Overload cooldown"). It is not an ejection: no
// probe, no RecoveryTimeout; only its time ends it. The Spanner client's location-aware
// routing keeps such an endpoint out of selection the same way (cloud.google.com/go/spanner
// v1.96.1, endpoint_overload_cooldown.go: 10 s, doubling to 1 min, forgotten after 10 min);
// this is our own, with the server's RetryInfo delay preferred.
const (
	// cooldownMin and cooldownMax bound the first cooldown of an endpoint that sent no
	// RetryInfo: a delay drawn uniformly in [cooldownMin, cooldownMax).
	cooldownMin = 5 * time.Second
	cooldownMax = 10 * time.Second
	// cooldownCap is the longest cooldown: the doubling of repeated cooldowns and a
	// server's RetryInfo delay both stop there.
	cooldownCap = 60 * time.Second
	// cooldownQuiet is how long an endpoint must go without RESOURCE_EXHAUSTED for its
	// repeated cooldowns to be forgotten (its next one starts at the first length again).
	cooldownQuiet = 10 * time.Minute
)

// cooldowns holds the overload cooldown of each endpoint (shared by every group that lists
// it). Safe for concurrent use; the call path reads active alone while nothing cools.
type cooldowns struct {
	active atomic.Int32 // endpoints cooling now; 0 lets the call path skip the map
	mu     sync.Mutex   // guards m and the entries
	m      map[string]*cooldown
	closed bool
}

// cooldown is one endpoint's overload state.
type cooldown struct {
	cooling  bool
	until    time.Time     // end of the cooldown in progress (or of the last one)
	length   time.Duration // of the cooldown in progress (or of the last one)
	repeats  int           // cooldowns since the last quiet period, this one included
	last     time.Time     // last RESOURCE_EXHAUSTED
	total    int64         // cooldowns started since creation
	gen      uint64        // current timer's generation: a stale timer's callback does nothing
	timer    clock.Timer
	fromInfo bool // the length came from the server's RetryInfo
}

// CooldownStatus is an endpoint's overload cooldown, in its PoolStatus: after a
// RESOURCE_EXHAUSTED the endpoint is skipped for new calls while another endpoint of the
// group is available (docs/health.md, "Overload cooldown").
type CooldownStatus struct {
	// Cooling: the endpoint is in a cooldown now, until Until.
	Cooling bool `json:"cooling"`
	// Until is when the current (or the last) cooldown ends.
	Until time.Time `json:"until"`
	// Length is the current (or the last) cooldown's length: the server's RetryInfo delay
	// (FromRetryInfo), else a jittered 5 to 10 s doubled for each repeat, 60 s at most. In
	// JSON it is a Go duration string such as "3s".
	Length time.Duration `json:"length"`
	// FromRetryInfo: Length is the server's RetryInfo delay.
	FromRetryInfo bool `json:"fromRetryInfo,omitempty"`
	// Repeats counts the cooldowns since the endpoint last went 10 minutes without a
	// RESOURCE_EXHAUSTED, the current one included.
	Repeats int `json:"repeats"`
	// Total counts the endpoint's cooldowns since the GCPMultiEndpoint was created.
	Total int64 `json:"total"`
	// LastOverload is when the endpoint last answered RESOURCE_EXHAUSTED.
	LastOverload time.Time `json:"lastOverload"`
}

// cooldownStatusJSON is CooldownStatus with its Length as a string.
type cooldownStatusJSON struct {
	cooldownStatusAlias
	Length string `json:"length"`
}

type cooldownStatusAlias CooldownStatus

// MarshalJSON writes Length as a Go duration string ("3s"), as GroupStatus does its
// durations.
func (c CooldownStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(cooldownStatusJSON{cooldownStatusAlias(c), c.Length.String()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *CooldownStatus) UnmarshalJSON(b []byte) error {
	var j cooldownStatusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = CooldownStatus(j.cooldownStatusAlias)
	var err error
	c.Length, err = textform.ParseDuration(j.Length)
	return err
}

// cooling reports whether endpoint is in an overload cooldown. It takes no lock and
// allocates nothing while no endpoint cools.
func (c *cooldowns) cooling(endpoint string) bool {
	if c.active.Load() == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[endpoint]
	return e != nil && e.cooling
}

// statusOf returns endpoint's cooldown state, nil if it never cooled.
func (c *cooldowns) statusOf(endpoint string) *CooldownStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[endpoint]
	if e == nil {
		return nil
	}
	return &CooldownStatus{Cooling: e.cooling, Until: e.until, Length: e.length, FromRetryInfo: e.fromInfo,
		Repeats: e.repeats, Total: e.total, LastOverload: e.last}
}

// close stops every timer; later overloads start nothing.
func (c *cooldowns) close() {
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

// retryDelay returns the delay of the RetryInfo detail of err's status, if it has one
// (google.rpc.RetryInfo, which Spanner sends with RESOURCE_EXHAUSTED and ABORTED; the
// Spanner client reads it the same way: cloud.google.com/go/spanner v1.96.1, retry.go
// ExtractRetryDelay).
func retryDelay(err error) (time.Duration, bool) {
	s, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range s.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if d := ri.GetRetryDelay().AsDuration(); d > 0 {
				return d, true
			}
		}
	}
	return 0, false
}

// noteOverload starts endpoint's cooldown after a call on it ended with err, a
// RESOURCE_EXHAUSTED status: for the server's RetryInfo delay if err has one, else for a
// jittered cooldownMin to cooldownMax doubled for each cooldown since the endpoint's last
// quiet period; both capped at cooldownCap. An overload during a cooldown only extends it to
// its own RetryInfo delay (the calls in flight when it began end the same way: they are no
// repeat). The groups are evaluated again when a cooldown starts (here) and when it ends
// (its timer, on the injected clock).
func (gme *GCPMultiEndpoint) noteOverload(endpoint string, err error) {
	c := &gme.cool
	clk := gme.pl.clock
	delay, fromInfo := retryDelay(err)
	delay = min(delay, cooldownCap)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.m == nil {
		c.m = make(map[string]*cooldown)
	}
	e := c.m[endpoint]
	if e == nil {
		e = &cooldown{}
		c.m[endpoint] = e
	}
	now := clk.Now()
	if !e.last.IsZero() && now.Sub(e.last) >= cooldownQuiet {
		e.repeats = 0
	}
	e.last = now
	if e.cooling {
		extended := fromInfo && now.Add(delay).After(e.until)
		if extended {
			e.until, e.length, e.fromInfo = now.Add(delay), delay, true
			gme.armCooldownLocked(endpoint, e, delay)
		}
		c.mu.Unlock()
		return
	}
	e.repeats++
	if !fromInfo {
		base := cooldownMin + rand.N(cooldownMax-cooldownMin)
		delay = min(base<<min(e.repeats-1, 8), cooldownCap)
	}
	e.cooling, e.until, e.length, e.fromInfo = true, now.Add(delay), delay, fromInfo
	e.total++
	c.active.Add(1)
	gme.armCooldownLocked(endpoint, e, delay)
	repeats := e.repeats
	c.mu.Unlock()

	gme.obs.cooling(endpoint, gme.endpointName(endpoint), delay, fromInfo, repeats)
	gme.evaluateAll()
	gme.changed.signal()
}

// armCooldownLocked (re)starts e's timer for d; c.mu is held.
func (gme *GCPMultiEndpoint) armCooldownLocked(endpoint string, e *cooldown, d time.Duration) {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.gen++
	gen := e.gen
	e.timer = gme.pl.clock.AfterFunc(d, func() { gme.endCooldown(endpoint, gen) })
}

// endCooldown ends endpoint's cooldown of generation gen, unless a later one replaced it or
// gme closed, and evaluates the groups again.
func (gme *GCPMultiEndpoint) endCooldown(endpoint string, gen uint64) {
	c := &gme.cool
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

	gme.obs.cooled(endpoint, gme.endpointName(endpoint), length)
	gme.evaluateAll()
	gme.changed.signal()
}

// overloaded reports whether err is RESOURCE_EXHAUSTED.
func overloaded(err error) bool {
	return status.Code(err) == codes.ResourceExhausted
}

// cooling logs and counts the start of endpoint's overload cooldown.
func (o *observer) cooling(endpoint, name string, d time.Duration, fromInfo bool, repeats int) {
	o.log(slog.LevelWarn, o.now(), "spannerme: endpoint cooling down after RESOURCE_EXHAUSTED; groups skip it while another endpoint is available",
		endpointArgs(endpoint, name, "for", d.Round(time.Millisecond), "from_retry_info", fromInfo, "repeats", repeats)...)
	o.metrics.cooldowns.Add(context.Background(), 1, metric.WithAttributes(endpointAttrs(endpoint, name)...))
}

// cooled logs the end of endpoint's overload cooldown of length d.
func (o *observer) cooled(endpoint, name string, d time.Duration) {
	o.log(slog.LevelInfo, o.now(), "spannerme: endpoint cooldown over", endpointArgs(endpoint, name, "cooled_for", d.Round(time.Millisecond))...)
}

// Values of AttrRerouteReason.
const (
	rerouteRetry    = "retry_elsewhere"
	rerouteOverload = "overload_cooldown"
	rerouteRefused  = "refused_by_budget"
)

// rerouted counts a call sent elsewhere than its group's pick (or, for rerouteRefused, a
// retry the budget kept where it was).
func (m *metrics) rerouted(reason string) {
	m.reroutes.Add(context.Background(), 1, metric.WithAttributes(attribute.String(AttrRerouteReason, reason)))
}
