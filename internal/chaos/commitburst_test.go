package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestJudgeCommitBursts judges synthetic long commit failures on e1 from its refused
// application commits and its health events: the refused commits up to its first ejection
// for writes + RecoveryTimeout + burstGrace are the one burst allowed; any later one, or a
// readmission while the fault holds, is a second burst, unless a group had no other usable
// endpoint then, by the plan or by the client's own record of rule 4.
func TestJudgeCommitBursts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	start, heal := t0.Add(10*time.Second), t0.Add(40*time.Second)
	run := commitRun{endpoint: 0, step: 7, start: start, heal: heal}
	at := func(d time.Duration) time.Time { return start.Add(d) }
	ms := time.Millisecond
	ejected := func(d time.Duration, class string) healthEvent {
		return healthEvent{endpoint: "e1", ejected: true, class: class, at: at(d)}
	}
	readmitted := func(d time.Duration) healthEvent { return healthEvent{endpoint: "e1", class: "writes", at: at(d)} }
	burstEnd := 300*ms + RecoveryTimeout + burstGrace
	other := func(name string, ejected bool, d time.Duration) healthEvent {
		return healthEvent{endpoint: name, ejected: ejected, class: "writes", at: at(d)}
	}
	// e1 is in both groups (default [e1 e2 e3], west [e3 e1]); from 20s on, e3's frontend
	// refuses every call (a hard fault) and e2 is down.
	var down State
	down.Groups = initialGroups
	down.Frontend[2] = Fault{Kind: KindFrontendUnavailable}
	down.TCP[1] = Fault{Kind: KindDown}
	tl := &faultTimeline{start: t0, initial: State{Groups: initialGroups}, steps: []applied{{at: at(20 * time.Second), step: Step{After: down}}}}
	for _, tc := range []struct {
		name                               string
		refused                            []time.Duration // after start
		evs                                []healthEvent
		first, late, excused, readmissions int
		bad                                bool
		want                               string
		lr                                 []lastResort // the client's record of rule 4
	}{
		{"one burst", []time.Duration{0, 50 * ms, 100 * ms, 290 * ms}, []healthEvent{ejected(300*ms, "writes")}, 4, 0, 0, 0, false, "4 in the first burst, 0 after", nil},
		{"in flight at the failover", []time.Duration{100 * ms, burstEnd}, []healthEvent{ejected(300*ms, "writes")}, 2, 0, 0, 0, false, "2 in the first burst", nil},
		{"a commit after the burst", []time.Duration{100 * ms, burstEnd + ms}, []healthEvent{ejected(300*ms, "writes")}, 1, 1, 0, 0, true, "1 after it", nil},
		{"readmitted while commits fail", []time.Duration{100 * ms, 10 * time.Second}, []healthEvent{ejected(300*ms, "writes"), readmitted(9 * time.Second), ejected(10*time.Second, "writes")}, 1, 1, 0, 1, true, "readmitted 1 times", nil},
		{"readmitted after the heal", []time.Duration{100 * ms}, []healthEvent{ejected(300*ms, "writes"), readmitted(30*time.Second + ms)}, 1, 0, 0, 0, false, "1 in the first burst", nil},
		{"outside the fault", []time.Duration{-ms, 100 * ms, 30*time.Second + ms}, []healthEvent{ejected(300*ms, "writes")}, 1, 0, 0, 0, false, "1 application commits refused", nil},
		{"an ejection for another class first", []time.Duration{100 * ms, 5 * time.Second, 5100 * ms}, []healthEvent{ejected(200*ms, "calls"), readmitted(4 * time.Second), ejected(5200*ms, "writes")}, 3, 0, 0, 0, false, "3 in the first burst", nil},
		{"another endpoint's events", []time.Duration{100 * ms, 2 * time.Second}, []healthEvent{{endpoint: "e2", ejected: true, class: "writes", at: at(0)}, ejected(300*ms, "writes")}, 1, 1, 0, 0, true, "ejected for writes +0.3s", nil},
		{"no ejection", []time.Duration{100 * ms, 200 * ms}, nil, 2, 0, 0, 0, false, "no ejection for writes", nil},
		{"nothing refused", nil, nil, 0, 0, 0, 0, false, "0 application commits refused", nil},
		{"the other endpoints of a group ejected", []time.Duration{100 * ms, 5 * time.Second}, []healthEvent{ejected(300*ms, "writes"), other("e2", true, 4*time.Second), other("e3", true, 4500*ms)}, 1, 0, 1, 0, false, "and 1 while a group of e1 had no other usable endpoint", nil},
		{"within RecoveryTimeout + burstGrace of their readmission", []time.Duration{100 * ms, 5 * time.Second}, []healthEvent{ejected(300*ms, "writes"), other("e2", true, 4*time.Second), other("e3", true, 3*time.Second), other("e3", false, 5*time.Second-RecoveryTimeout-burstGrace+ms)}, 1, 0, 1, 0, false, "and 1 while", nil},
		{"after it", []time.Duration{100 * ms, 5 * time.Second}, []healthEvent{ejected(300*ms, "writes"), other("e2", true, 4*time.Second), other("e3", true, 3*time.Second), other("e3", false, 5*time.Second-RecoveryTimeout-burstGrace)}, 1, 1, 0, 0, true, "1 after it", nil},
		{"one other endpoint left in one group only", []time.Duration{100 * ms, 5 * time.Second}, []healthEvent{ejected(300*ms, "writes"), other("e2", true, 4*time.Second)}, 1, 1, 0, 0, true, "1 after it", nil},
		{"hard faults on the others", []time.Duration{100 * ms, 21 * time.Second}, []healthEvent{ejected(300*ms, "writes")}, 1, 0, 1, 0, false, "and 1 while", nil},
		{"rule 4 in the client's record", []time.Duration{100 * ms, 5 * time.Second}, []healthEvent{ejected(300*ms, "writes")}, 1, 0, 1, 0, false, "and 1 while",
			[]lastResort{{group: GroupDefault, endpoint: "e1", from: at(4 * time.Second), to: at(4500 * ms)}}},
		{"rule 4 still in force", []time.Duration{100 * ms, 5 * time.Second}, []healthEvent{ejected(300*ms, "writes")}, 1, 0, 1, 0, false, "and 1 while",
			[]lastResort{{group: GroupWest, endpoint: "e1", from: at(2 * time.Second)}}},
		{"rule 4 ended before the window", []time.Duration{100 * ms, 5 * time.Second}, []healthEvent{ejected(300*ms, "writes")}, 1, 1, 0, 0, true, "1 after it (at 15.0s)",
			[]lastResort{{group: GroupDefault, endpoint: "e1", from: at(2 * time.Second), to: at(5*time.Second - RecoveryTimeout - burstGrace - ms)}}},
		{"rule 4 for another endpoint", []time.Duration{100 * ms, 5 * time.Second}, []healthEvent{ejected(300*ms, "writes")}, 1, 1, 0, 0, true, "1 after it",
			[]lastResort{{group: GroupDefault, endpoint: "e2", from: at(4 * time.Second)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var refused [NumEndpoints][]time.Time
			for _, d := range tc.refused {
				refused[0] = append(refused[0], at(d))
			}
			refused[1] = []time.Time{at(20 * time.Second)} // another endpoint's: never counted
			bs := judgeCommitBursts([]commitRun{run}, refused, tc.evs, tc.lr, tl)
			if len(bs) != 1 {
				t.Fatalf("%d verdicts for one fault", len(bs))
			}
			b := bs[0]
			line := b.line(t0)
			if b.first != tc.first || b.late != tc.late || b.excused != tc.excused || b.readmitted != tc.readmissions || b.bad() != tc.bad || !strings.Contains(line, tc.want) {
				t.Errorf("first %d, late %d, excused %d, readmitted %d, bad %v, line %q; want %d, %d, %d, %d, %v, containing %q",
					b.first, b.late, b.excused, b.readmitted, b.bad(), line, tc.first, tc.late, tc.excused, tc.readmissions, tc.bad, tc.want)
			}
		})
	}
}

// TestCommitRuns reads the long commit failures from a timeline: each from the step that put
// it in force to the one that ended it on its endpoint, the run's end for one still in force.
func TestCommitRuns(t *testing.T) {
	t0 := time.Unix(1000, 0)
	long := func(step int) Fault { return Fault{Kind: KindFrontendCommitFailLong, Step: step} }
	var s1, s2, s3, s4 State
	s1.Frontend[1] = long(0)
	s2 = s1
	s2.Frontend[2] = Fault{Kind: KindFrontendUnavailable, Step: 1}
	s3 = s2
	s3.Frontend[1] = Fault{}
	s4 = s3
	s4.Frontend[0] = long(3)
	tl := &faultTimeline{start: t0, steps: []applied{
		{at: t0.Add(1 * time.Second), step: Step{After: s1}},
		{at: t0.Add(2 * time.Second), step: Step{After: s2}},
		{at: t0.Add(20 * time.Second), step: Step{After: s3}},
		{at: t0.Add(21 * time.Second), step: Step{After: s4}},
	}}
	end := t0.Add(60 * time.Second)
	got := commitRuns(tl, end)
	want := []commitRun{
		{endpoint: 1, step: 0, start: t0.Add(time.Second), heal: t0.Add(20 * time.Second)},
		{endpoint: 0, step: 3, start: t0.Add(21 * time.Second), heal: end},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("commitRuns = %+v, want %+v", got, want)
	}
}

// TestCommitInvariantRow checks the row: not checked without frontends or without a fault,
// failed when one fault had a second burst.
func TestCommitInvariantRow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	run := commitRun{endpoint: 0, start: t0, heal: t0.Add(20 * time.Second)}
	evs := []healthEvent{{endpoint: "e1", ejected: true, class: "writes", at: t0.Add(time.Second)}}
	var oneBurst, twoBursts [NumEndpoints][]time.Time
	oneBurst[0] = []time.Time{t0.Add(500 * time.Millisecond)}
	twoBursts[0] = []time.Time{t0.Add(500 * time.Millisecond), t0.Add(10 * time.Second)}
	for _, tc := range []struct {
		name      string
		runs      []commitRun
		refused   [NumEndpoints][]time.Time
		frontends bool
		want      Status
	}{
		{"no frontends", nil, oneBurst, false, NotChecked},
		{"none drawn", nil, oneBurst, true, NotChecked},
		{"one burst", []commitRun{run}, oneBurst, true, Pass},
		{"two bursts", []commitRun{run}, twoBursts, true, Fail},
	} {
		tl := &faultTimeline{start: t0, initial: State{Groups: initialGroups}}
		if inv := commitInvariant(tc.runs, tc.refused, evs, nil, tl, tc.frontends); inv.Status != tc.want || len(inv.Details) != len(tc.runs) {
			t.Errorf("%s: %v with %d details (%s), want %v with %d", tc.name, inv.Status, len(inv.Details), inv.Result, tc.want, len(tc.runs))
		}
	}
}

// checkCommitFailLong checks the long commit failure of step i: on an endpoint without a TCP
// fault that serves a group, held commitLongMin to commitLongMax by its own heal, never cut
// short by an all-down phase, a database-wide fault or the end.
func checkCommitFailLong(t *testing.T, where string, p *Plan, i int) {
	t.Helper()
	s := p.Steps[i]
	if s.For < commitLongMin || s.For > commitLongMax {
		t.Fatalf("%s: step %d (%v): want %v-%v", where, i, s, commitLongMin, commitLongMax)
	}
	before := s.After
	before.Frontend[s.Endpoint] = Fault{}
	if before.TCP[s.Endpoint].active() || !before.serves(s.Endpoint) {
		t.Fatalf("%s: step %d (%v) on an endpoint with %v, or that serves no group in %v (%s)", where, i, s, before.TCP[s.Endpoint], before.Groups, before.faults())
	}
	for j, h := range p.Steps[i+1:] {
		if kinds[h.Kind].layer == layerFrontend && !kinds[h.Kind].instant && h.Endpoint == s.Endpoint {
			if h.Kind != KindFrontendPass || h.At != s.At+s.For || h.Phase != "" {
				t.Fatalf("%s: step %d (%v) ends the fe-commit-fail-long of step %d (%v), want its heal at %v", where, i+1+j, h, i, s, s.At+s.For)
			}
			return
		}
	}
	t.Fatalf("%s: step %d (%v) never healed", where, i, s)
}
