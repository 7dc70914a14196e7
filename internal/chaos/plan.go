package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// Timing of a plan. Durations are drawn uniformly from [min, max].
const (
	// warmup is the quiet time before the first fault; cooldown the quiet time at the end
	// (every fault healed) before the load stops, so that the run ends on a settled client.
	warmup   = 2 * time.Second
	cooldown = 5 * time.Second
	// MinDuration is the shortest run: warm-up, 3s of faults, cool-down.
	MinDuration = warmup + cooldown + 3*time.Second

	faultMin, faultMax     = 300 * time.Millisecond, 5 * time.Second
	gapMin, gapMax         = 200 * time.Millisecond, 1500 * time.Millisecond
	allDownMin, allDownMax = 500 * time.Millisecond, 2500 * time.Millisecond
	// A brownout holds long enough for the client to degrade the endpoint (brownoutWindow,
	// then a probe or two) and to move traffic away for a while. It is drawn only where the
	// phase leaves it room (see eligible), so it is never cut short by an all-down phase or
	// the cool-down; a 20s run's phases (at most 10s) never do.
	brownoutMin, brownoutMax = brownoutWindow + 8*time.Second, brownoutWindow + 16*time.Second
	// A phase in which every group keeps a healthy endpoint lasts between 30% and 100% of
	// min(phaseMax, Duration/2).
	phaseMax = 30 * time.Second
	// A long commit failure holds many ejection times (healthSettings.BaseEjectionTime, 2s):
	// it is drawn only where the phase leaves it commitLongMin, and held until at most the
	// phase's end.
	commitLongMin, commitLongMax = 15 * time.Second, 40 * time.Second
	// A database-wide fault (db-unavailable) takes the place of one all-down phase in dbOdds,
	// where the run leaves it room: every fault is healed, then dbLeadIn passes without
	// faults, so that the client is settled when it begins (every ejection, at most
	// MaxEjectionTime 20s, is over and readmitted within a ProbeInterval, and every group is
	// back on its first endpoint a SwitchingDelay later: 22s, and 2s of slack); the fault holds
	// dbMin to dbMax on every endpoint, healed at one time, and dbAfter passes without faults,
	// the time in which its invariant watches for switches and for the first endpoints to
	// serve.
	dbOdds        = 8
	dbLeadIn      = 24 * time.Second
	dbMin, dbMax  = 8 * time.Second, 12 * time.Second
	dbAfter       = 5 * time.Second
	phaseDatabase = "db-unavailable"
	// A member flap holds flapMin to flapMax (at most to the phase's end: it is drawn only
	// where the phase leaves it flapMin), its member down for flapHalfMin to flapHalfMax and
	// up for as long again, in turn: a cycle of 1-3s.
	flapMin, flapMax         = 6 * time.Second, 30 * time.Second
	flapHalfMin, flapHalfMax = 500 * time.Millisecond, 1500 * time.Millisecond
	// Connections die young for dieYoungMin to dieYoungMax: long enough that the seconds after
	// the first dieYoungSettle (in which the client may still reconnect at once) are counted.
	dieYoungMin, dieYoungMax = 4 * time.Second, 10 * time.Second
	// The database overloads hold overloadMin to overloadMax ("a few seconds").
	overloadMin, overloadMax = 3 * time.Second, 8 * time.Second
	// flapQuiet is how long a member flap's peer must have taken no step before the flap,
	// and the lookback in which the flap's invariant holds a fault against it: a pool
	// reconnects within a second of a heal (ReconnectMaxDelay 250ms, MinConnectTimeout 1s);
	// an ejection that outlasts it is seen in the health events.
	flapQuiet = 2 * time.Second
)

// weights are the relative odds of each kind at each pick of a phase in which every group
// keeps a healthy endpoint; kinds that cannot apply (every endpoint busy on that layer, or
// the fault would leave a group without a healthy endpoint) are left out of that pick.
// Frontend kinds apply only when the endpoints have gRPC frontends.
var weights = map[Kind]int{
	KindDown:                 14,
	KindReset:                10,
	KindBlackhole:            10,
	KindSilentBlackhole:      4,
	KindSlow:                 10,
	KindReconfigure:          12,
	KindFrontendUnavailable:  10,
	KindFrontendHang:         6,
	KindFrontendPartial:      10,
	KindFrontendLatency:      6,
	KindFrontendRestart:      4,
	KindFrontendCommitFail:   6,
	KindFrontendPartialReset: 4,
	KindFrontendBrownout:     6,
	// Drawn only where the phase leaves it commitLongMin (see eligible).
	KindFrontendCommitFailLong: 3,
	// A member flap; drawn only where the phase leaves it flapMin (see eligible).
	KindFlapDown: 12,
	// Issue 40's faults: connections that die young, a query the database refuses at every
	// endpoint, the database shedding load at every endpoint.
	KindDieYoung:         8,
	KindQueryOverload:    4,
	KindDatabaseOverload: 4,
}

// partialFractions are the fractions a partial failure draws from: two the Spanner client's
// retries absorb, two that make the endpoint unhealthy (>= hardPartial).
var partialFractions = []float64{0.05, 0.2, 0.5, 0.9}

// NewPlan draws the schedule of a run of duration d from seed. With frontends, frontend
// faults are drawn too. Errors: d shorter than 10s.
func NewPlan(seed uint64, d time.Duration, frontends bool) (*Plan, error) {
	if d < MinDuration {
		return nil, fmt.Errorf("chaos: duration %v is shorter than %v (warm-up %v, cool-down %v)", d, MinDuration, warmup, cooldown)
	}
	p := &Plan{Seed: seed, Duration: d, Frontends: frontends, Initial: State{Groups: initialGroups}}
	g := &planner{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), plan: p, state: p.Initial}
	if frontends {
		p.Storm = GoAwayStorm{Endpoint: g.rng.IntN(NumEndpoints),
			MaxAge: g.between(500*time.Millisecond, 2*time.Second).Round(100 * time.Millisecond),
			Grace:  g.between(2*time.Second, 10*time.Second).Round(time.Second)}
	}
	g.run()
	return p, nil
}

// planner draws a plan, keeping the state it has reached and the heals it owes.
type planner struct {
	rng   *rand.Rand
	plan  *Plan
	state State
	heals []Step // pending heals, in no order
	// phaseEnd is when the current phase, in which every group keeps a healthy endpoint, ends.
	phaseEnd time.Duration
	// brown is the brownout in force until brown.until (zero: none), see shielded.
	brown struct {
		e, fallback int
		until       time.Duration
	}
	// flap is the member flap in force until flap.until (zero: none): its member e and the
	// peer that stays fault-free meanwhile; see shielded.
	flap struct {
		e, peer int
		until   time.Duration
	}
	// touched is, per endpoint, when a step last acted on it (a fault, a heal, an instant
	// step); see flapPeers.
	touched [NumEndpoints]time.Duration
}

// shielded reports whether endpoint e takes no step at t: it is the endpoint of the brownout
// in force or the fallback drawn for it. The client degrades an endpoint only if a fast
// available endpoint of its group was measured at every latency probe for the whole Window
// and its own latency was known throughout (a pool that loses its connection forgets its
// latency); with a fault drawn every second on any endpoint, that would almost never hold.
//
// The member and the peer of a member flap in force take no other step either: the member only
// goes down and up, and the peer stays fault-free so that the flap's invariant (no switch of
// the tiered group while the peer is healthy) judges the tier, not a second fault.
func (g *planner) shielded(e int, t time.Duration) bool {
	return t < g.brown.until && (e == g.brown.e || e == g.brown.fallback) ||
		t < g.flap.until && (e == g.flap.e || e == g.flap.peer)
}

// worst returns the state in force with the member of a member flap in force at t down: the
// flap takes it down again within flapHalfMax whatever its state now, so a hard fault or a
// reconfiguration must leave every group a healthy endpoint even then.
func (g *planner) worst(t time.Duration) State {
	s := g.state
	if t < g.flap.until {
		s.TCP[g.flap.e] = Fault{Kind: KindFlapDown}
	}
	return s
}

// flapPeers returns the peers that can stay fault-free through a member flap of e: the other
// members of e's tier in a tiered group's top tier, fault-free, not the GOAWAY storm's (its
// connections end every second: the tier would be left without a member whenever both ended
// at once), and no step on it for flapQuiet before t (a fault healed just before may still
// count against it in the client's health).
func (g *planner) flapPeers(e int, t time.Duration) []int {
	var out []int
	for gr := range numGroups {
		if groupTiers[gr] == nil || !slices.Contains(groupTiers[gr][0], e) {
			continue
		}
		for _, p := range groupTiers[gr][0] {
			if p != e && p != g.plan.Storm.Endpoint && g.state.faultFree(p) && !slices.Contains(out, p) && t-g.touched[p] >= flapQuiet {
				out = append(out, p)
			}
		}
	}
	return out
}

// fallbacks returns the endpoints that can be the fallback of a brownout on e: free of
// faults on both layers, not the GOAWAY storm's, listed with e in a group.
func (g *planner) fallbacks(e int) []int {
	var out []int
	for f := range NumEndpoints {
		if f == e || f == g.plan.Storm.Endpoint || g.state.TCP[f].active() || g.state.Frontend[f].active() {
			continue
		}
		if slices.ContainsFunc(g.state.Groups[:], func(eps []int) bool { return slices.Contains(eps, e) && slices.Contains(eps, f) }) {
			out = append(out, f)
		}
	}
	return out
}

func (g *planner) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)+1))
}

func (g *planner) run() {
	end := g.plan.Duration - cooldown
	phaseCap := min(phaseMax, g.plan.Duration/2)
	t := warmup
	for t < end {
		phaseEnd := min(end, t+time.Duration(float64(phaseCap)*(0.3+0.7*g.rng.Float64())))
		g.phaseEnd = phaseEnd
		for t < phaseEnd {
			g.healDue(t)
			g.pick(t)
			t += g.between(gapMin, gapMax)
		}
		if t+allDownMax >= end {
			break
		}
		g.healDue(t)
		if g.plan.Frontends && t+dbLeadIn+dbMax+dbAfter <= end && g.rng.IntN(dbOdds) == 0 {
			t = g.databaseUnavailable(t)
			continue
		}
		// A short phase with every endpoint down.
		g.healAll(t, "all-down")
		d := g.between(allDownMin, allDownMax)
		for e := range NumEndpoints {
			g.emit(Step{At: t, Kind: KindDown, Endpoint: e, Fault: Fault{Kind: KindDown}, For: d, Phase: "all-down"})
		}
		for e := range NumEndpoints {
			g.emit(Step{At: t + d, Kind: KindUp, Endpoint: e, Phase: "all-down"})
		}
		t += d + g.between(gapMin, gapMax)
	}
	g.healDue(end)
	g.healAll(end, "end")
}

// databaseUnavailable plans a database-wide fault at t (see dbLeadIn): every fault healed at
// t, every endpoint's frontend answering UNAVAILABLE from t+dbLeadIn for dbMin to dbMax,
// every one healed at one time; it returns when the next phase may begin, dbAfter later.
func (g *planner) databaseUnavailable(t time.Duration) time.Duration {
	g.healAll(t, phaseDatabase)
	at := t + dbLeadIn
	d := g.between(dbMin, dbMax)
	for e := range NumEndpoints {
		g.emit(Step{At: at, Kind: KindDatabaseUnavailable, Endpoint: e, Fault: Fault{Kind: KindDatabaseUnavailable}, For: d, Phase: phaseDatabase})
	}
	for e := range NumEndpoints {
		g.emit(Step{At: at + d, Kind: KindFrontendPass, Endpoint: e, Phase: phaseDatabase})
	}
	return at + d + dbAfter
}

// emit applies s to the state, records it, and returns its index.
func (g *planner) emit(s Step) int {
	idx := len(g.plan.Steps)
	switch info := kinds[s.Kind]; {
	case s.Kind == KindReconfigure:
		g.state.Groups = s.Groups
	case info.instant:
	case info.layer == layerTCP:
		f := s.Fault
		f.Step = idx
		if info.heal == 0 { // a heal
			f = Fault{}
		}
		g.state.TCP[s.Endpoint] = f
	case info.layer == layerFrontend:
		f := s.Fault
		f.Step = idx
		if info.heal == 0 {
			f = Fault{}
		}
		g.state.Frontend[s.Endpoint] = f
	case info.layer == layerDatabase:
		f := s.Fault
		f.Step = idx
		if info.heal == 0 {
			f = Fault{}
		}
		g.state.Database = f
	}
	s.After = g.state
	g.plan.Steps = append(g.plan.Steps, s)
	if s.Endpoint >= 0 {
		g.touched[s.Endpoint] = s.At
	}
	return idx
}

// healDue emits the pending heals due at or before t, in time order.
func (g *planner) healDue(t time.Duration) {
	sort.SliceStable(g.heals, func(i, j int) bool { return g.heals[i].At < g.heals[j].At })
	n := 0
	for _, h := range g.heals {
		if h.At > t {
			break
		}
		g.emit(h)
		n++
	}
	g.heals = g.heals[n:]
}

// healAll drops the pending heals and heals, at t, every fault in force.
func (g *planner) healAll(t time.Duration, phase string) {
	g.heals = nil
	for e := range NumEndpoints {
		if f := g.state.TCP[e]; f.active() {
			g.emit(Step{At: t, Kind: kinds[f.Kind].heal, Endpoint: e, Phase: phase})
		}
		if f := g.state.Frontend[e]; f.active() {
			g.emit(Step{At: t, Kind: kinds[f.Kind].heal, Endpoint: e, Phase: phase})
		}
	}
	if f := g.state.Database; f.active() {
		g.emit(Step{At: t, Kind: kinds[f.Kind].heal, Endpoint: -1, Phase: phase})
	}
}

// pick draws one step among the kinds that can apply at t and emits it, with its heal.
func (g *planner) pick(t time.Duration) {
	type option struct {
		kind Kind
		eps  []int // eligible endpoints
	}
	var opts []option
	total := 0
	for k := KindNone + 1; k < numKinds; k++ {
		w := weights[k]
		if w == 0 || (k.needsFrontends() && !g.plan.Frontends) {
			continue
		}
		var eps []int
		if k != KindReconfigure {
			eps = g.eligible(k, t)
			if len(eps) == 0 {
				continue
			}
		}
		opts = append(opts, option{k, eps})
		total += w
	}
	r := g.rng.IntN(total)
	var o option
	for _, o = range opts {
		if r -= weights[o.kind]; r < 0 {
			break
		}
	}
	if o.kind == KindReconfigure {
		if groups, ok := g.reconfiguration(t); ok {
			g.emit(Step{At: t, Kind: KindReconfigure, Endpoint: -1, Groups: groups})
		}
		return
	}
	e := o.eps[g.rng.IntN(len(o.eps))]
	f := g.params(o.kind)
	s := Step{At: t, Kind: o.kind, Endpoint: e, Fault: f}
	switch {
	case o.kind == KindFrontendBrownout:
		s.For = g.between(brownoutMin, min(brownoutMax, g.phaseEnd-t))
		fbs := g.fallbacks(e)
		g.brown.e, g.brown.fallback, g.brown.until = e, fbs[g.rng.IntN(len(fbs))], t+s.For
		g.heals = append(g.heals, Step{At: t + s.For, Kind: kinds[o.kind].heal, Endpoint: e})
	case o.kind == KindFrontendCommitFailLong:
		s.For = g.between(commitLongMin, min(commitLongMax, g.phaseEnd-t))
		g.heals = append(g.heals, Step{At: t + s.For, Kind: kinds[o.kind].heal, Endpoint: e})
	case o.kind == KindDieYoung:
		s.For = g.between(dieYoungMin, dieYoungMax)
		g.heals = append(g.heals, Step{At: t + s.For, Kind: kinds[o.kind].heal, Endpoint: e})
	case kinds[o.kind].layer == layerDatabase:
		s.For = g.between(overloadMin, overloadMax)
		g.heals = append(g.heals, Step{At: t + s.For, Kind: kinds[o.kind].heal, Endpoint: e})
	case o.kind == KindFlapDown:
		peers := slices.DeleteFunc(g.flapPeers(e, t), func(p int) bool { return g.shielded(p, t) })
		s.For = g.memberFlap(t, e, g.between(flapMin, min(flapMax, g.phaseEnd-t)))
		g.flap.e, g.flap.peer, g.flap.until = e, peers[g.rng.IntN(len(peers))], t+s.For
	case kinds[o.kind].heal != 0:
		s.For = g.between(faultMin, faultMax)
		g.heals = append(g.heals, Step{At: t + s.For, Kind: kinds[o.kind].heal, Endpoint: e})
	default:
		s.Fault = Fault{}
	}
	g.emit(s)
}

// memberFlap plans the rest of a member flap of e that goes down at t and lasts at most d:
// down and up in turn, each for flapHalfMin to flapHalfMax, every later step a pending heal,
// the last one the KindUp that heals it. It returns how long the flap holds.
func (g *planner) memberFlap(t time.Duration, e int, d time.Duration) time.Duration {
	at := t + g.between(flapHalfMin, flapHalfMax) // down until at
	for {
		up, down := g.between(flapHalfMin, flapHalfMax), g.between(flapHalfMin, flapHalfMax)
		if at+up+down > t+d { // no room for another up and down: the flap ends
			g.heals = append(g.heals, Step{At: at, Kind: KindUp, Endpoint: e})
			return at - t
		}
		g.heals = append(g.heals, Step{At: at, Kind: KindFlapUp, Endpoint: e, Fault: Fault{Kind: KindFlapUp}})
		at += up
		g.heals = append(g.heals, Step{At: at, Kind: KindFlapDown, Endpoint: e, Fault: Fault{Kind: KindFlapDown}})
		at += down
	}
}
