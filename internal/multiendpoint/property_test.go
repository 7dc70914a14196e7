package multiendpoint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// The property test drives random event sequences against the MultiEndpoint on a fake clock
// and against refModel, a reference written from the rules of the package
// doc. The model keeps no timers: it keeps, per endpoint, the state, when it entered
// it, when its recovery clock started and when its switching delay started, plus the pending
// switch's target and due time, and computes every deadline explicitly when time moves.
//
// Rule 2 as the package doc states it: a drop during probation continues the clock of the first
// drop (a return never moves it), so an endpoint that had been Unavailable is Unavailable
// again at once; only a drop after a whole probation starts a fresh clock. Rule 3: a switch
// lands SwitchingDelay after its target's own last return to Available (at once if already
// past), however often the pending switch was retargeted meanwhile; a reconfiguration that
// adds an endpoint or moves it above one it was below counts as its arrival (F2). With
// SwitchingJitter, that delay is SwitchingDelay×(1 + jitter×u), u drawn at each return or
// arrival from the same seeded source as the implementation's, in priority order.

// refEndpoint is one endpoint in the model.
type refEndpoint struct {
	state State
	since time.Time // when it entered state (or was added)
	left  time.Time // when its recovery clock started (left a stable Available, or was added); a return never moves it
	// stableAt is when the probation of an Available endpoint ends (zero: stable). A failure
	// before then continues the recovery clock from left.
	stableAt time.Time
	fresh    bool // added not ready and never Available since: its first connection is no recovery
	// upSince is when a switch to it starts its SwitchingDelay: its last return to Available,
	// or the reconfiguration that added it or raised it above an endpoint, whichever is later.
	upSince time.Time
	draw    float64 // the jitter draw made with upSince
	// joined is when it last became Available or joined its tier (tiers only: Tier.Joined).
	joined time.Time
}

// refPending is a switch waiting for the switching delay.
type refPending struct {
	target string
	due    time.Time // the target's upSince + SwitchingDelay
	reason Reason
}

type refModel struct {
	name    string
	now     time.Time
	rt, sd  time.Duration
	grace   time.Duration // ConnectGrace
	jitter  float64       // SwitchingJitter
	rnd     func() float64
	order   []string // by priority
	eps     map[string]*refEndpoint
	current string
	pending *refPending
	closed  bool
	events  []string // emitted, not yet checked
	// tierOf is each endpoint's tier when the MultiEndpoint has tiers (tiers_test.go); nil:
	// each endpoint is its own tier, its position.
	tierOf map[string]int
	// slowStart and ramp (tiers only): the slow start of the last switch back, nil: none.
	slowStart time.Duration
	ramp      *refRamp
}

// refRamp is a switch back's slow start: the tier switched away from keeps a share until
// start+slowStart, unless none of its members is Available before.
type refRamp struct {
	from  int
	start time.Time
}

// tierLead is the first Available member of tier t, "" if none.
func (m *refModel) tierLead(t int) string {
	for _, x := range m.order {
		if m.tier(x) == t && m.eps[x].state == Available {
			return x
		}
	}
	return ""
}

func newRefModel(name string, now time.Time, endpoints []string, rt, sd, grace time.Duration, jitter float64, rnd func() float64,
	ready map[string]State) *refModel {
	m := &refModel{name: name, now: now, rt: rt, sd: sd, grace: grace, jitter: jitter, rnd: rnd, eps: map[string]*refEndpoint{}, current: endpoints[0]}
	for _, id := range endpoints {
		m.add(id, ready[id])
	}
	m.order = slices.Clone(endpoints)
	m.choose(0)
	return m
}

// add is rule 1.
func (m *refModel) add(id string, initial State) {
	e := &refEndpoint{since: m.now, left: m.now, fresh: initial != Available, joined: m.now}
	m.arrive(e)
	switch {
	case initial == Available:
		e.state = Available
	case m.rt > 0:
		e.state = Recovering
	case initial == Unavailable || m.grace == 0:
		e.state = Unavailable
	default:
		e.state = Recovering // first attempt under way, RecoveryTimeout 0: until reported, grace at most
	}
	m.eps[id] = e
}

func (m *refModel) priority(id string) int { return slices.Index(m.order, id) }

// tier is id's tier: its position without tiers.
func (m *refModel) tier(id string) int {
	if m.tierOf == nil {
		return m.priority(id)
	}
	return m.tierOf[id]
}

// tierState is the state of id's tier: Available if a member is, else Recovering if one is.
func (m *refModel) tierState(id string) State {
	s := Unavailable
	for _, x := range m.order {
		if m.tier(x) == m.tier(id) {
			switch m.eps[x].state {
			case Available:
				return Available
			case Recovering:
				s = Recovering
			}
		}
	}
	return s
}

// lead is the first Available member of id's tier, "" if none.
func (m *refModel) lead(id string) string {
	for _, x := range m.order {
		if m.tier(x) == m.tier(id) && m.eps[x].state == Available {
			return x
		}
	}
	return ""
}

// firstDue is the Available member of id's tier whose switch lands first.
func (m *refModel) firstDue(id string) string {
	best := ""
	for _, x := range m.order {
		if m.tier(x) == m.tier(id) && m.eps[x].state == Available && (best == "" || m.due(m.eps[x]).Before(m.due(m.eps[best]))) {
			best = x
		}
	}
	return best
}

// settle makes the current tier's lead current, with no event (tiers only: without tiers the
// lead of an Available current endpoint's tier is itself).
func (m *refModel) settle() {
	if _, kept := m.eps[m.current]; kept {
		if l := m.lead(m.current); l != "" {
			m.current = l
		}
	}
}

// arrive starts e's switching delay now, with a fresh jitter draw.
func (m *refModel) arrive(e *refEndpoint) {
	e.upSince = m.now
	if m.jitter > 0 {
		e.draw = m.rnd()
	}
}

// due is when a switch to Available e lands.
func (m *refModel) due(e *refEndpoint) time.Time {
	return e.upSince.Add(m.sd + time.Duration(float64(m.sd)*m.jitter*e.draw))
}

func (m *refModel) emit(to string, reason Reason) {
	if to == m.current {
		return
	}
	if m.tierOf != nil { // any switch ends the ramp; a switch back starts one
		m.ramp = nil
		if _, kept := m.eps[m.current]; kept && reason == Recovery && m.slowStart > 0 && m.tier(m.current) > m.tier(to) {
			m.ramp = &refRamp{from: m.tier(m.current), start: m.now}
		}
	}
	m.events = append(m.events, fmt.Sprintf("%s>%s %s@%s", m.current, to, reason, m.now.Format("15:04:05.000000000")))
	m.current = to
}

// choose is rule 3 on tiers, then the current tier's lead becomes current. cause is
// Reconfiguration for SetEndpoints/SetTimeouts, else 0.
func (m *refModel) choose(cause Reason) {
	m.chooseTier(cause)
	m.settle()
	if m.ramp != nil && m.tierLead(m.ramp.from) == "" {
		m.ramp = nil // the old tier failed during the ramp: it ends at once
	}
}

func (m *refModel) chooseTier(cause Reason) {
	best := "" // the first Available endpoint: the lead of the highest Available tier
	for _, id := range m.order {
		if m.eps[id].state == Available {
			best = id
			break
		}
	}
	cur, kept := m.eps[m.current]
	if best == "" { // nothing Available: keep the current endpoint, or take the top one
		m.pending = nil
		if !kept {
			m.emit(m.order[0], Reconfiguration)
		}
		return
	}
	_ = cur
	if kept && m.tier(best) == m.tier(m.current) {
		m.pending = nil
		return
	}
	higher := kept && m.tier(best) < m.tier(m.current)
	if kept && m.tierState(m.current) == Recovering && !higher {
		m.pending = nil // let the current tier recover
		return
	}
	if kept && m.tierState(m.current) == Available && m.sd > 0 {
		// best is necessarily higher than an Available current endpoint: wait the rest of
		// best's own delay, counted from its return, whatever the switch targeted before.
		target := m.firstDue(best)
		if m.pending != nil && m.pending.target == target {
			return
		}
		reason := cause
		if reason == 0 {
			reason = Recovery
		}
		due := m.due(m.eps[target])
		if due.After(m.now) {
			m.pending = &refPending{target: target, due: due, reason: reason}
			return
		}
		m.pending = nil
		m.emit(best, reason)
		return
	}
	// Unavailable, removed or Recovering current endpoint, or no delay: at once.
	m.pending = nil
	reason := cause
	if reason == 0 {
		reason = Fallback
		if higher {
			reason = Recovery
		}
	}
	m.emit(best, reason)
}

// nextDeadline returns the earliest instant at which something happens by itself.
func (m *refModel) nextDeadline() (time.Time, bool) {
	var next time.Time
	found := false
	consider := func(t time.Time) {
		if !found || t.Before(next) {
			next, found = t, true
		}
	}
	if m.closed {
		return next, false
	}
	for _, id := range m.order {
		if e := m.eps[id]; e.state == Recovering {
			consider(e.left.Add(m.recoveryLimit(e)))
		} else if !e.stableAt.IsZero() {
			consider(e.stableAt)
		}
	}
	if m.pending != nil {
		consider(m.pending.due)
	}
	if m.ramp != nil {
		consider(m.ramp.start.Add(m.slowStart))
	}
	return next, found
}

// advanceTo moves time to t, applying every deadline at or before t at its own instant.
func (m *refModel) advanceTo(t time.Time) {
	for {
		d, ok := m.nextDeadline()
		if !ok || d.After(t) {
			break
		}
		if d.After(m.now) {
			m.now = d
		}
		if m.ramp != nil && !m.ramp.start.Add(m.slowStart).After(m.now) {
			m.ramp = nil
		}
		for _, id := range m.order {
			if e := m.eps[id]; e.state == Recovering && !e.left.Add(m.recoveryLimit(e)).After(m.now) {
				e.state, e.since = Unavailable, m.now
			}
			if e := m.eps[id]; !e.stableAt.IsZero() && !e.stableAt.After(m.now) {
				e.stableAt = time.Time{}
			}
		}
		m.choose(0)
		if p := m.pending; p != nil && !p.due.After(m.now) {
			m.pending = nil
			m.emit(m.lead(p.target), p.reason)
			m.choose(0)
		}
	}
	if t.After(m.now) {
		m.now = t
	}
}

// recoveryLimit is how long Recovering e may last from e.left: RecoveryTimeout, or with
// RecoveryTimeout 0 the ConnectGrace of a first attempt (rule 1).
func (m *refModel) recoveryLimit(e *refEndpoint) time.Duration {
	if m.rt == 0 && e.fresh {
		return m.grace
	}
	return m.rt
}

// setAvailability is rule 2.
func (m *refModel) setAvailability(id string, available bool) {
	e, ok := m.eps[id]
	if !ok || m.closed {
		return
	}
	switch {
	case available && e.state != Available:
		e.state, e.since = Available, m.now // e.left stays: probation continues it
		m.arrive(e)
		e.joined = m.now
		if m.rt > 0 && !e.fresh {
			e.stableAt = m.now.Add(m.rt) // probation
		}
		e.fresh = false
	case !available && e.state == Recovering && m.rt == 0:
		e.state, e.since = Unavailable, m.now // its first attempt failed
	case !available && e.state == Available:
		if e.stableAt.IsZero() {
			e.left = m.now // stable: a fresh recovery clock
		}
		e.stableAt = time.Time{}
		e.since = m.now
		e.state = Unavailable
		if m.rt > 0 && e.left.Add(m.rt).After(m.now) {
			e.state = Recovering
		}
	default:
		return
	}
	m.choose(0)
}

// setEndpoints is rule 4.
func (m *refModel) setEndpoints(list []string, ready map[string]State) {
	m.applyEndpoints(list, ready)
	m.choose(Reconfiguration)
}

// reconfigure is setEndpoints and setTimeouts with rule 3 applied once, at the end.
func (m *refModel) reconfigure(list []string, ready map[string]State, rt, sd time.Duration) {
	m.rt = rt // endpoints added now start by the new rules
	m.applyEndpoints(list, ready)
	m.applyTimeouts(rt, sd)
	m.choose(Reconfiguration)
}

func (m *refModel) applyEndpoints(list []string, ready map[string]State) {
	m.applyTiers(list, nil, ready)
}

// applyTiers is applyEndpoints with tiers: tierOf gives each endpoint of list its new tier
// (nil: its position).
func (m *refModel) applyTiers(list []string, tierOf map[string]int, ready map[string]State) {
	newTier := func(id string) int {
		if tierOf == nil {
			return slices.Index(list, id)
		}
		return tierOf[id]
	}
	// An endpoint put in a higher tier than one whose tier was higher arrives at its new
	// rank now (F2).
	var raised []string
	for i, y := range list {
		for _, x := range list[i+1:] {
			if m.eps[x] != nil && m.eps[y] != nil && newTier(x) > newTier(y) && m.tier(x) < m.tier(y) {
				raised = append(raised, y)
				m.arrive(m.eps[y])
				break
			}
		}
	}
	for _, id := range list {
		if e := m.eps[id]; e != nil && m.tier(id) != newTier(id) {
			e.joined = m.now // joins its new tier
		}
	}
	if m.pending != nil && (!slices.Contains(list, m.pending.target) || slices.Contains(raised, m.pending.target)) {
		m.pending = nil
	}
	for id := range m.eps {
		if !slices.Contains(list, id) {
			delete(m.eps, id)
		}
	}
	for _, id := range list {
		if _, ok := m.eps[id]; !ok {
			m.add(id, ready[id])
		}
	}
	m.order = slices.Clone(list)
	if m.tierOf != nil {
		m.tierOf = map[string]int{}
		for _, id := range list {
			m.tierOf[id] = newTier(id)
		}
	}
}

// setTimeouts: running clocks keep their start; what is past happens at once.
func (m *refModel) setTimeouts(rt, sd time.Duration) {
	m.applyTimeouts(rt, sd)
	m.choose(Reconfiguration)
}

func (m *refModel) applyTimeouts(rt, sd time.Duration) {
	m.rt, m.sd = rt, sd
	for _, id := range m.order {
		if e := m.eps[id]; e.state == Recovering && !e.left.Add(m.recoveryLimit(e)).After(m.now) {
			e.state, e.since = Unavailable, m.now
		}
		if e := m.eps[id]; !e.stableAt.IsZero() {
			e.stableAt = e.since.Add(rt)
			if rt == 0 || !e.stableAt.After(m.now) {
				e.stableAt = time.Time{}
			}
		}
	}
	if p := m.pending; p != nil {
		p.due = m.due(m.eps[p.target])
	}
	if p := m.pending; p != nil && !p.due.After(m.now) {
		m.pending = nil
		if e := m.eps[p.target]; e != nil && e.state == Available {
			m.emit(m.lead(p.target), p.reason)
		}
	}
}

func (m *refModel) status() Status {
	s := Status{Name: m.name, Current: m.current, RecoveryTimeout: m.rt, SwitchingDelay: m.sd, Closed: m.closed}
	if p := m.pending; p != nil {
		s.PendingSwitch, s.PendingSwitchAt = p.target, p.due
	}
	for i, id := range m.order {
		e := m.eps[id]
		s.Endpoints = append(s.Endpoints, EndpointStatus{Endpoint: id, Priority: i, State: e.state, Since: e.since})
	}
	if m.tierOf != nil {
		for _, id := range m.order {
			t := m.tier(id)
			if t == len(s.Tiers) {
				s.Tiers = append(s.Tiers, nil)
			}
			s.Tiers[t] = append(s.Tiers[t], id)
		}
		s.CurrentTier = m.tier(m.current)
		if m.ramp != nil {
			s.SlowStartFrom, s.SlowStartSince = m.ramp.from, m.ramp.start
		}
	}
	return s
}

var propUniverse = []string{"A", "B", "C", "D", "E"}

// propDuration draws a duration on a 100ms grid (so deadlines often coincide), sometimes 0.
func propDuration(t *rapid.T, label string) time.Duration {
	return time.Duration(rapid.IntRange(0, 30).Draw(t, label)) * 100 * ms
}

func drawList(t *rapid.T, label string) []string {
	perm := rapid.Permutation(propUniverse).Draw(t, label+"-perm")
	n := rapid.IntRange(1, len(propUniverse)).Draw(t, label+"-len")
	return perm[:n]
}

func drawReady(t *rapid.T, label string) map[string]State {
	states := map[string]State{}
	if rapid.Bool().Draw(t, label+"-any") {
		for _, id := range propUniverse {
			states[id] = rapid.SampledFrom([]State{Available, Recovering, Unavailable}).Draw(t, label+"-"+id)
		}
		return states
	}
	for _, id := range propUniverse {
		states[id] = Recovering // unknown: still connecting
	}
	return states
}

func TestProperty_MatchesReferenceModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := clock.NewFake(time.Time{})
		start := clk.Now()
		stamp := func(at time.Time) string { return at.Format("15:04:05.000000000") }

		list := drawList(t, "endpoints")
		rt, sd := propDuration(t, "recovery"), propDuration(t, "switching")
		grace := propDuration(t, "grace")
		jitter := rapid.SampledFrom([]float64{0, 0, 0.25, 1}).Draw(t, "jitter")
		seed := rapid.Uint64().Draw(t, "seed")
		implRand, refRand := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 1))
		ready := drawReady(t, "ready")
		var readyNow map[string]State // what Options.InitialState answers; set before New/SetEndpoints
		readyNow = ready

		var got []string
		m, err := New(Options{Name: "p", Endpoints: list, RecoveryTimeout: rt, SwitchingDelay: sd, ConnectGrace: grace, Clock: clk,
			SwitchingJitter: jitter, Rand: implRand.Float64,
			InitialState: func(e string) State { return readyNow[e] },
			OnSwitch: func(ev Event) {
				got = append(got, fmt.Sprintf("%s>%s %s@%s", ev.From, ev.To, ev.Reason, stamp(ev.At)))
			}})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		defer m.Close()
		ref := newRefModel("p", start, list, rt, sd, grace, jitter, refRand.Float64, ready)
		prevCurrent := list[0]

		check := func() {
			t.Helper()
			if m.Current() != ref.current {
				t.Fatalf("Current() = %q, model %q\n impl:  %s\n model: %+v", m.Current(), ref.current, dump(m), ref.status())
			}
			if gs, ws := fmt.Sprintf("%+v", m.Status()), fmt.Sprintf("%+v", ref.status()); gs != ws {
				t.Fatalf("Status differs\n impl:  %s\n model: %s", gs, ws)
			}
			if strings.Join(got, "; ") != strings.Join(ref.events, "; ") {
				t.Fatalf("events = %q, model %q", got, ref.events)
			}
			// Independently of the model: the events chain from the previous current endpoint
			// to the present one, and there is no event without a change.
			from := prevCurrent
			for _, ev := range got {
				if !strings.HasPrefix(ev, from+">") {
					t.Fatalf("event %q does not start from the current endpoint %q (events %q)", ev, from, got)
				}
				from = ev[len(from)+1 : strings.IndexByte(ev, ' ')]
			}
			if from != m.Current() {
				t.Fatalf("events %q end at %q, but Current() is %q", got, from, m.Current())
			}
			got, ref.events, prevCurrent = nil, nil, m.Current()
		}
		check()

		pickEndpoint := func(t *rapid.T) string {
			// Mostly configured endpoints, sometimes an unknown one (ignored).
			if rapid.IntRange(0, 9).Draw(t, "unknown") == 0 {
				return rapid.SampledFrom(propUniverse).Draw(t, "any endpoint")
			}
			return rapid.SampledFrom(ref.order).Draw(t, "endpoint")
		}
		moveTo := func(at time.Time) {
			clk.Set(at)
			ref.advanceTo(at)
		}

		t.Repeat(map[string]func(*rapid.T){
			"up": func(t *rapid.T) {
				e := pickEndpoint(t)
				m.SetEndpointAvailability(e, true)
				ref.setAvailability(e, true)
			},
			"down": func(t *rapid.T) {
				e := pickEndpoint(t)
				m.SetEndpointAvailability(e, false)
				ref.setAvailability(e, false)
			},
			"advance": func(t *rapid.T) {
				d := time.Duration(rapid.IntRange(0, 40).Draw(t, "advance")) * 100 * ms
				if rapid.IntRange(0, 4).Draw(t, "odd") == 0 {
					d += time.Duration(rapid.IntRange(-1, 1).Draw(t, "ns"))
				}
				moveTo(ref.now.Add(d))
			},
			"advance to a deadline": func(t *rapid.T) {
				d, ok := ref.nextDeadline()
				if !ok {
					t.Skip("no deadline")
				}
				// Exactly at it, or a nanosecond before or after.
				moveTo(d.Add(time.Duration(rapid.IntRange(-1, 1).Draw(t, "offset"))))
			},
			"set endpoints": func(t *rapid.T) {
				list := drawList(t, "new list")
				readyNow = drawReady(t, "ready")
				if err := m.SetEndpoints(list); err != nil {
					t.Fatalf("SetEndpoints(%v): %v", list, err)
				}
				ref.setEndpoints(list, readyNow)
			},
			"reconfigure": func(t *rapid.T) {
				list := drawList(t, "new list")
				readyNow = drawReady(t, "ready")
				rt, sd := propDuration(t, "recovery"), propDuration(t, "switching")
				if err := m.Reconfigure(list, rt, sd); err != nil {
					t.Fatalf("Reconfigure(%v, %v, %v): %v", list, rt, sd, err)
				}
				ref.reconfigure(list, readyNow, rt, sd)
			},
			"set timeouts": func(t *rapid.T) {
				rt, sd := propDuration(t, "recovery"), propDuration(t, "switching")
				if err := m.SetTimeouts(rt, sd); err != nil {
					t.Fatalf("SetTimeouts(%v, %v): %v", rt, sd, err)
				}
				ref.setTimeouts(rt, sd)
			},
			"": func(*rapid.T) { check() },
		})

		// Close stops everything: no timer stays scheduled, nothing changes afterwards.
		m.Close()
		ref.closed = true
		if n := clk.Pending(); n != 0 {
			t.Fatalf("%d timers pending after Close", n)
		}
		before := m.Current()
		clk.Advance(time.Hour)
		m.SetEndpointAvailability(rapid.SampledFrom(ref.order).Draw(t, "after close"), rapid.Bool().Draw(t, "avail"))
		if m.Current() != before || len(got) != 0 {
			t.Fatalf("after Close: Current() %q (was %q), events %q", m.Current(), before, got)
		}
		if err := m.SetEndpoints(propUniverse); !errors.Is(err, ErrClosed) {
			t.Fatalf("SetEndpoints after Close = %v, want ErrClosed", err)
		}
	})
}
