package chaos

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanIsAFunctionOfItsInputs(t *testing.T) {
	a, err := NewPlan(42, 2*time.Minute, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPlan(42, 2*time.Minute, true)
	c, _ := NewPlan(43, 2*time.Minute, true)
	var pa, pb, pc bytes.Buffer
	a.Print(&pa)
	b.Print(&pb)
	c.Print(&pc)
	if pa.String() != pb.String() {
		t.Error("the same seed drew two schedules")
	}
	if strings.SplitN(pa.String(), "\n", 2)[1] == strings.SplitN(pc.String(), "\n", 2)[1] {
		t.Error("seeds 42 and 43 drew the same schedule")
	}
	if _, err := NewPlan(1, MinDuration-time.Millisecond, false); err == nil {
		t.Errorf("a plan of %v was accepted", MinDuration-time.Millisecond)
	}
}

// TestPlanRules checks, over many seeds and durations, the rules a schedule follows: steps in
// time order within the run; every fault healed by its own heal, on its endpoint, on its layer;
// every group keeps a healthy endpoint except in all-down phases, which are short and take
// every endpoint down; nothing in force at the end; frontend steps only with frontends.
func TestPlanRules(t *testing.T) {
	seen := map[Kind]int{}
	for seed := uint64(1); seed <= 200; seed++ {
		for _, d := range []time.Duration{MinDuration, 20 * time.Second, 3 * time.Minute} {
			frontends := seed%2 == 0
			p, err := NewPlan(seed, d, frontends)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, p)
			for _, s := range p.Steps {
				seen[s.Kind]++
			}
		}
	}
	for k := KindNone + 1; k < numKinds; k++ {
		if seen[k] == 0 {
			t.Errorf("no plan drew %v", k)
		}
	}
}

func checkPlan(t *testing.T, p *Plan) {
	t.Helper()
	where := fmt.Sprintf("seed %d, %v, frontends %v", p.Seed, p.Duration, p.Frontends)
	state := p.Initial
	var allDownSince time.Duration = -1
	prev := time.Duration(0)
	for i, s := range p.Steps {
		before := state
		if s.At < prev || s.At < warmup || s.At > p.Duration-cooldown {
			t.Fatalf("%s: step %d (%v) at %v: out of order or outside [%v, %v]", where, i, s, s.At, warmup, p.Duration-cooldown)
		}
		prev = s.At
		if kinds[s.Kind].layer == layerFrontend && !p.Frontends {
			t.Fatalf("%s: step %d (%v) without frontends", where, i, s)
		}
		// The step's recorded state is the previous one with the step applied.
		want := state
		switch info := kinds[s.Kind]; {
		case s.Kind == KindReconfigure:
			want.Groups = s.Groups
			for g := range numGroups {
				if n := len(s.Groups[g]); n == 0 || n > NumEndpoints {
					t.Fatalf("%s: step %d (%v): group %s has %d endpoints", where, i, s, groupNames[g], n)
				}
				if groupTiers[g] != nil && !slices.Equal(s.Groups[g], flatten(groupTiers[g])) {
					t.Fatalf("%s: step %d (%v): tiered group %s is not its tiers flattened", where, i, s, groupNames[g])
				}
			}
		case s.Kind == KindReset:
			if f := state.TCP[s.Endpoint].Kind; f != KindNone && f != KindSlow {
				t.Fatalf("%s: step %d (%v) on an endpoint in %v", where, i, s, f)
			}
		case info.instant:
		case info.layer == layerDatabase:
			checkDatabaseLayer(t, where, state, s, i)
			want.Database = Fault{}
			if info.heal != 0 {
				want.Database = s.Fault
				want.Database.Step = i
			}
		case info.heal != 0: // a fault: its layer was free
			cur := state.TCP[s.Endpoint]
			if info.layer == layerFrontend {
				cur = state.Frontend[s.Endpoint]
			}
			// A member flap's member goes down and up in turn: each step on top of the other.
			flapTurn := s.Kind == KindFlapUp && cur.Kind == KindFlapDown || s.Kind == KindFlapDown && cur.Kind == KindFlapUp
			if cur.active() && !flapTurn {
				t.Fatalf("%s: step %d (%v) on top of %v", where, i, s, cur)
			}
			if s.Kind == KindFlapUp && !flapTurn {
				t.Fatalf("%s: step %d (%v) with no member flap in force", where, i, s)
			}
			f := s.Fault
			f.Step = i
			if info.layer == layerTCP {
				want.TCP[s.Endpoint] = f
			} else {
				want.Frontend[s.Endpoint] = f
			}
		default: // a heal: it ends the fault in force on its layer
			cur := state.TCP[s.Endpoint]
			if info.layer == layerFrontend {
				cur = state.Frontend[s.Endpoint]
			}
			if !cur.active() || kinds[cur.Kind].heal != s.Kind {
				t.Fatalf("%s: step %d (%v) heals %v", where, i, s, cur)
			}
			if info.layer == layerTCP {
				want.TCP[s.Endpoint] = Fault{}
			} else {
				want.Frontend[s.Endpoint] = Fault{}
			}
		}
		if s.Kind == KindFrontendBrownout {
			checkBrownout(t, where, p, i)
		}
		if fmt.Sprint(want) != fmt.Sprint(s.After) {
			t.Fatalf("%s: step %d (%v): state %+v, want %+v", where, i, s, s.After, want)
		}
		state = s.After
		switch {
		case state.allGroupsHealthy():
			allDownSince = -1
		case s.Phase != "all-down" && s.Phase != phaseDatabase:
			t.Fatalf("%s: step %d (%v) leaves a group without a healthy endpoint: %s, %v", where, i, s, state.faults(), state.Groups)
		case allDownSince < 0:
			allDownSince = s.At
		case s.Phase == "all-down" && s.At-allDownSince > allDownMax:
			t.Fatalf("%s: an all-down phase lasts past %v", where, allDownMax)
		case s.Phase == phaseDatabase && s.At-allDownSince > dbMax:
			t.Fatalf("%s: a db-unavailable phase lasts past %v", where, dbMax)
		}
		switch {
		case s.Kind == KindDatabaseUnavailable && s.Endpoint == 0:
			checkDatabaseFault(t, where, p, i)
		case s.Kind == KindFrontendCommitFailLong:
			checkCommitFailLong(t, where, p, i)
		case s.Kind == KindFlapDown && !before.TCP[s.Endpoint].active():
			checkMemberFlap(t, where, p, i)
		case s.Kind == KindDieYoung:
			checkHeldFor(t, where, p, i, KindPass, dieYoungMin, dieYoungMax)
		case s.Kind == KindQueryOverload || s.Kind == KindDatabaseOverload:
			checkHeldFor(t, where, p, i, KindOverloadPass, overloadMin, overloadMax)
		}
		if s.Phase == "all-down" && s.Kind == KindDown && i+1 < len(p.Steps) && p.Steps[i+1].Kind == KindUp {
			for e := range NumEndpoints {
				if s.After.TCP[e].Kind != KindDown {
					t.Fatalf("%s: all-down phase at %v leaves %s %v", where, s.At, endpointName(e), s.After.TCP[e])
				}
			}
		}
	}
	if f := state.faults(); f != "none" {
		t.Fatalf("%s: faults in force at the end: %s", where, f)
	}
}

// checkBrownout checks the brownout of step i: 350-600ms, held brownoutMin to brownoutMax by
// its own heal (never cut short by an all-down phase or the end), the only one in force, on an
// endpoint with no other fault that takes no other step meanwhile, and with a fallback: an
// endpoint with no fault that takes no step meanwhile and that a group lists with it in every
// configuration in force.
func checkBrownout(t *testing.T, where string, p *Plan, i int) {
	t.Helper()
	s := p.Steps[i]
	if s.Fault.Latency < 350*time.Millisecond || s.Fault.Latency > 600*time.Millisecond || s.For < brownoutMin || s.For > brownoutMax {
		t.Fatalf("%s: step %d (%v): want 350-600ms for %v-%v", where, i, s, brownoutMin, brownoutMax)
	}
	for e := range NumEndpoints {
		if f := s.After.Frontend[e]; e != s.Endpoint && f.Kind == KindFrontendBrownout {
			t.Fatalf("%s: step %d (%v) while %s has %v", where, i, s, endpointName(e), f)
		}
	}
	if s.After.TCP[s.Endpoint].active() || s.Endpoint == p.Storm.Endpoint {
		t.Fatalf("%s: step %d (%v) on an endpoint with %v, or the GOAWAY storm's", where, i, s, s.After.TCP[s.Endpoint])
	}
	var fallbacks []int // fault-free now, listed with it
	for f := range NumEndpoints {
		if f != s.Endpoint && !s.After.TCP[f].active() && !s.After.Frontend[f].active() {
			fallbacks = append(fallbacks, f)
		}
	}
	together := func(g Groups, f int) bool {
		return slices.ContainsFunc(g[:], func(eps []int) bool { return slices.Contains(eps, s.Endpoint) && slices.Contains(eps, f) })
	}
	fallbacks = slices.DeleteFunc(fallbacks, func(f int) bool { return !together(s.After.Groups, f) })
	for j, h := range p.Steps[i+1:] {
		if h.Kind == KindFrontendPass && h.Endpoint == s.Endpoint {
			if h.At != s.At+s.For || h.Phase != "" {
				t.Fatalf("%s: step %d (%v) healed at %v [%s], want %v", where, i, s, h.At, h.Phase, s.At+s.For)
			}
			if len(fallbacks) == 0 {
				t.Fatalf("%s: step %d (%v) had no fallback left alone throughout", where, i, s)
			}
			return
		}
		if h.Kind == KindReconfigure {
			fallbacks = slices.DeleteFunc(fallbacks, func(f int) bool { return !together(h.Groups, f) })
			continue
		}
		if h.Endpoint == s.Endpoint {
			t.Fatalf("%s: step %d (%v) during the brownout of step %d (%v)", where, i+1+j, h, i, s)
		}
		fallbacks = slices.DeleteFunc(fallbacks, func(f int) bool { return f == h.Endpoint })
	}
	t.Fatalf("%s: step %d (%v) never healed", where, i, s)
}

func TestPlanHasAllDownPhases(t *testing.T) {
	p, err := NewPlan(7, 2*time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	phases := 0
	for _, s := range p.Steps {
		if s.Phase == "all-down" && s.Kind == KindUp && s.Endpoint == 0 {
			phases++
		}
	}
	if phases < 2 {
		t.Errorf("a 2-minute plan has %d all-down phases, want at least 2", phases)
	}
}

// TestSoloWindows checks the stretches in which an endpoint alone should serve a group: e2 of
// [e1 e2] while e1 is down, but not while e2 itself has a fault, and e1 again after its heal.
func TestSoloWindows(t *testing.T) {
	g := Groups{{0, 1}, {0}}
	down := Fault{Kind: KindDown}
	var s0, s1, s2, s3 State
	s0.Groups, s1.Groups, s2.Groups, s3.Groups = g, g, g, g
	s1.TCP[0] = down
	s2.TCP[0], s2.TCP[1] = down, Fault{Kind: KindSlow}
	p := &Plan{Duration: 20 * time.Second, Initial: s0, Steps: []Step{
		{At: 2 * time.Second, After: s1},  // e1 down: e2 serves
		{At: 5 * time.Second, After: s2},  // e2 slow too: nobody clean
		{At: 6 * time.Second, After: s1},  // e2 clean again
		{At: 10 * time.Second, After: s3}, // e1 heals
	}}
	got := soloWindows(p)
	want := [NumEndpoints]time.Duration{10 * time.Second, 4 * time.Second, 0}
	if got != want {
		t.Errorf("soloWindows = %v, want %v", got, want)
	}
}

// checkMemberFlap checks the member flap that step i begins: on a member of a tiered group's
// top tier, down and up in turn for flapHalfMin to flapHalfMax each, ended by a KindUp within
// flapMax and before the phase ends (Phase ""), the member taking no other step; a peer of its
// tier fault-free and taking no step throughout; and every group keeping a healthy endpoint
// at every step even with the member down (it goes down again within flapHalfMax).
func checkMemberFlap(t *testing.T, where string, p *Plan, i int) {
	t.Helper()
	s := p.Steps[i]
	top := groupTiers[tieredGroup][0]
	if !slices.Contains(top, s.Endpoint) {
		t.Fatalf("%s: step %d (%v) on an endpoint outside the top tier %v", where, i, s, top)
	}
	if s.For > flapMax || s.For < flapMin-2*flapHalfMax {
		t.Fatalf("%s: step %d (%v): a member flap of %v, want %v-%v", where, i, s, s.For, flapMin-2*flapHalfMax, flapMax)
	}
	var peers []int // fault-free members of its tier that take no step during the flap
	for _, m := range top {
		if m != s.Endpoint && s.After.faultFree(m) && m != p.Storm.Endpoint {
			peers = append(peers, m)
		}
	}
	last, down := s.At, true
	for j := i + 1; j < len(p.Steps); j++ {
		h := p.Steps[j]
		worst := h.After
		worst.TCP[s.Endpoint] = Fault{Kind: KindFlapDown}
		if !worst.allGroupsHealthy() {
			t.Fatalf("%s: step %d (%v) during the member flap of step %d: a group has no healthy endpoint with %s down: %s, %v",
				where, j, h, i, endpointName(s.Endpoint), h.After.faults(), h.After.Groups)
		}
		peers = slices.DeleteFunc(peers, func(m int) bool { return h.Endpoint == m || !h.After.faultFree(m) })
		if h.Endpoint != s.Endpoint || h.Kind == KindReconfigure {
			continue
		}
		if half := h.At - last; half < flapHalfMin || half > flapHalfMax {
			t.Fatalf("%s: step %d (%v) %v after the flap's previous step, want %v-%v", where, j, h, half, flapHalfMin, flapHalfMax)
		}
		last = h.At
		switch {
		case down && h.Kind == KindUp:
			if h.At != s.At+s.For || h.Phase != "" {
				t.Fatalf("%s: member flap of step %d (%v) ended at %v [%s], want %v", where, i, s, h.At, h.Phase, s.At+s.For)
			}
			if len(peers) == 0 {
				t.Fatalf("%s: member flap of step %d (%v) had no peer left fault-free throughout", where, i, s)
			}
			return
		case down && h.Kind == KindFlapUp, !down && h.Kind == KindFlapDown:
			down = !down
		default:
			t.Fatalf("%s: step %d (%v) during the member flap of step %d (down %v)", where, j, h, i, down)
		}
	}
	t.Fatalf("%s: member flap of step %d (%v) never ended", where, i, s)
}

// checkDatabaseLayer checks step i of the database layer (query-overload, db-overload and their
// heal): it names no endpoint (it acts on every one), only frontends carry it, a fault starts
// on a free layer (one overload at a time) and a heal ends the one in force; db-overload fails
// dbOverloadFraction of the calls.
func checkDatabaseLayer(t *testing.T, where string, before State, s Step, i int) {
	t.Helper()
	if s.Endpoint != -1 {
		t.Fatalf("%s: step %d (%v) names endpoint %d", where, i, s, s.Endpoint)
	}
	switch s.Kind {
	case KindOverloadPass:
		if !before.Database.active() {
			t.Fatalf("%s: step %d (%v) with no overload in force", where, i, s)
		}
	default:
		if before.Database.active() {
			t.Fatalf("%s: step %d (%v) on top of %v", where, i, s, before.Database)
		}
		if s.Kind == KindDatabaseOverload && s.Fault.Fraction != dbOverloadFraction {
			t.Fatalf("%s: step %d (%v) fails %v of the calls, want %v", where, i, s, s.Fault.Fraction, dbOverloadFraction)
		}
	}
}

// checkHeldFor checks that the fault of step i holds lo to hi (its For) and is healed by heal at
// its At+For, or earlier by a phase that heals everything (all-down, db-unavailable, end).
func checkHeldFor(t *testing.T, where string, p *Plan, i int, heal Kind, lo, hi time.Duration) {
	t.Helper()
	s := p.Steps[i]
	if s.For < lo || s.For > hi {
		t.Fatalf("%s: step %d (%v) holds %v, want %v-%v", where, i, s, s.For, lo, hi)
	}
	for _, h := range p.Steps[i+1:] {
		if h.Kind != heal || h.Endpoint != s.Endpoint {
			continue
		}
		if h.At > s.At+s.For || (h.At < s.At+s.For && h.Phase == "") {
			t.Fatalf("%s: step %d (%v) healed at %v [%s], want %v or a phase's heal before", where, i, s, h.At, h.Phase, s.At+s.For)
		}
		return
	}
	t.Fatalf("%s: step %d (%v) never healed", where, i, s)
}

// TestPlanDrawsIssue40Faults: issue 40's faults appear in 3-minute plans with frontends (die-young
// also without), at their weights' odds, and never without frontends for the database layer.
func TestPlanDrawsIssue40Faults(t *testing.T) {
	counts := map[bool]map[Kind]int{true: {}, false: {}}
	for seed := uint64(1); seed <= 60; seed++ {
		for _, fe := range []bool{true, false} {
			p, err := NewPlan(seed, 3*time.Minute, fe)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range p.Steps {
				counts[fe][s.Kind]++
			}
		}
	}
	for _, k := range []Kind{KindDieYoung, KindQueryOverload, KindDatabaseOverload} {
		if counts[true][k] < 20 {
			t.Errorf("%v drawn %d times in 60 3-minute plans with frontends, want at least 20", k, counts[true][k])
		}
	}
	if counts[false][KindDieYoung] < 20 {
		t.Errorf("die-young drawn %d times without frontends, want at least 20 (a TCP fault)", counts[false][KindDieYoung])
	}
	for _, k := range []Kind{KindQueryOverload, KindDatabaseOverload, KindOverloadPass} {
		if n := counts[false][k]; n > 0 {
			t.Errorf("%v drawn %d times without frontends", k, n)
		}
	}
}
