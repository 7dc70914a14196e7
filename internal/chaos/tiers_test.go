package chaos

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

func TestCurrentTier(t *testing.T) {
	down := Fault{Kind: KindDown}
	for _, tc := range []struct {
		name   string
		group  int
		groups Groups
		tcp    [NumEndpoints]Fault
		want   []int
	}{
		{"tiered, all healthy: the top tier", tieredGroup, initialGroups, [NumEndpoints]Fault{}, []int{0, 1}},
		{"tiered, one member down: still the top tier", tieredGroup, initialGroups, [NumEndpoints]Fault{0: down}, []int{0, 1}},
		{"tiered, both members down: the lower tier", tieredGroup, initialGroups, [NumEndpoints]Fault{0: down, 1: down}, []int{2}},
		{"tiered, everything down: none", tieredGroup, initialGroups, [NumEndpoints]Fault{down, down, down}, nil},
		{"flat: its first healthy endpoint alone", 0, initialGroups, [NumEndpoints]Fault{0: down}, []int{1}},
		{"flat, reconfigured", 1, Groups{{0}, {1, 2}, initialGroups[2]}, [NumEndpoints]Fault{}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := State{Groups: tc.groups, TCP: tc.tcp}
			if got := s.currentTier(tc.group); !slices.Equal(got, tc.want) {
				t.Errorf("currentTier = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTierFailures checks which failed calls the tier row judges: those of a group (and of
// the default group) whose current tier kept a fault-free member throughout, unless the call
// is another row's (no healthy endpoint, or a silent fault on its groups).
func TestTierFailures(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	s0 := State{Groups: Groups{{0, 1, 2}, {2, 0}, initialGroups[2]}}
	s1 := s0 // 1s: e1 flapping, down
	s1.TCP[0] = Fault{Kind: KindFlapDown, Step: 0}
	s2 := s1 // 2s: e1 flapping, up
	s2.TCP[0] = Fault{Kind: KindFlapUp, Step: 1}
	s3 := s0 // 3s: e1 and e2 down: the tiered group's current tier is [e3]
	s3.TCP[0], s3.TCP[1] = Fault{Kind: KindDown, Step: 2}, Fault{Kind: KindDown, Step: 3}
	s4 := s0 // 4s: e2 slow, e1 down: the top tier has no fault-free member
	s4.TCP[0], s4.TCP[1] = Fault{Kind: KindDown, Step: 4}, Fault{Kind: KindSlow, Step: 5}
	s5 := s0 // 5s: e2 hangs (silent)
	s5.Frontend[1] = Fault{Kind: KindFrontendHang, Step: 6}
	s6 := s0 // 6s: e3 hangs (silent), e1 down: west = [e3 e1] has no healthy endpoint
	s6.TCP[0], s6.Frontend[2] = Fault{Kind: KindDown, Step: 7}, Fault{Kind: KindFrontendHang, Step: 8}
	s7 := s0 // 7s: healed
	tl := &faultTimeline{start: t0, initial: s0, steps: []applied{
		{at(1), Step{After: s1}}, {at(2), Step{After: s2}}, {at(3), Step{After: s3}}, {at(4), Step{After: s4}},
		{at(5), Step{After: s5}}, {at(6), Step{After: s6}}, {at(7), Step{After: s7}},
	}}
	for _, tc := range []struct {
		name       string
		group      string
		start, end float64
		judged     bool
	}{
		{"no fault", GroupTiered, 0.1, 0.5, true},
		{"member flapping down, peer fault-free", GroupTiered, 1.1, 1.5, true},
		// The default group (its sessions) is flat: e1 up again is its current tier, flapping.
		{"across a flap's up: the default group's current endpoint has the flap", GroupTiered, 0.5, 2.5, false},
		{"default's current endpoint flapping, its next fault-free", GroupDefault, 1.1, 1.5, true},
		{"top tier down, the lower tier fault-free", GroupTiered, 3.1, 3.5, true},
		{"top tier without a fault-free member", GroupTiered, 4.1, 4.5, false},
		{"the default group's current endpoint slow", GroupWest, 4.1, 4.5, false},
		{"a silent fault on the peer: the silent row's", GroupTiered, 5.1, 5.5, false},
		{"a group without a healthy endpoint: not judged", GroupWest, 6.1, 6.5, false},
		{"after the heal", GroupTiered, 7.1, 7.5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := classify(outcome{group: tc.group, start: at(tc.start), end: at(tc.end), err: errors.New("x")}, tl)
			got := len(tierFailures([]classified{c}, tl)) == 1
			if got != tc.judged {
				t.Errorf("judged %v, want %v (class %v, faults %s)", got, tc.judged, c.class, c.faults)
			}
		})
	}
}

func TestTierInvariant(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tl := &faultTimeline{start: t0, initial: State{Groups: initialGroups}}
	fail := classify(outcome{worker: "read/tiered", group: GroupTiered, start: t0.Add(time.Second), end: t0.Add(2 * time.Second), err: errors.New("x")}, tl)
	list := func(cs []classified, n int) []string { return make([]string, len(cs)) }
	if inv := tierInvariant(nil, tl, list); inv.Status != Pass || !strings.HasPrefix(inv.Result, "0 (default 0, west 0, tiered 0)") {
		t.Errorf("no failed call: %v %q", inv.Status, inv.Result)
	}
	if inv := tierInvariant([]classified{fail}, tl, list); inv.Status != Fail || !strings.HasPrefix(inv.Result, "1 (default 0, west 0, tiered 1)") || len(inv.Details) != 1 {
		t.Errorf("one failed call of the tiered group: %v %q %q", inv.Status, inv.Result, inv.Details)
	}
}

// flapTimeline is a run with a member flap of e1 from 10s to 14s (down, up, down, up), and a
// fault of e2 from 30s to 31s.
func flapTimeline(t0 time.Time) *faultTimeline {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	s0 := State{Groups: initialGroups}
	down, up := s0, s0
	down.TCP[0], up.TCP[0] = Fault{Kind: KindFlapDown}, Fault{Kind: KindFlapUp}
	e2 := s0
	e2.Frontend[1] = Fault{Kind: KindFrontendUnavailable}
	return &faultTimeline{start: t0, initial: s0, steps: []applied{
		{at(10), Step{Kind: KindFlapDown, Endpoint: 0, After: down}},
		{at(11), Step{Kind: KindFlapUp, Endpoint: 0, After: up}},
		{at(12), Step{Kind: KindFlapDown, Endpoint: 0, After: down}},
		{at(14), Step{Kind: KindUp, Endpoint: 0, After: s0}},
		{at(20), Step{Kind: KindDown, Endpoint: 0, After: down}}, // an all-down's down: no flap
		{at(21), Step{Kind: KindUp, Endpoint: 0, After: s0}},
		{at(30), Step{Kind: KindFrontendUnavailable, Endpoint: 1, After: e2}},
		{at(31), Step{Kind: KindFrontendPass, Endpoint: 1, After: s0}},
		{at(32), Step{Kind: KindFlapDown, Endpoint: 0, After: down}}, // not healed before the end
	}}
}

func TestMemberFlaps(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	got := memberFlaps(flapTimeline(t0))
	want := []flapRun{{0, t0.Add(10 * time.Second), t0.Add(14 * time.Second)}, {0, t0.Add(32 * time.Second), time.Time{}}}
	if !slices.Equal(got, want) {
		t.Errorf("memberFlaps = %v, want %v", got, want)
	}
}

func TestJudgeMemberFlaps(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tl := flapTimeline(t0)
	name := func(addr string) string { return addr } // the test's addresses are e1..e3
	flap := flapRun{0, at(10), at(14)}
	sw := func(group, from, to string, s float64) spannerme.SwitchEvent {
		return spannerme.SwitchEvent{Name: group, From: from, To: to, At: at(s)}
	}
	ev := func(e string, ejected bool, s float64) healthEvent {
		return healthEvent{endpoint: e, ejected: ejected, class: "reads", at: at(s)}
	}
	for _, tc := range []struct {
		name        string
		flap        flapRun
		switches    []spannerme.SwitchEvent
		evs         []healthEvent
		judged, bad bool
	}{
		{"no switch", flap, nil, nil, true, false},
		{"the tiered group leaves its top tier", flap, []spannerme.SwitchEvent{sw(GroupTiered, "e2", "e3", 12.5)}, nil, true, true},
		{"a switch landing RecoveryTimeout after the end", flap, []spannerme.SwitchEvent{sw(GroupTiered, "e1", "e3", 14.4)}, nil, true, true},
		{"a switch after that", flap, []spannerme.SwitchEvent{sw(GroupTiered, "e1", "e3", 15)}, nil, true, false},
		{"a switch back to the top tier", flap, []spannerme.SwitchEvent{sw(GroupTiered, "e3", "e2", 10.5)}, nil, true, false},
		// Without tiers, the member going down switches the group to its peer.
		{"a switch from the member to its peer", flap, []spannerme.SwitchEvent{sw(GroupTiered, "e1", "e2", 10.6)}, nil, true, true},
		{"another group's switch", flap, []spannerme.SwitchEvent{sw(GroupDefault, "e1", "e3", 11)}, nil, true, false},
		{"peer ejected before and not readmitted", flap, []spannerme.SwitchEvent{sw(GroupTiered, "e2", "e3", 12.5)},
			[]healthEvent{ev("e2", true, 8)}, false, false},
		{"peer ejected and readmitted before", flap, nil, []healthEvent{ev("e2", true, 2), ev("e2", false, 4)}, true, false},
		{"peer ejected during the flap", flap, nil, []healthEvent{ev("e2", true, 12)}, false, false},
		{"the member's own ejection", flap, nil, []healthEvent{ev("e1", true, 12)}, true, false},
		{"peer with a fault just before", flapRun{0, at(32), at(36)}, []spannerme.SwitchEvent{sw(GroupTiered, "e2", "e3", 34)}, nil, false, false},
		{"not healed", flapRun{0, at(40), time.Time{}}, []spannerme.SwitchEvent{sw(GroupTiered, "e2", "e3", 41)}, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := judgeMemberFlaps([]flapRun{tc.flap}, tc.switches, tc.evs, tl, name, t0)
			if len(vs) != 1 || vs[0].judged != tc.judged || vs[0].bad != tc.bad {
				t.Fatalf("verdicts %+v, want judged %v, bad %v", vs, tc.judged, tc.bad)
			}
		})
	}
	inv := flapInvariant(nil, nil, nil, tl, name)
	if inv.Status != NotChecked {
		t.Errorf("no flap: status %v, want NotChecked", inv.Status)
	}
	inv = flapInvariant([]flapRun{flap}, []spannerme.SwitchEvent{sw(GroupTiered, "e2", "e3", 12.5)}, nil, tl, name)
	if inv.Status != Fail || !strings.Contains(inv.Details[0], "e2->e3") {
		t.Errorf("a switch away: %v %q", inv.Status, inv.Details)
	}
}
