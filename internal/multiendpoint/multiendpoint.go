// Package multiendpoint is the state machine behind one MultiEndpoint: a list of endpoints
// ordered by priority, each endpoint's availability, and the one current endpoint that calls
// use.
//
// The rules (docs/design.md tells how they fit with the rest):
//
//  1. A new endpoint starts Recovering when RecoveryTimeout > 0 (time to connect); an
//     endpoint ready when it is added (Options.InitialState) starts Available. With
//     RecoveryTimeout 0, an endpoint known to be down starts Unavailable, and one whose first
//     connection attempt is still under way starts Recovering until it is reported ready or
//     not, ConnectGrace at most: so at startup the first endpoint is not passed over merely
//     because another one connected a moment sooner. The first endpoint is current at
//     creation.
//  2. When an Available endpoint stops being available it becomes Recovering and, if it is
//     still not available exactly RecoveryTimeout after it left Available, Unavailable. With
//     RecoveryTimeout 0 it becomes Unavailable at once. Repeated not-available reports never
//     restart that clock. Flapping does not restart it either: an endpoint that comes back is
//     on probation for RecoveryTimeout, and a drop during probation continues the clock of
//     its first drop; so an endpoint that already spent its RecoveryTimeout (it had been
//     Unavailable) is Unavailable again at once, and one that drops every 100ms is
//     Unavailable RecoveryTimeout after its first drop and stays so at each later drop
//     (scenario F4). Only a drop after a whole probation starts a fresh Recovering period.
//     The first connection of an endpoint added not available is no recovery: no probation.
//  3. Current is the highest-priority Available endpoint, except that: a Recovering current
//     endpoint is kept while nothing of higher priority is Available; a switch away from an
//     Available current endpoint waits SwitchingDelay, during which the target must stay
//     Available (one pending switch at most, retargeted or cancelled as states change); an
//     Unavailable or removed current endpoint is left at once; when nothing is Available the
//     current endpoint is kept, or, if it was removed, the top-priority endpoint is taken.
//     The delay is the target's own: a switch lands SwitchingDelay after its target's last
//     return to Available (at once if that is already past), never later because another
//     endpoint came or went meanwhile. A reconfiguration that adds an endpoint, or moves it
//     above an endpoint it was below, counts as its arrival there: its delay counts from the
//     reconfiguration (scenario F2). With SwitchingJitter, each such switch lands later by a
//     random part of SwitchingDelay, drawn once per return (scenario F22).
//  4. SetEndpoints keeps the states of kept endpoints, adds new ones as in rule 1, reorders,
//     and applies rule 3. SetTimeouts changes both durations at runtime; running clocks keep
//     their start and take the new length.
//  5. Every timer is owned, stopped on transition and on Close; a superseded timer's callback
//     is a no-op (generation counters). Nothing runs after Close.
//  6. Current is lock-free. Each change of current emits an Event.
//
// With tiers (Options.Tiers, ReconfigureTiers; tiers.go) these rules apply to tiers of
// endpoints of equal priority instead of single endpoints, and Tier publishes the current
// tier's Available members for spreading calls over them (package spread).
package multiendpoint

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/ordered"
)

// Options configures a MultiEndpoint.
type Options struct {
	// Name names the MultiEndpoint in errors, events and status. Optional.
	Name string
	// Endpoints lists the endpoints by priority, index 0 first. Required unless Tiers is set:
	// at least one, none empty, no duplicates.
	Endpoints []string
	// RecoveryTimeout is how long an endpoint may be not available before it counts as
	// Unavailable. Zero means at once. Negative is an error.
	RecoveryTimeout time.Duration
	// SwitchingDelay is how long a higher-priority endpoint must stay Available before traffic
	// moves to it from an Available current endpoint. Zero means at once. Negative is an error.
	// Any positive value is accepted: with SwitchingJitter the delay saturates at the largest
	// time.Duration (about 292 years) rather than overflowing, so a huge delay means never.
	SwitchingDelay time.Duration
	// InitialState, if not nil, tells what is known of an endpoint at the moment it is added
	// (by New, SetEndpoints or Reconfigure): Available if it is ready, Unavailable if its
	// connection attempts have failed, Recovering if its first attempt is still under way
	// (unknown). Nil means Recovering for every endpoint. With RecoveryTimeout > 0 a
	// not-ready endpoint starts Recovering either way (rule 1: time to connect). It is called
	// without any lock held, before the change is applied.
	InitialState func(endpoint string) State
	// SwitchingJitter spreads the switches that wait SwitchingDelay (rule 3): such a switch
	// lands SwitchingDelay×(1 + SwitchingJitter×u) after its target's return to Available
	// (or its arrival by reconfiguration), where u is drawn from Rand, uniform in [0, 1), once
	// per return. So it never lands before SwitchingDelay, and always before
	// SwitchingDelay×(1 + SwitchingJitter): clients that see one endpoint recover at the same
	// moment switch back spread over that window instead of all at once (scenario F22).
	// Retargeting keeps each target's own draw. Zero means no jitter. It must be in [0, 1]:
	// otherwise (NaN included) New returns a *ConfigError.
	SwitchingJitter float64
	// Rand returns the random numbers for SwitchingJitter, uniform in [0, 1); values outside
	// are clamped into it. It is called only when SwitchingJitter > 0, with the
	// MultiEndpoint's lock held, once per endpoint return or arrival (within one
	// reconfiguration: the endpoints moved up first, then the added ones, each in priority
	// order); if shared by several MultiEndpoints it must be safe for concurrent
	// use. Nil means math/rand/v2's Float64.
	Rand func() float64
	// ConnectGrace applies with RecoveryTimeout 0: how long a new endpoint whose first
	// connection attempt is under way stays Recovering, unless reported ready or not before.
	// Zero means no grace: such an endpoint starts Unavailable. Negative is treated as zero.
	ConnectGrace time.Duration
	// OnSwitch, if not nil, receives every change of the current endpoint, in order, one at a
	// time, with no lock of the MultiEndpoint held (it may call the MultiEndpoint): on the
	// goroutine that caused the change, or on one that is already delivering events. New may
	// call it before it returns (e.g. RecoveryTimeout 0 and only a lower endpoint ready). Events
	// still queued when Close is called are dropped. It must not block for long.
	OnSwitch func(Event)
	// Clock is the time source. Nil means the real clock.
	Clock clock.Clock
	// Tiers, if not nil, partitions the endpoints into tiers of equal priority, the top tier
	// first; Endpoints must then be empty (see tiers.go for the rules). Flattened in order,
	// the tiers are the priority list that Endpoints would be: Status.Endpoints, Priority,
	// InitialState and Rand see the endpoints in that order. Nil means every endpoint is its
	// own tier (Endpoints), exactly the behaviour without tiers; Tier then returns nil.
	Tiers [][]string
	// SlowStart applies with Tiers: how long after a switch back to a higher tier (Reason
	// Recovery) the tier switched away from keeps a share of the calls (Tier.Previous), while
	// one of its members is Available. Zero means no ramp. Negative is an error.
	SlowStart time.Duration
}

// MultiEndpoint tracks a prioritized endpoint list and picks the current endpoint. Create it
// with New. All methods are safe for concurrent use; Current never blocks.
type MultiEndpoint struct {
	name         string
	clock        clock.Clock
	onSwitch     func(Event)
	initial      func(string) State
	connectGrace time.Duration
	jitter       float64        // Options.SwitchingJitter
	rand         func() float64 // Options.Rand, never nil

	current atomic.Pointer[string] // written under mu, read without it
	view    atomic.Pointer[Tier]   // tiered only: written under mu, read without it
	tiered  bool                   // Options.Tiers or ReconfigureTiers: publish views

	mu              sync.Mutex // guards every field below
	endpoints       map[string]*endpoint
	order           []*endpoint // by priority
	tiers           [][]*endpoint
	slowStart       time.Duration
	ramp            *ramp // the slow start of the last switch back, nil: none
	recoveryTimeout time.Duration
	switchingDelay  time.Duration
	pending         *pendingSwitch
	switchGen       uint64
	closed          bool
	events          ordered.Queue[Event] // emitted, not yet delivered to OnSwitch
}

type endpoint struct {
	id       string
	priority int
	tier     int       // index in m.tiers; equals priority without tiers
	joined   time.Time // when it last became Available or joined its tier
	state    State
	since    time.Time
	// leftAvailable is when the recovery clock started: when the endpoint left a stable
	// Available (one not on probation), or when it was added. A return does not move it.
	leftAvailable time.Time
	// probation: the endpoint is Available again, but for less than RecoveryTimeout; if it
	// fails now, its recovery clock continues from leftAvailable instead of restarting.
	probation bool
	// upSince is when the switching delay of a switch to this endpoint started: its last
	// return to Available, or the reconfiguration that added it or moved it above an
	// endpoint it was below, whichever is later (rule 3).
	upSince time.Time
	// jitterDraw is the draw in [0, 1) made with upSince: the switch to this endpoint lands
	// SwitchingDelay×(1 + SwitchingJitter×jitterDraw) after upSince.
	jitterDraw float64
	// fresh: added not available and never Available since.
	fresh bool
	gen   uint64 // bumped on every transition; a recovery timer of an older gen is stale
	timer clock.Timer
}

type pendingSwitch struct {
	target string
	due    time.Time // the target's upSince + SwitchingDelay
	reason Reason
	timer  clock.Timer
	gen    uint64
}

// New validates opts and returns a MultiEndpoint whose current endpoint is opts.Endpoints[0].
// It returns a *ConfigError wrapping ErrInvalidConfig for an empty list, an empty or duplicate
// endpoint, or a negative duration.
func New(opts Options) (*MultiEndpoint, error) {
	list, tierOf, err := flattenOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := ValidateDurations(opts.Name, opts.RecoveryTimeout, opts.SwitchingDelay); err != nil {
		return nil, err
	}
	if err := ValidateSwitchingJitter(opts.Name, opts.SwitchingJitter); err != nil {
		return nil, err
	}
	if opts.SlowStart < 0 {
		return nil, &ConfigError{Group: opts.Name, Index: -1, Problem: fmt.Sprintf("negative SlowStart %v", opts.SlowStart)}
	}
	m := &MultiEndpoint{
		tiered:          opts.Tiers != nil,
		slowStart:       opts.SlowStart,
		name:            opts.Name,
		clock:           opts.Clock,
		onSwitch:        opts.OnSwitch,
		initial:         opts.InitialState,
		connectGrace:    opts.ConnectGrace,
		jitter:          opts.SwitchingJitter,
		rand:            opts.Rand,
		endpoints:       make(map[string]*endpoint, len(list)),
		recoveryTimeout: opts.RecoveryTimeout,
		switchingDelay:  opts.SwitchingDelay,
	}
	if m.clock == nil {
		m.clock = clock.Real
	}
	if m.rand == nil {
		m.rand = rand.Float64
	}
	ready := m.initialStates(list)
	first := list[0]
	m.current.Store(&first)
	m.mu.Lock()
	now := m.clock.Now()
	for i, id := range list {
		m.addLocked(id, i, ready[id], now)
	}
	m.reorderLocked(list, tierOf, now)
	m.updateCurrentLocked(0)
	m.mu.Unlock()
	m.deliver()
	return m, nil
}

// Name returns Options.Name.
func (m *MultiEndpoint) Name() string { return m.name }

// Current returns the endpoint that calls should use now. It takes no lock and does not
// allocate.
func (m *MultiEndpoint) Current() string { return *m.current.Load() }

// SetEndpointAvailability reports whether endpoint has at least one ready connection. Unknown
// endpoints are ignored, and so is any call after Close. Reporting the state an endpoint is
// already in changes nothing (in particular it never restarts the recovery clock or a pending
// switch).
func (m *MultiEndpoint) SetEndpointAvailability(endpoint string, available bool) {
	m.mu.Lock()
	e, ok := m.endpoints[endpoint]
	if !ok || m.closed {
		m.mu.Unlock()
		return
	}
	now := m.clock.Now()
	switch {
	case available && e.state != Available:
		// leftAvailable stays: a drop during the probation continues that clock (rule 2).
		m.setStateLocked(e, Available, now)
		m.arriveLocked(e, now)
		e.joined = now
		if m.recoveryTimeout > 0 && !e.fresh { // a first connection is no recovery
			e.probation = true
			m.scheduleStableLocked(e, m.recoveryTimeout)
		}
		e.fresh = false
	case !available && e.state == Recovering && m.recoveryTimeout == 0:
		// Its first connection attempt failed (rule 1: only then is an endpoint Recovering
		// with RecoveryTimeout 0).
		m.setStateLocked(e, Unavailable, now)
	case !available && e.state == Available:
		if !e.probation {
			e.leftAvailable = now // a fresh failure: a fresh recovery clock
		}
		if left := e.leftAvailable.Add(m.recoveryTimeout).Sub(now); m.recoveryTimeout > 0 && left > 0 {
			m.setStateLocked(e, Recovering, now)
			m.scheduleUnavailableLocked(e, left)
		} else {
			m.setStateLocked(e, Unavailable, now)
		}
	default:
		m.mu.Unlock()
		return
	}
	m.updateCurrentLocked(0)
	m.mu.Unlock()
	m.deliver()
}

// SetEndpoints replaces the endpoint list (rule 4). Kept endpoints keep their state; new ones
// start as in rule 1; the current endpoint is chosen again by rule 3. It returns a
// *ConfigError (and changes nothing) for an empty list or an empty or duplicate endpoint, and
// ErrClosed after Close.
func (m *MultiEndpoint) SetEndpoints(endpoints []string) error {
	if err := ValidateEndpoints(m.name, endpoints); err != nil {
		return err
	}
	return m.reconfigure(endpoints, nil, nil)
}

// SetTimeouts changes RecoveryTimeout and SwitchingDelay at runtime. Clocks already running
// keep their start: a Recovering endpoint becomes Unavailable at (left Available +
// recoveryTimeout), at once if that is past; a probation ends at (back Available +
// recoveryTimeout); a pending switch lands at (its target's return + switchingDelay), at once
// if that is past. It returns a *ConfigError for a negative duration and ErrClosed after Close; on
// error nothing changes.
func (m *MultiEndpoint) SetTimeouts(recoveryTimeout, switchingDelay time.Duration) error {
	if err := ValidateDurations(m.name, recoveryTimeout, switchingDelay); err != nil {
		return err
	}
	return m.reconfigure(nil, nil, &durations{recoveryTimeout, switchingDelay})
}

// Reconfigure is SetEndpoints and SetTimeouts in one step: rule 3 is applied once, to the
// whole new configuration, so no switch is made for a half-applied one. Errors are those of
// both; on error nothing changes.
func (m *MultiEndpoint) Reconfigure(endpoints []string, recoveryTimeout, switchingDelay time.Duration) error {
	if err := ValidateEndpoints(m.name, endpoints); err != nil {
		return err
	}
	if err := ValidateDurations(m.name, recoveryTimeout, switchingDelay); err != nil {
		return err
	}
	return m.reconfigure(endpoints, nil, &durations{recoveryTimeout, switchingDelay})
}

type durations struct{ recoveryTimeout, switchingDelay time.Duration }

// reconfigure applies a validated endpoint list (nil: unchanged) with its tiers (tierOf[i] is
// endpoints[i]'s tier; nil: each endpoint its own tier) and durations (nil: unchanged), then
// rule 3 once.
func (m *MultiEndpoint) reconfigure(endpoints []string, tierOf []int, d *durations) error {
	var ready map[string]State
	if endpoints != nil {
		ready = m.initialStates(endpoints)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	now := m.clock.Now()
	if d != nil {
		m.recoveryTimeout = d.recoveryTimeout // new endpoints start by the new rules
	}
	if endpoints != nil {
		m.endRampLocked() // the tiers it ramps between may be gone or renumbered
		m.setEndpointsLocked(endpoints, tierOf, ready, now)
	}
	if d != nil {
		m.setTimeoutsLocked(d.recoveryTimeout, d.switchingDelay, now)
	}
	m.updateCurrentLocked(Reconfiguration)
	m.mu.Unlock()
	m.deliver()
	return nil
}

// setEndpointsLocked is rule 4 without rule 3. m.mu must be held.
func (m *MultiEndpoint) setEndpointsLocked(endpoints []string, tierOf []int, ready map[string]State, now time.Time) {
	keep := make(map[string]bool, len(endpoints))
	for _, id := range endpoints {
		keep[id] = true
	}
	for id, e := range m.endpoints {
		if !keep[id] {
			m.stopTimerLocked(e)
			delete(m.endpoints, id)
		}
	}
	raised := m.raisedLocked(endpoints, tierOf)
	for _, e := range raised {
		m.arriveLocked(e, now) // at its new rank: its switching delay counts from here (F2)
	}
	if p := m.pending; p != nil && (!keep[p.target] || slices.Contains(raised, m.endpoints[p.target])) {
		m.cancelSwitchLocked() // rule 3 chooses again, by the new list
	}
	for i, id := range endpoints {
		if _, ok := m.endpoints[id]; !ok {
			m.addLocked(id, i, ready[id], now)
		}
	}
	m.reorderLocked(endpoints, tierOf, now)
}

// raisedLocked returns the kept endpoints that the new list moves above an endpoint they were
// below: into a higher tier than an endpoint whose tier was higher than theirs (without tiers,
// a tier is a position). It must run before new endpoints are added, while tiers are the old
// ones. m.mu must be held.
func (m *MultiEndpoint) raisedLocked(endpoints []string, tierOf []int) []*endpoint {
	var raised []*endpoint
	minBelow := -1 // the highest old tier (lowest index) among kept endpoints in a lower new tier, -1: none yet
	tierMin := -1  // the same among the kept endpoints of the new tier being walked
	newTier := -1  // the new tier being walked
	for i := len(endpoints) - 1; i >= 0; i-- {
		if t := tierAt(tierOf, i); t != newTier {
			newTier = t
			if tierMin >= 0 && (minBelow < 0 || tierMin < minBelow) {
				minBelow = tierMin
			}
			tierMin = -1
		}
		e, ok := m.endpoints[endpoints[i]]
		if !ok {
			continue
		}
		if minBelow >= 0 && minBelow < e.tier {
			raised = append(raised, e)
		}
		if tierMin < 0 || e.tier < tierMin {
			tierMin = e.tier
		}
	}
	slices.Reverse(raised) // priority order, as Options.Rand promises
	return raised
}

// setTimeoutsLocked changes the durations, keeping the start of every running clock, without
// rule 3. m.mu must be held.
func (m *MultiEndpoint) setTimeoutsLocked(recoveryTimeout, switchingDelay time.Duration, now time.Time) {
	m.recoveryTimeout, m.switchingDelay = recoveryTimeout, switchingDelay
	for _, e := range m.order {
		switch {
		case e.state == Recovering:
			limit := recoveryTimeout
			if limit == 0 && e.fresh {
				limit = m.connectGrace // still on its first attempt (rule 1)
			}
			if left := e.leftAvailable.Add(limit).Sub(now); left <= 0 {
				m.setStateLocked(e, Unavailable, now)
			} else {
				m.scheduleUnavailableLocked(e, left)
			}
		case e.probation:
			if left := e.since.Add(recoveryTimeout).Sub(now); left <= 0 {
				m.stopTimerLocked(e)
				e.probation = false
			} else {
				m.scheduleStableLocked(e, left)
			}
		}
	}
	if p := m.pending; p != nil {
		p.timer.Stop()
		m.switchGen++
		p.gen = m.switchGen
		p.due = m.switchDueLocked(m.endpoints[p.target])
		if left := p.due.Sub(now); left > 0 {
			m.armSwitchLocked(p, left)
		} else {
			m.pending = nil
			if e := m.endpoints[p.target]; e != nil && e.state == Available {
				m.switchLocked(m.leadLocked(e.tier).id, p.reason, now)
			}
		}
	}
}

// Status returns a snapshot of the MultiEndpoint.
func (m *MultiEndpoint) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Status{
		Name:            m.name,
		Current:         m.Current(),
		RecoveryTimeout: m.recoveryTimeout,
		SwitchingDelay:  m.switchingDelay,
		Endpoints:       make([]EndpointStatus, len(m.order)),
		Closed:          m.closed,
	}
	if m.tiered {
		s.Tiers = tierIDs(m.tiers)
		s.CurrentTier = m.endpoints[s.Current].tier
		if r := m.ramp; r != nil {
			s.SlowStartFrom, s.SlowStartSince = r.from, r.start
		}
	}
	if p := m.pending; p != nil {
		s.PendingSwitch, s.PendingSwitchAt = p.target, p.due
	}
	for i, e := range m.order {
		s.Endpoints[i] = EndpointStatus{Endpoint: e.id, Priority: e.priority, State: e.state, Since: e.since}
	}
	return s
}

// Close stops every timer. Afterwards no timer callback changes anything, no Event is emitted
// (one being delivered on another goroutine at that moment completes), Current keeps returning
// the last current endpoint, and SetEndpoints and SetTimeouts return ErrClosed. Close is
// idempotent.
func (m *MultiEndpoint) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.closed = true
	for _, e := range m.order {
		m.stopTimerLocked(e)
	}
	m.cancelSwitchLocked()
	m.endRampLocked()
	m.events.Drop()
}

// initialStates asks Options.InitialState about each endpoint, with no lock held; a missing
// answer means Recovering (unknown).
func (m *MultiEndpoint) initialStates(endpoints []string) map[string]State {
	states := make(map[string]State, len(endpoints))
	for _, id := range endpoints {
		states[id] = Recovering
		if m.initial != nil {
			states[id] = m.initial(id)
		}
	}
	return states
}

// addLocked adds a new endpoint by rule 1. m.mu must be held.
func (m *MultiEndpoint) addLocked(id string, priority int, initial State, now time.Time) {
	e := &endpoint{id: id, priority: priority, tier: -1, since: now, joined: now, leftAvailable: now, fresh: initial != Available}
	m.arriveLocked(e, now)
	m.endpoints[id] = e
	switch {
	case initial == Available:
		e.state = Available
	case m.recoveryTimeout > 0:
		e.state = Recovering
		m.scheduleUnavailableLocked(e, m.recoveryTimeout)
	case initial == Unavailable || m.connectGrace <= 0:
		e.state = Unavailable
	default:
		// Until its first attempt is reported, ConnectGrace at most.
		e.state = Recovering
		m.scheduleUnavailableLocked(e, m.connectGrace)
	}
}

// reorderLocked sets priorities, tiers and m.order from the list; tierOf[i] is endpoints[i]'s
// tier, nil: each endpoint its own. An endpoint that changes tier joins its new one now. m.mu
// must be held.
func (m *MultiEndpoint) reorderLocked(endpoints []string, tierOf []int, now time.Time) {
	m.order = m.order[:0]
	m.tiers = m.tiers[:0]
	for i, id := range endpoints {
		e := m.endpoints[id]
		e.priority = i
		if t := tierAt(tierOf, i); t != e.tier {
			e.tier, e.joined = t, now
		}
		m.order = append(m.order, e)
		if e.tier == len(m.tiers) {
			m.tiers = append(m.tiers, nil)
		}
		m.tiers[e.tier] = append(m.tiers[e.tier], e)
	}
}

// setStateLocked moves e to state s, stopping its timer and ending any probation. m.mu must
// be held.
func (m *MultiEndpoint) setStateLocked(e *endpoint, s State, now time.Time) {
	m.stopTimerLocked(e)
	e.state = s
	e.since = now
	e.probation = false
}

// scheduleStableLocked ends e's probation after d unless it changes state first. m.mu must be
// held.
func (m *MultiEndpoint) scheduleStableLocked(e *endpoint, d time.Duration) {
	m.armLocked(e, d, func() { e.probation = false })
}

// scheduleUnavailableLocked makes Recovering e Unavailable after d unless it changes state
// first. m.mu must be held.
func (m *MultiEndpoint) scheduleUnavailableLocked(e *endpoint, d time.Duration) {
	m.armLocked(e, d, func() {
		m.setStateLocked(e, Unavailable, m.clock.Now())
		m.updateCurrentLocked(0)
	})
}

// armLocked replaces e's timer with one that runs fire, under m.mu, after d, unless e has
// changed state (its generation), been removed, or the MultiEndpoint closed by then; events
// fire queues are delivered afterwards. m.mu must be held.
func (m *MultiEndpoint) armLocked(e *endpoint, d time.Duration, fire func()) {
	m.stopTimerLocked(e)
	gen := e.gen
	e.timer = m.clock.AfterFunc(d, func() {
		m.mu.Lock()
		if m.closed || e.gen != gen || m.endpoints[e.id] != e {
			m.mu.Unlock()
			return
		}
		e.timer = nil
		fire()
		m.mu.Unlock()
		m.deliver()
	})
}

// stopTimerLocked stops e's timer and makes any callback of it already running stale. m.mu
// must be held.
func (m *MultiEndpoint) stopTimerLocked(e *endpoint) {
	e.gen++
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}

// updateCurrentLocked applies rule 3 to tiers (without tiers, each endpoint is its own),
// makes the current tier's lead member current, and publishes the tier view. cause is
// Reconfiguration when called for SetEndpoints or SetTimeouts, else 0 (the reason then
// follows from priorities). m.mu must be held.
func (m *MultiEndpoint) updateCurrentLocked(cause Reason) {
	m.chooseTierLocked(cause)
	if cur, ok := m.endpoints[m.Current()]; ok {
		if l := m.leadLocked(cur.tier); l != nil && l != cur {
			id := l.id // a move inside the current tier: no switch, no Event
			m.current.Store(&id)
		}
	}
	m.publishLocked()
}

// chooseTierLocked is rule 3, on tiers. m.mu must be held.
func (m *MultiEndpoint) chooseTierLocked(cause Reason) {
	now := m.clock.Now()
	cur, exists := m.endpoints[m.Current()]
	top := -1 // the highest tier with an Available member
	for t := range m.tiers {
		if m.leadLocked(t) != nil {
			top = t
			break
		}
	}
	switch {
	case top < 0:
		m.cancelSwitchLocked()
		if !exists {
			m.switchLocked(m.order[0].id, Reconfiguration, now)
		}
	case exists && cur.tier == top:
		m.cancelSwitchLocked()
	case exists && m.tierStateLocked(cur.tier) == Recovering && top > cur.tier:
		// Let the current tier recover while nothing better is available.
		m.cancelSwitchLocked()
	case exists && m.tierStateLocked(cur.tier) == Available && m.switchingDelay > 0:
		reason := cause
		if reason == 0 {
			reason = Recovery
		}
		// The member whose own delay ends first times the switch: from its last return,
		// not from now (another endpoint may have come or gone meanwhile and retargeted
		// the switch). Without tiers it is the tier's one endpoint.
		target := m.firstDueLocked(top)
		if p := m.pending; p != nil && p.target == target.id {
			return // already waiting for this target; never restart the wait
		}
		m.cancelSwitchLocked()
		due := m.switchDueLocked(target)
		if !due.After(now) {
			m.switchLocked(m.leadLocked(top).id, reason, now)
			return
		}
		p := &pendingSwitch{target: target.id, due: due, reason: reason}
		m.pending = p
		m.armSwitchLocked(p, due.Sub(now))
	default:
		m.cancelSwitchLocked()
		reason := cause
		if reason == 0 {
			reason = Fallback
			if exists && top < cur.tier {
				reason = Recovery
			}
		}
		m.switchLocked(m.leadLocked(top).id, reason, now)
	}
}

// arriveLocked starts e's switching delay at now: it returned to Available, was added, or
// was raised above an endpoint by a reconfiguration. m.mu must be held.
func (m *MultiEndpoint) arriveLocked(e *endpoint, now time.Time) {
	e.upSince = now
	if m.jitter > 0 {
		e.jitterDraw = clampDraw(m.rand())
	}
}

// switchDueLocked is when a switch to Available e lands (rule 3). The delay saturates at the
// largest time.Duration (about 292 years): a huge SwitchingDelay with jitter means "not in
// this process's lifetime", never a negative delay that would switch at once. m.mu must be
// held.
func (m *MultiEndpoint) switchDueLocked(e *endpoint) time.Time {
	return e.upSince.Add(saturatingAdd(m.switchingDelay, switchingJitter(m.switchingDelay, m.jitter, e.jitterDraw)))
}

// saturatingAdd is a+b for non-negative durations, capped at the largest time.Duration
// instead of wrapping around to a negative one.
func saturatingAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// clampDraw brings a draw of Options.Rand into [0, 1); NaN counts as 0.
func clampDraw(u float64) float64 {
	switch {
	case !(u >= 0): // negative or NaN
		return 0
	case u >= 1:
		return math.Nextafter(1, 0)
	}
	return u
}

// switchingJitter is the random part of a switch's delay: switchingDelay×jitter×draw, capped
// at the largest time.Duration (converting a float64 beyond it is implementation-defined).
func switchingJitter(switchingDelay time.Duration, jitter, draw float64) time.Duration {
	f := float64(switchingDelay) * jitter * draw
	if !(f < math.MaxInt64) { // float64(MaxInt64) rounds up to 2^63; NaN too
		if f > 0 {
			return math.MaxInt64
		}
		return 0
	}
	return time.Duration(f)
}

// armSwitchLocked (re)starts p's timer for d. m.mu must be held.
func (m *MultiEndpoint) armSwitchLocked(p *pendingSwitch, d time.Duration) {
	m.switchGen++
	gen := m.switchGen
	p.gen = gen
	p.timer = m.clock.AfterFunc(d, func() {
		m.mu.Lock()
		if m.closed || m.pending != p || p.gen != gen {
			m.mu.Unlock()
			return
		}
		m.pending = nil
		if e, ok := m.endpoints[p.target]; ok && e.state == Available {
			m.switchLocked(m.leadLocked(e.tier).id, p.reason, m.clock.Now())
		}
		m.updateCurrentLocked(0)
		m.mu.Unlock()
		m.deliver()
	})
}

func (m *MultiEndpoint) cancelSwitchLocked() {
	if p := m.pending; p != nil {
		m.switchGen++
		p.timer.Stop()
		m.pending = nil
	}
}

// switchLocked makes id current and queues the Event. m.mu must be held.
func (m *MultiEndpoint) switchLocked(id string, reason Reason, now time.Time) {
	from := m.Current()
	if from == id {
		return
	}
	m.current.Store(&id)
	m.switchedLocked(from, id, reason, now)
	if m.onSwitch != nil {
		m.events.Push(Event{Name: m.name, From: from, To: id, Reason: reason, At: now})
	}
}

// deliver hands queued events to OnSwitch, in order, with no lock held (package ordered):
// only one goroutine delivers at a time, and others leave their events to it.
func (m *MultiEndpoint) deliver() {
	if m.onSwitch != nil {
		m.events.Deliver(&m.mu, func() bool { return m.closed }, m.onSwitch)
	}
}
