package chaos

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// downTimeline is a run in which e1 (every group's first endpoint, a member of tiered's top
// tier) is down from t0+10s to t0+20s, and nothing else happens.
func downTimeline(t0 time.Time) *faultTimeline {
	down := State{Groups: initialGroups}
	down.TCP[0] = Fault{Kind: KindDown, Step: 0}
	up := State{Groups: initialGroups}
	return &faultTimeline{start: t0, initial: State{Groups: initialGroups}, steps: []applied{
		{at: t0.Add(10 * time.Second), step: Step{Kind: KindDown, Endpoint: 0, Fault: Fault{Kind: KindDown}, After: down}},
		{at: t0.Add(20 * time.Second), step: Step{Kind: KindUp, Endpoint: 0, After: up}},
	}}
}

// TestFailoverTableJudgesP99 feeds the table a run in which the default group's failovers from
// a downed e1 took 0.1s to 0.9s and one took 3s, over the bound for a kill (RecoveryTimeout and
// one connect, 1.75s): the row of down fails, with the p99 named; without the slow one it
// holds.
func TestFailoverTableJudgesP99(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := downTimeline(t0)
	start, heal := t0.Add(10*time.Second), t0.Add(20*time.Second)
	var eps []episode
	for i, d := range []time.Duration{100, 200, 300, 400, 500, 600, 700, 800, 900, 3000} {
		eps = append(eps, episode{kind: "down", fault: Fault{Kind: KindDown}, endpoint: 0, group: 0, start: start, heal: heal,
			elsewhere: start.Add(d * time.Millisecond), backWatched: true, back: heal.Add(time.Duration(i+1) * 100 * time.Millisecond),
			callsAtStart: 1000, callsAtHeal: 2000})
	}
	stop := t0.Add(time.Minute)
	rows := failoverTable(eps, tl, nil, [NumEndpoints][]int32{}, t0, stop, nil)
	if len(rows) != 1 || rows[0].Kind != "down" || len(rows[0].Failover) != 10 || len(rows[0].Back) != 10 {
		t.Fatalf("rows %+v", rows)
	}
	r := rows[0]
	if got := percentile(r.Failover, 50); got != 500*time.Millisecond {
		t.Errorf("p50 %v, want 500ms", got)
	}
	if got := percentile(r.Failover, 99); got != 3*time.Second {
		t.Errorf("p99 %v, want 3s", got)
	}
	if r.FailoverBound != RecoveryTimeout+oneConnect || r.BackBound != oneConnect+SwitchingDelay {
		t.Errorf("bounds %v and %v", r.FailoverBound, r.BackBound)
	}
	if r.Calls != 10*1000 {
		t.Errorf("calls %d, want 10000", r.Calls)
	}
	inv := failoverInvariant(rows, true)
	if inv.Status != Fail || len(inv.Details) != 1 || !strings.Contains(inv.Details[0], "down: failover p99 3.00s") {
		t.Fatalf("a p99 of 3s for a kill: %v %s %v", inv.Status, inv.Result, inv.Details)
	}
	var out bytes.Buffer
	printFailover(&out, rows)
	if !strings.Contains(out.String(), "3.00s!") {
		t.Errorf("the table does not flag the p99:\n%s", out.String())
	}
	rows = failoverTable(eps[:9], tl, nil, [NumEndpoints][]int32{}, t0, stop, nil)
	if inv := failoverInvariant(rows, true); inv.Status != Pass {
		t.Fatalf("failovers of 0.1s to 0.9s: %v %s %v", inv.Status, inv.Result, inv.Details)
	}
	if inv := failoverInvariant(nil, false); inv.Status != NotChecked {
		t.Fatalf("without frontends: %v", inv.Status)
	}
}

// TestFailoverTimeCases: what is measured, what counts as never, and what is left out.
func TestFailoverTimeCases(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := downTimeline(t0)
	start, heal := t0.Add(10*time.Second), t0.Add(20*time.Second)
	bound := failoverBound(KindDown)
	base := episode{kind: "down", fault: Fault{Kind: KindDown}, endpoint: 0, group: 0, start: start, heal: heal}
	cases := []struct {
		name           string
		mod            func(*episode)
		want           time.Duration
		ok, healed     bool
		tl             *faultTimeline
		wantBackOK     bool
		wantBack       time.Duration
		backWatchedSet bool
	}{
		{name: "moved", mod: func(e *episode) { e.elsewhere = start.Add(300 * time.Millisecond) }, want: 300 * time.Millisecond, ok: true},
		// The group kept a healthy e2 for the whole 10s fault and never succeeded there.
		{name: "never moved", mod: func(e *episode) {}, want: never, ok: true},
		// A fault that healed within its bound before the group moved: it needed no failover.
		{name: "healed first", mod: func(e *episode) { e.heal = start.Add(time.Second) }, healed: true},
		// The run ended before the heal and before a success elsewhere: not measured.
		{name: "run ended", mod: func(e *episode) { e.heal = time.Time{} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ep := base
			tc.mod(&ep)
			d, ok, healed := failoverTime(ep, tl, bound)
			if d != tc.want || ok != tc.ok || healed != tc.healed {
				t.Fatalf("got %v %v %v, want %v %v %v", d, ok, healed, tc.want, tc.ok, tc.healed)
			}
		})
	}
	// The way back: measured while e1 stays default's first healthy endpoint; never when the
	// whole bound passed without a success on it; not measured when the run stopped first.
	stop := t0.Add(time.Minute)
	ep := base
	ep.backWatched, ep.back = true, heal.Add(1500*time.Millisecond)
	if d, ok := backTime(ep, tl, [NumEndpoints][]int32{}, t0, stop, backBound(KindDown, false), nil); !ok || d != 1500*time.Millisecond {
		t.Fatalf("back: %v %v", d, ok)
	}
	ep.back = time.Time{}
	if d, ok := backTime(ep, tl, [NumEndpoints][]int32{}, t0, stop, backBound(KindDown, false), nil); !ok || d != never {
		t.Fatalf("no success back for a minute: %v %v", d, ok)
	}
	if _, ok := backTime(ep, tl, [NumEndpoints][]int32{}, t0, heal.Add(time.Second), backBound(KindDown, false), nil); ok {
		t.Fatal("measured a switch-back after the load stopped")
	}
	// A way back over its bound (2.25s) is the client's even if e1 has a fault after the
	// bound and before the success (5s after the heal, at 4s): counted, not censored. A fault
	// within the bound (at 1s) censors it. A reset or a frontend restart of e1 within the
	// bound, instant as they are (no state in force), starts the way back again: it is
	// measured from the last cut, against the same bound. Not one of e2, nor one after the
	// bound (or after the success).
	for _, tc := range []struct {
		name  string
		steps []Step
		at    []time.Duration
		ok    bool
		want  time.Duration // from the last cut
		back  time.Duration // success back, after the heal; 0: none
		after time.Duration // of the run's stop, after the heal
	}{
		{"a down of e1 after the bound", []Step{{Kind: KindDown, Endpoint: 0}}, []time.Duration{4 * time.Second}, true, 5 * time.Second, 5 * time.Second, time.Minute},
		{"a down of e1 within the bound", []Step{{Kind: KindDown, Endpoint: 0}}, []time.Duration{time.Second}, false, 0, 5 * time.Second, time.Minute},
		{"two resets of e1, back 1.5s after the second", []Step{{Kind: KindReset, Endpoint: 0}, {Kind: KindReset, Endpoint: 0}},
			[]time.Duration{100 * time.Millisecond, 800 * time.Millisecond}, true, 1500 * time.Millisecond, 2300 * time.Millisecond, time.Minute},
		{"a frontend restart of e1, back 5s after it", []Step{{Kind: KindFrontendRestart, Endpoint: 0}}, []time.Duration{time.Second}, true, 4 * time.Second, 5 * time.Second, time.Minute},
		{"a reset of e2", []Step{{Kind: KindReset, Endpoint: 1}}, []time.Duration{time.Second}, true, 5 * time.Second, 5 * time.Second, time.Minute},
		{"a reset of e1 after the bound", []Step{{Kind: KindReset, Endpoint: 0}}, []time.Duration{3 * time.Second}, true, 5 * time.Second, 5 * time.Second, time.Minute},
		{"a reset of e1 after the success", []Step{{Kind: KindReset, Endpoint: 0}}, []time.Duration{2 * time.Second}, true, 1500 * time.Millisecond, 1500 * time.Millisecond, time.Minute},
		{"no success within the bound from the reset", []Step{{Kind: KindReset, Endpoint: 0}}, []time.Duration{time.Second}, true, never, 0, time.Minute},
		{"the run stopped within the bound from the reset", []Step{{Kind: KindReset, Endpoint: 0}}, []time.Duration{time.Second}, false, 0, 0, 3 * time.Second},
	} {
		late := downTimeline(t0)
		for i, st := range tc.steps {
			after := State{Groups: initialGroups}
			if !kinds[st.Kind].instant {
				after.TCP[st.Endpoint] = Fault{Kind: st.Kind, Step: 2 + i}
			}
			st.Fault, st.After = Fault{Kind: st.Kind}, after
			late.steps = append(late.steps, applied{at: heal.Add(tc.at[i]), step: st})
		}
		ep.back = time.Time{}
		if tc.back > 0 {
			ep.back = heal.Add(tc.back)
		}
		d, ok := backTime(ep, late, [NumEndpoints][]int32{}, t0, heal.Add(tc.after), backBound(KindDown, false), nil)
		if ok != tc.ok || (ok && d != tc.want) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, d, ok, tc.want, tc.ok)
		}
	}
}

// TestShareBack: a member of tiered's top tier is back at its full share at the end of the
// first 1s window in which it carried 35% of the tier's successes.
func TestShareBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	heal := t0.Add(10 * time.Second)
	var b [NumEndpoints][]int32
	n := int(20 * time.Second / shareBucket)
	for e := range b {
		b[e] = make([]int32, n)
	}
	healB := int(10 * time.Second / shareBucket)
	for i := range n {
		b[1][i] = 10 // the peer, e2, always
		switch {
		case i <= healB: // e1 down
		case i < healB+20: // slow start: 1 in 11
			b[0][i] = 1
		default:
			b[0][i] = 10
		}
	}
	ep := episode{endpoint: 0, group: tieredGroup, tiered: true, heal: heal}
	got := shareBack(ep, b, t0)
	// Windows of 10 buckets from healB+1; e1 reaches 35% of the tier when at least 5 of the
	// 10 buckets are at 10 each: (5*10+5*1)/(5*10+5*1+100) = 0.355, the window from healB+15.
	want := t0.Add(time.Duration(healB+15+10) * shareBucket)
	if !got.Equal(want) {
		t.Fatalf("back at %v, want %v", got.Sub(t0), want.Sub(t0))
	}
}

// TestFailoverTableListsAnswersLate: a time ends at its first success's arrival, so a failover
// of 0.5s whose first answer came 2s after the fault's start (over the 1.75s bound) is within
// its bound, and listed, not failed, as one that would not be at the answer; so is a way back
// of 1s first answered 2.5s after the heal (bound 2.25s). Not listed: those answered within
// their bound, even when the call that arrived first was answered after it (another call,
// arrived later, was answered first).
func TestFailoverTableListsAnswersLate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := downTimeline(t0)
	start, heal := t0.Add(10*time.Second), t0.Add(20*time.Second)
	ep := func(answer, first, backAnswer, backFirst time.Duration) episode {
		return episode{kind: "down", fault: Fault{Kind: KindDown}, endpoint: 0, group: 0, start: start, heal: heal,
			elsewhere: start.Add(500 * time.Millisecond), elsewhereAnswered: start.Add(answer), elsewhereFirst: start.Add(first),
			backWatched: true, back: heal.Add(time.Second), backAnswered: heal.Add(backAnswer), backFirst: heal.Add(backFirst)}
	}
	rows := failoverTable([]episode{
		ep(2*time.Second, 2*time.Second, 2500*time.Millisecond, 2500*time.Millisecond),
		ep(600*time.Millisecond, 600*time.Millisecond, 1100*time.Millisecond, 1100*time.Millisecond),
		ep(3*time.Second, 700*time.Millisecond, 3*time.Second, 1200*time.Millisecond),
	}, tl, nil, [NumEndpoints][]int32{}, t0, t0.Add(time.Minute), nil)
	if len(rows) != 1 || len(rows[0].AnsweredLate) != 2 ||
		rows[0].AnsweredLate[0] != "failover of e1 at +10.0s (in force: e1:down): 0.50s to the arrival, 2.00s to the first answer, bound 1.75s" ||
		rows[0].AnsweredLate[1] != "way back of e1 at +20.0s (in force: none): 1.00s to the arrival, 2.50s to the first answer, bound 2.25s" {
		t.Fatalf("answered late: %q", rows[0].AnsweredLate)
	}
	inv := failoverInvariant(rows, true)
	if inv.Status != Pass || len(inv.Details) != 2 || !strings.Contains(inv.Result, "2 within it only because") {
		t.Fatalf("%v %s %q", inv.Status, inv.Result, inv.Details)
	}
}

// TestLostIn counts the group's failed calls during the episode while another endpoint was
// usable: not another group's, not the database's refusals, not those from before the fault.
func TestLostIn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := downTimeline(t0)
	start, heal := t0.Add(10*time.Second), t0.Add(20*time.Second)
	ep := episode{endpoint: 0, group: 0, start: start, heal: heal}
	call := func(group string, at time.Duration, class failureClass) classified {
		s := start.Add(at)
		return classified{outcome: outcome{group: group, start: s, end: s.Add(100 * time.Millisecond), err: errors.New("x")}, class: class}
	}
	fs := []classified{
		call(GroupDefault, time.Second, classUnexplained),
		call(GroupDefault, 2*time.Second, classSilent),
		call(GroupWest, time.Second, classUnexplained),       // another group
		call(GroupDefault, 3*time.Second, classOverload),     // the database's refusal
		call(GroupDefault, -5*time.Second, classUnexplained), // before the fault
		call(GroupDefault, 11*time.Second, classUnexplained), // after the heal
	}
	if n := lostIn(ep, tl, fs); n != 2 {
		t.Fatalf("lost %d, want 2", n)
	}
}

// TestFailoverWatch: a down of e1 opens an episode for each group that was on it (default by its
// current endpoint, tiered as a member of its current tier; west, on e3, none); successes on
// another endpoint close the failover at the earliest arrival among them (not at the first
// answer), and after the heal a success on e1 closes the way back.
func TestFailoverWatch(t *testing.T) {
	t0 := time.Now()
	w := &failoverWatch{}
	w.begin(t0, &load{})
	down := State{Groups: initialGroups}
	down.TCP[0] = Fault{Kind: KindDown}
	w.after(Step{Kind: KindDown, Endpoint: 0, Fault: Fault{Kind: KindDown}, After: down}, t0, State{Groups: initialGroups}, [numGroups]int{0, 2, 0})
	w.served(0, GroupDefault, t0.Add(-time.Millisecond)) // arrived before the fault: not a failover
	w.served(1, GroupDefault, t0.Add(2*time.Millisecond))
	w.served(1, GroupDefault, t0.Add(time.Millisecond)) // arrived earlier, answered later: the failover's end
	w.served(1, GroupWest, t0.Add(time.Millisecond))
	heal := t0.Add(time.Second)
	w.after(Step{Kind: KindUp, Endpoint: 0, After: State{Groups: initialGroups}}, heal, down, [numGroups]int{-1, -1, -1})
	w.served(0, GroupDefault, heal.Add(2*time.Millisecond))
	w.served(0, GroupDefault, heal.Add(time.Millisecond)) // arrived earlier, answered later: the way back's end
	eps, _, _ := w.collect()
	if len(eps) != 2 {
		t.Fatalf("%d episodes, want 2 (default, tiered): %+v", len(eps), eps)
	}
	d, tr := eps[0], eps[1]
	if d.group != 0 || !d.elsewhere.Equal(t0.Add(time.Millisecond)) || d.elsewhereAnswered.IsZero() || !d.heal.Equal(heal) ||
		!d.backWatched || !d.back.Equal(heal.Add(time.Millisecond)) || d.backAnswered.IsZero() || d.kind != "down" {
		t.Fatalf("default's episode %+v", d)
	}
	// The first answer is that of the call served first (arrived later), not after it.
	if d.elsewhereFirst.IsZero() || d.elsewhereFirst.After(d.elsewhereAnswered) || d.backFirst.IsZero() || d.backFirst.After(d.backAnswered) {
		t.Fatalf("default's first answers: elsewhere %v (answered %v), back %v (answered %v)", d.elsewhereFirst, d.elsewhereAnswered, d.backFirst, d.backAnswered)
	}
	if tr.group != tieredGroup || !tr.tiered || !tr.elsewhere.IsZero() || !tr.backWatched {
		t.Fatalf("tiered's episode %+v", tr)
	}
}

// TestWorstBackNamesTheGroupsSwitches: the longest way back is told with the default group's
// switches from the heal to its end, and only those: not one before the heal, not one after,
// not another group's. A way back over its bound (3s against 2.25s) is told to its end, so a
// late switch shows.
func TestWorstBackNamesTheGroupsSwitches(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := downTimeline(t0)
	start, heal := t0.Add(10*time.Second), t0.Add(20*time.Second)
	var eps []episode
	for i := range 10 {
		eps = append(eps, episode{kind: "down", fault: Fault{Kind: KindDown}, endpoint: 0, group: 0, start: start, heal: heal,
			elsewhere: start.Add(100 * time.Millisecond), backWatched: true, back: heal.Add(time.Duration(i+1) * 100 * time.Millisecond)})
	}
	name := func(addr string) string { return map[string]string{"a1": "e1", "a2": "e2"}[addr] }
	evs := []spannerme.SwitchEvent{
		{Name: GroupDefault, From: "a1", To: "a2", Reason: spannerme.Fallback, At: start.Add(600 * time.Millisecond)},
		{Name: GroupWest, From: "a2", To: "a1", Reason: spannerme.Recovery, At: heal.Add(300 * time.Millisecond)},
		{Name: GroupDefault, From: "a2", To: "a1", Reason: spannerme.Recovery, At: heal.Add(900 * time.Millisecond)},
		{Name: GroupDefault, From: "a1", To: "a2", Reason: spannerme.Fallback, At: heal.Add(2800 * time.Millisecond)},
		{Name: GroupDefault, From: "a2", To: "a1", Reason: spannerme.Recovery, At: heal.Add(3500 * time.Millisecond)},
	}
	for _, tc := range []struct {
		name   string
		eps    []episode
		evs    []spannerme.SwitchEvent
		worst  string
		within string
	}{
		{"within the bound", eps, evs, "e1 at +20.0s (in force: none)", "; default's switches from the heal to +21.0s: +20.9s e2->e1 (recovery)"},
		{"no switch of the group in the window", eps, evs[:2], "e1 at +20.0s (in force: none)", "; default's switches from the heal to +21.0s: none"},
		{"over the bound", append(slices.Clone(eps), episode{kind: "down", fault: Fault{Kind: KindDown}, endpoint: 0, group: 0, start: start, heal: heal,
			elsewhere: start.Add(100 * time.Millisecond), backWatched: true, back: heal.Add(3 * time.Second)}), evs,
			"e1 at +20.0s (in force: none)", "; default's switches from the heal to +23.0s: +20.9s e2->e1 (recovery), +22.8s e1->e2 (fallback)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := failoverTable(tc.eps, tl, nil, [NumEndpoints][]int32{}, t0, t0.Add(time.Minute), nil)
			switchesOfWorst(rows, tc.evs, name, tl)
			if len(rows) != 1 || rows[0].WorstBack != tc.worst || rows[0].worstBackSwitches != tc.within {
				t.Fatalf("worst back:\n got %q %q\nwant %q %q", rows[0].WorstBack, rows[0].worstBackSwitches, tc.worst, tc.within)
			}
		})
	}
}

// TestWayBackOverItsBoundMeasuredFromTheHoldsEnd: e1 is down from +10s to +20s and the
// default group's first success back on it comes after the heal. The group had failed over to
// e3, or to e2 (its switches, sw), and switched back to e1 at +21.2s. A hang on the endpoint
// the group was on, before that switch, held the workers' calls there (a hang's heal does not
// release them) until heldDeadline after the hang's end or the switch: a time over the bound
// that came before that release is not timed, and one after it has the part of the release
// after the switch back taken off. A release before the switch back, a switch back after the
// bound, a hang elsewhere or after the switch, and a way back within the bound are timed from
// the heal.
func TestWayBackOverItsBoundMeasuredFromTheHoldsEnd(t *testing.T) {
	t0 := time.Unix(1000, 0)
	heal := t0.Add(20 * time.Second)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const s, ms = time.Second, time.Millisecond
	timeline := func(hangOn int, hangFrom, hangTo time.Duration) *faultTimeline {
		type change struct {
			at   time.Duration
			kind Kind
			e    int
		}
		changes := []change{{10 * s, KindDown, 0}, {20 * s, KindUp, 0}}
		if hangTo > 0 {
			changes = append(changes, change{hangFrom, KindFrontendHang, hangOn}, change{hangTo, KindFrontendPass, hangOn})
		}
		slices.SortFunc(changes, func(a, b change) int { return int(a.at - b.at) })
		cur := State{Groups: initialGroups}
		var steps []applied
		for _, c := range changes {
			switch c.kind {
			case KindDown:
				cur.TCP[c.e] = Fault{Kind: KindDown}
			case KindUp:
				cur.TCP[c.e] = Fault{}
			case KindFrontendHang:
				cur.Frontend[c.e] = Fault{Kind: KindFrontendHang}
			case KindFrontendPass:
				cur.Frontend[c.e] = Fault{}
			}
			steps = append(steps, applied{at: at(c.at), step: Step{Kind: c.kind, Endpoint: c.e, After: cur}})
		}
		return &faultTimeline{start: t0, initial: State{Groups: initialGroups}, steps: steps}
	}
	// via: the group fails over from e1 to via at +10.5s and comes back at backAt.
	switches := func(via int, backAt time.Duration) []groupSwitch {
		return []groupSwitch{{group: 0, to: via, at: at(10500 * ms)}, {group: 1, to: 0, at: at(20100 * ms)}, {group: 0, to: 0, at: at(backAt)}}
	}
	bound := oneConnect + SwitchingDelay
	for _, tc := range []struct {
		name             string
		back             time.Duration // after the heal
		sw               []groupSwitch
		hangOn           int
		hangFrom, hangTo time.Duration
		want             time.Duration // 0: not timed
	}{
		{"no hang", 2500 * ms, switches(2, 21200*ms), 2, 0, 0, 2500 * ms},
		{"a hang on e3, where the group was, before the switch back: its calls held to their deadline", 2500 * ms, switches(2, 21200*ms), 2, 20500 * ms, 21 * s, 0},
		{"a hang on e3 whose calls were released before the switch back: the client's time", 2500 * ms, switches(2, 21200*ms), 2, 17 * s, 18 * s, 2500 * ms},
		{"one whose calls were released 0.3s after the switch back: that part is taken off", 2500 * ms, switches(2, 21200*ms), 2, 17 * s, 18500 * ms, 2200 * ms},
		{"a hang on e3 in force at the switch: held to the deadline after it", 2500 * ms, switches(2, 21200*ms), 2, 20500 * ms, 50 * s, 0},
		{"a way back long after that hold's end: from it", 24 * s, switches(2, 21200*ms), 2, 20500 * ms, 50 * s, 24*s - heldDeadline(GroupDefault, false)},
		{"the same within the bound", 2 * s, switches(2, 21200*ms), 2, 20500 * ms, 21 * s, 2 * s},
		{"a hang on e3 while the group was on e2", 2500 * ms, switches(1, 21200*ms), 2, 20500 * ms, 21 * s, 2500 * ms},
		{"a hang on e3 that began after the switch back", 2500 * ms, switches(2, 21200*ms), 2, 21500 * ms, 22 * s, 2500 * ms},
		{"a switch back later than the bound", 2500 * ms, switches(2, 22400*ms), 2, 20500 * ms, 21 * s, 2500 * ms},
		{"no switch back at all", 0, switches(2, 30*s), 2, 20500 * ms, 21 * s, never},
		{"no switches known: the group's first endpoint was current", 2500 * ms, nil, 0, 0, 0, 2500 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := episode{kind: "down", fault: Fault{Kind: KindDown}, endpoint: 0, group: 0, start: at(10 * s), heal: heal, backWatched: true}
			if tc.back > 0 {
				ep.back = heal.Add(tc.back)
			}
			d, ok := backTime(ep, timeline(tc.hangOn, tc.hangFrom, tc.hangTo), [NumEndpoints][]int32{}, t0, at(time.Minute), bound, tc.sw)
			if ok != (tc.want != 0) || (ok && d != tc.want) {
				t.Errorf("backTime = %v, %v; want %v (0: not timed)", d, ok, tc.want)
			}
		})
	}
}

// TestTierWayBackHeldDuringTheRamp: e2, a member of tiered's top tier, is down from +10s to
// +20s; the group went down to e3 and switched back to its top tier (to e1, a member of e2's
// tier) at +21.2s, ramping for tierSlowStart. A hold on e3, the tier it left, in force during
// the ramp and within the bound held the workers whose calls the ramp sent there until it
// healed or the tier's longest worker deadline passed after the span; one after the ramp, or
// on e1, holds nothing; nor does any without a switch back to the tier.
func TestTierWayBackHeldDuringTheRamp(t *testing.T) {
	t0 := time.Unix(1000, 0)
	heal := t0.Add(20 * time.Second)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const s, ms = time.Second, time.Millisecond
	hold := func(on int, from, to time.Duration, hang bool) *faultTimeline {
		down, up, held := State{Groups: initialGroups}, State{Groups: initialGroups}, State{Groups: initialGroups}
		down.TCP[1] = Fault{Kind: KindDown}
		held.TCP[on] = Fault{Kind: KindSilentBlackhole}
		if hang {
			held.TCP[on], held.Frontend[on] = Fault{}, Fault{Kind: KindFrontendHang}
		}
		steps := []applied{
			{at: at(10 * s), step: Step{Kind: KindDown, Endpoint: 1, After: down}},
			{at: heal, step: Step{Kind: KindUp, Endpoint: 1, After: up}},
			{at: at(from), step: Step{Kind: KindSilentBlackhole, Endpoint: on, After: held}},
		}
		if to > 0 {
			steps = append(steps, applied{at: at(to), step: Step{Kind: KindPass, Endpoint: on, After: up}})
		}
		return &faultTimeline{start: t0, initial: State{Groups: initialGroups}, steps: steps}
	}
	back := []groupSwitch{{group: tieredGroup, to: 2, at: at(10500 * ms)}, {group: tieredGroup, to: 0, at: at(21200 * ms)}}
	bound := backBound(KindDown, true)
	rampEnd := at(21200*ms + tierSlowStart)
	for _, tc := range []struct {
		name     string
		on       int
		from, to time.Duration
		hang     bool
		sw       []groupSwitch
		want     time.Time // zero: no hold
	}{
		{"a silent blackhole of e3 0.1s into the ramp, to the end", 2, 21300 * ms, 0, false, back, rampEnd.Add(heldDeadline(GroupTiered, true))},
		{"the same, healed 1s later: its heal cuts the calls", 2, 21300 * ms, 22300 * ms, false, back, at(22300 * ms)},
		{"a frontend hang of e3 healed 1s later: its calls held to their deadline", 2, 21300 * ms, 22300 * ms, true, back, at(22300 * ms).Add(heldDeadline(GroupTiered, true))},
		{"one after the ramp", 2, 23500 * ms, 0, false, back, time.Time{}},
		{"one of e1, the tier switched back to", 0, 21300 * ms, 0, false, back, time.Time{}},
		{"no switch back to the tier", 2, 21300 * ms, 0, false, back[:1], time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := episode{kind: "down", fault: Fault{Kind: KindDown}, endpoint: 1, group: tieredGroup, tiered: true, start: at(10 * s), heal: heal, backWatched: true}
			got, _, ok := heldUntil(ep, hold(tc.on, tc.from, tc.to, tc.hang), tc.sw, heal, bound)
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Errorf("heldUntil = %v, %v; want %v", got.Sub(t0), ok, tc.want.Sub(t0))
			}
		})
	}
}

// TestFailoverInvariantListsEveryWayBackOverItsBound: of ten ways back from a downed e1, two
// (2.5s and 3s) are over the bound (2.25s): the invariant names the longest and lists both,
// so that a p99 over the bound is seen episode by episode; with one over, no list.
func TestFailoverInvariantListsEveryWayBackOverItsBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := downTimeline(t0)
	start, heal := t0.Add(10*time.Second), t0.Add(20*time.Second)
	var eps []episode
	for _, d := range []time.Duration{100, 200, 300, 400, 500, 600, 700, 2500, 800, 3000} {
		eps = append(eps, episode{kind: "down", fault: Fault{Kind: KindDown}, endpoint: 0, group: 0, start: start, heal: heal,
			elsewhere: start.Add(100 * time.Millisecond), backWatched: true, back: heal.Add(d * time.Millisecond)})
	}
	stop := t0.Add(time.Minute)
	inv := failoverInvariant(failoverTable(eps, tl, nil, [NumEndpoints][]int32{}, t0, stop, nil), true)
	all := strings.Join(inv.Details, "\n")
	if inv.Status != Fail || len(inv.Details) != 2 || !strings.Contains(all, "the 2 ways back over its bound") ||
		!strings.Contains(inv.Details[1], "2.50s") || !strings.Contains(inv.Details[1], "3.00s") {
		t.Fatalf("two ways back over the bound: %v %v", inv.Status, inv.Details)
	}
	inv = failoverInvariant(failoverTable(append(eps[:7:7], eps[9]), tl, nil, [NumEndpoints][]int32{}, t0, stop, nil), true)
	if inv.Status != Fail || len(inv.Details) != 1 {
		t.Fatalf("one way back over the bound: %v %v", inv.Status, inv.Details)
	}
}

// heldDeadline is the release of a held call: the shortest deadline of a group's workers
// without tiers (one free worker makes the first success back), the fifth shortest for the
// tier (a share is judged on five calls).
func TestHeldDeadline(t *testing.T) {
	for _, tc := range []struct {
		group  string
		tiered bool
		want   time.Duration
	}{{GroupDefault, false, 3 * time.Second}, {GroupWest, false, 4 * time.Second}, {GroupTiered, true, 5 * time.Second}} {
		if got := heldDeadline(tc.group, tc.tiered); got != tc.want {
			t.Errorf("heldDeadline(%s, %v) = %v, want %v", tc.group, tc.tiered, got, tc.want)
		}
	}
}

// A hang's calls are released at their deadline, or sooner by a cut of the holding endpoint's
// connections after they were sent (a reset here); a silent blackhole's also by its heal; a
// cut before they were sent, or another endpoint's, releases nothing.
func TestHeldCallsReleasedByACut(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tl := &faultTimeline{start: t0, steps: []applied{
		{at: at(5 * time.Second), step: Step{Kind: KindReset, Endpoint: 2}},
		{at: at(12 * time.Second), step: Step{Kind: KindReset, Endpoint: 1}},
		{at: at(13 * time.Second), step: Step{Kind: KindReset, Endpoint: 2}},
	}}
	hang := holdSpan{from: at(4 * time.Second)}
	if got := release(tl, 2, hang, at(10*time.Second), at(15*time.Second)); !got.Equal(at(13 * time.Second)) {
		t.Errorf("a hang's calls released at %v, want at the reset of e3 (+13s)", got.Sub(t0))
	}
	if got := release(tl, 2, hang, at(13*time.Second), at(16*time.Second)); !got.Equal(at(16 * time.Second)) {
		t.Errorf("calls sent at the reset released at %v, want their deadline (+16s)", got.Sub(t0))
	}
	if got := release(tl, 1, hang, at(13*time.Second), at(16*time.Second)); !got.Equal(at(16 * time.Second)) {
		t.Errorf("e2's calls released at %v, want their deadline (+16s)", got.Sub(t0))
	}
	silent := holdSpan{from: at(4 * time.Second), to: at(11 * time.Second), cuts: true}
	if got := release(tl, 2, silent, at(10*time.Second), at(15*time.Second)); !got.Equal(at(11 * time.Second)) {
		t.Errorf("a silent blackhole's calls released at %v, want at its heal (+11s)", got.Sub(t0))
	}
}

// An endpoint that health ejected before the fault, for a fault of its own, and had not
// readmitted by the heal has its way back measured from the end of its ejection time
// (ejectedAtHeal): the sixth emulator hour's e1, ejected for 4 s for a frontend's UNAVAILABLE
// 0.2 s before an outage of every endpoint, back 0.1 s after its readmission, 2.45 s after the
// outage's heal. The probe and the reconnection after the ejection's end stay in the bound;
// an ejection that began during the fault, or ended before the heal, or another endpoint's,
// leaves the time from the heal, and so does a way back that came before the ejection's end.
func TestWayBackFromTheEndOfAnEjectionAfterTheHeal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := downTimeline(t0)
	start, heal := t0.Add(10*time.Second), t0.Add(20*time.Second)
	eject := func(e int, at, until time.Time) healthEvent {
		return healthEvent{endpoint: endpointName(e), ejected: true, at: at, until: until}
	}
	readmit := func(e int, at time.Time) healthEvent {
		return healthEvent{endpoint: endpointName(e), at: at}
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name   string
		kind   Kind
		evs    []healthEvent
		back   time.Duration // after the heal
		want   time.Duration // the time measured
		status Status
	}{
		{"ejected before the fault, to 2.3s after the heal", KindDown,
			[]healthEvent{eject(0, start.Add(-ms(200)), heal.Add(ms(2300))), readmit(0, heal.Add(ms(2350)))}, ms(2450), ms(150), Pass},
		{"no ejection", KindDown, nil, ms(2450), ms(2450), Fail},
		{"ejected during the fault", KindDown,
			[]healthEvent{eject(0, start.Add(time.Second), heal.Add(ms(2300)))}, ms(2450), ms(2450), Fail},
		{"readmitted before the heal", KindDown,
			[]healthEvent{eject(0, start.Add(-time.Second), heal.Add(ms(2300))), readmit(0, heal.Add(-time.Second))}, ms(2450), ms(2450), Fail},
		{"its ejection time over before the heal", KindDown,
			[]healthEvent{eject(0, start.Add(-time.Second), heal.Add(-ms(100)))}, ms(2450), ms(2450), Fail},
		{"another endpoint's ejection", KindDown,
			[]healthEvent{eject(1, start.Add(-time.Second), heal.Add(ms(2300)))}, ms(2450), ms(2450), Fail},
		{"a later ejection before the fault is the one", KindDown,
			[]healthEvent{eject(0, start.Add(-5*time.Second), heal.Add(ms(100))), eject(0, start.Add(-ms(200)), heal.Add(ms(2300)))}, ms(2450), ms(150), Pass},
		{"an old ejection left open does not excuse one during the fault", KindDown,
			[]healthEvent{eject(0, start.Add(-5*time.Second), heal.Add(-time.Second)), eject(0, start.Add(time.Second), heal.Add(ms(2300)))}, ms(2450), ms(2450), Fail},
		{"slow after the ejection's end: over the bound from it", KindDown,
			[]healthEvent{eject(0, start.Add(-time.Second), heal.Add(time.Second))}, ms(3500), ms(2500), Fail},
		{"back before the ejection's end: from the heal", KindDown,
			[]healthEvent{eject(0, start.Add(-time.Second), heal.Add(3*time.Second))}, ms(2000), ms(2000), Pass},
		{"a fault detected by ejection: its own bound", KindFrontendUnavailable,
			[]healthEvent{eject(0, start.Add(-ms(200)), heal.Add(ms(2300)))}, ms(2450), ms(2450), Pass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eps := []episode{{kind: "k", fault: Fault{Kind: tc.kind}, endpoint: 0, group: 0, start: start, heal: heal,
				elsewhere: start.Add(500 * time.Millisecond), elsewhereAnswered: start.Add(600 * time.Millisecond), elsewhereFirst: start.Add(600 * time.Millisecond),
				backWatched: true, back: heal.Add(tc.back), backAnswered: heal.Add(tc.back), backFirst: heal.Add(tc.back)}}
			ejectedAtHeal(eps, tc.evs)
			rows := failoverTable(eps, tl, nil, [NumEndpoints][]int32{}, t0, t0.Add(time.Minute), nil)
			if len(rows) != 1 || len(rows[0].Back) != 1 || rows[0].Back[0] != tc.want || len(rows[0].AnsweredLate) != 0 {
				t.Fatalf("rows %+v, want one way back of %v (ejected until %v after the heal) and none answered late", rows, tc.want, eps[0].ejectedUntil.Sub(heal))
			}
			if inv := failoverInvariant(rows, true); inv.Status != tc.status {
				t.Fatalf("failover invariant %v, want %v: %s %q", inv.Status, tc.status, inv.Result, inv.Details)
			}
		})
	}
}
