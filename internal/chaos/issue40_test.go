package chaos

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// samplesAt makes connSamples every 100ms from t0 for d, endpoint e accepting perSecond(t)
// connections a second (the others none).
func samplesAt(t0 time.Time, d time.Duration, e int, perSecond func(time.Duration) int64) []connSample {
	var out []connSample
	var acc float64
	for at := time.Duration(0); at <= d; at += connPoll {
		var s connSample
		s.at = t0.Add(at)
		acc += float64(perSecond(at)) * connPoll.Seconds()
		s.accepted[e] = int64(acc + 0.5)
		out = append(out, s)
	}
	return out
}

func TestDieYoungInvariant(t *testing.T) {
	t0 := time.Unix(1000, 0)
	run := []dieYoungRun{{endpoint: 1, start: t0.Add(time.Second), end: t0.Add(7 * time.Second)}}
	cases := []struct {
		name      string
		perSecond func(time.Duration) int64
		want      Status
	}{
		// At once for the first 2s (the client cannot know yet), then backed off: holds.
		{"backed off", func(at time.Duration) int64 {
			if at < 3*time.Second {
				return 300
			}
			return 3
		}, Pass},
		// Issue 40's measured 3,600 a second throughout: broken.
		{"reconnects at once", func(time.Duration) int64 { return 3600 }, Fail},
		// Backed off but one second over the bound (dieYoungRate: 30 at the run's
		// ReconnectMaxDelay): broken.
		{"one second over", func(at time.Duration) int64 {
			if at >= 5*time.Second && at < 6*time.Second {
				return 2 * int64(dieYoungRate)
			}
			return 2
		}, Fail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv := dieYoungInvariant(run, samplesAt(t0, 10*time.Second, 1, tc.perSecond), t0)
			if inv.Status != tc.want {
				t.Fatalf("status %v, want %v: %s %v", inv.Status, tc.want, inv.Result, inv.Details)
			}
		})
	}
	// A loaded machine took no sample from 5s to 6.3s: the second from 6s is counted from
	// the sample at 5s, 2s of backed-off reconnects (25 a second) in one cell. Within the
	// bound of the span the samples cover (55); 29 a second, within the bound of every whole
	// second, is over it in that span.
	for _, tc := range []struct {
		rate int64
		want Status
	}{{25, Pass}, {29, Fail}} {
		var late []connSample
		for _, s := range samplesAt(t0, 10*time.Second, 1, func(time.Duration) int64 { return tc.rate }) {
			if at := s.at.Sub(t0); at <= 5*time.Second || at >= 6300*time.Millisecond {
				late = append(late, s)
			}
		}
		inv := dieYoungInvariant(run, late, t0)
		if inv.Status != tc.want || !strings.Contains(strings.Join(inv.Details, " "), "/2.0s") {
			t.Fatalf("%d a second, a sample 1.3s late: status %v, want %v: %s %v", tc.rate, inv.Status, tc.want, inv.Result, inv.Details)
		}
	}
	// Two samples 0.9 s apart around a sampled second: 27 connections is within the 30 of a
	// second (the span rule only stretches the bound; a stricter 25 once broke a run).
	if n := dieYoungAllowed(900 * time.Millisecond); n != int64(dieYoungRate) {
		t.Fatalf("a 0.9 s span allows %d connections, want dieYoungRate (%d)", n, dieYoungRate)
	}
	short := []dieYoungRun{{endpoint: 0, start: t0, end: t0.Add(2500 * time.Millisecond)}}
	inv := dieYoungInvariant(short, samplesAt(t0, 5*time.Second, 0, func(time.Duration) int64 { return 3600 }), t0)
	if inv.Status != Pass || !strings.Contains(inv.Result, "0 judged") {
		t.Fatalf("a fault shorter than 3s was judged: %v %s", inv.Status, inv.Result)
	}
	if inv := dieYoungInvariant(nil, nil, t0); inv.Status != NotChecked {
		t.Fatalf("no fault: status %v, want N/A", inv.Status)
	}
}

func TestDieYoungRuns(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := &faultTimeline{start: t0, steps: []applied{
		{at: t0.Add(time.Second), step: Step{Kind: KindDieYoung, Endpoint: 2}},
		{at: t0.Add(2 * time.Second), step: Step{Kind: KindPass, Endpoint: 1}}, // another endpoint's heal
		{at: t0.Add(5 * time.Second), step: Step{Kind: KindPass, Endpoint: 2}},
		{at: t0.Add(6 * time.Second), step: Step{Kind: KindDieYoung, Endpoint: 0}}, // not healed
	}}
	got := dieYoungRuns(tl)
	if len(got) != 2 || got[0].endpoint != 2 || !got[0].end.Equal(t0.Add(5*time.Second)) || !got[1].end.IsZero() {
		t.Fatalf("runs %+v", got)
	}
}

func TestOverloadInvariants(t *testing.T) {
	t0 := time.Unix(1000, 0)
	name := func(addr string) string { return addr }
	start, end := t0.Add(10*time.Second), t0.Add(15*time.Second)
	refusal := errors.New("spanner: code = \"ResourceExhausted\", desc = \"" + overloadMarker + " refuses this query\"")
	heavy := func(n int) []classified {
		var out []classified
		for i := range n {
			at := start.Add(time.Duration(i) * 10 * time.Millisecond)
			out = append(out, classified{outcome: outcome{kind: opHeavy, start: at, end: at, err: refusal}, class: classOverload})
		}
		return out
	}
	reads := func(n int) []classified {
		var out []classified
		for i := range n {
			at := start.Add(time.Duration(i) * 10 * time.Millisecond)
			out = append(out, classified{outcome: outcome{kind: opPointRead, start: at, end: at, err: refusal}, class: classOverload})
		}
		return out
	}
	tl := &faultTimeline{start: t0, initial: State{Groups: initialGroups}}
	away := []spannerme.SwitchEvent{{Name: GroupDefault, From: "e1", To: "e2", Reason: spannerme.Fallback, At: start.Add(time.Second)}}
	cases := []struct {
		name         string
		run          overloadRun
		refused      []classified
		switches     []spannerme.SwitchEvent
		wantQ, wantD Status
	}{
		{"query refused once each", overloadRun{kind: KindQueryOverload, start: start, end: end, refusedHeavy: 50}, heavy(50), nil, Pass, NotChecked},
		{"query resent elsewhere", overloadRun{kind: KindQueryOverload, start: start, end: end, refusedHeavy: 100}, heavy(50), nil, Fail, NotChecked},
		// No connection of the heavy query's group was cut (the timeline's down is before the
		// fault): one frontend call more than 1.5 each is the client's.
		{"one query resent, no cut", overloadRun{kind: KindQueryOverload, start: start, end: end, refusedHeavy: 2}, heavy(1), nil, Fail, NotChecked},
		{"query cooled an endpoint", overloadRun{kind: KindQueryOverload, start: start, end: end, refusedHeavy: 50, cooled: []string{"e1"}}, heavy(50), nil, Fail, NotChecked},
		{"query moved a group", overloadRun{kind: KindQueryOverload, start: start, end: end, refusedHeavy: 50}, heavy(50), away, Fail, NotChecked},
		{"db few failures", overloadRun{kind: KindDatabaseOverload, start: start, end: end, reads: 1000}, reads(10), nil, NotChecked, Pass},
		{"db too many failures", overloadRun{kind: KindDatabaseOverload, start: start, end: end, reads: 1000}, reads(11), nil, NotChecked, Fail},
		{"db moved a group", overloadRun{kind: KindDatabaseOverload, start: start, end: end, reads: 1000}, nil, away, NotChecked, Fail},
		// A switch away from an endpoint with a fault of its own is that fault's, not the overload's.
		{"db switch of another fault", overloadRun{kind: KindDatabaseOverload, start: start, end: end, reads: 1000}, nil,
			[]spannerme.SwitchEvent{{Name: GroupDefault, From: "e3", To: "e1", Reason: spannerme.Fallback, At: start.Add(time.Second)}}, NotChecked, Pass},
		{"db recovery switch", overloadRun{kind: KindDatabaseOverload, start: start, end: end, reads: 1000}, nil,
			[]spannerme.SwitchEvent{{Name: GroupDefault, From: "e2", To: "e1", Reason: spannerme.Recovery, At: start.Add(time.Second)}}, NotChecked, Pass},
	}
	down := State{Groups: initialGroups}
	down.TCP[2] = Fault{Kind: KindDown}
	tl.steps = []applied{{at: start.Add(-time.Second), step: Step{Kind: KindDown, Endpoint: 2, After: down}}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			invs := overloadInvariants([]overloadRun{tc.run}, tc.refused, tc.switches, tl, name, true)
			if invs[0].Status != tc.wantQ || invs[1].Status != tc.wantD {
				t.Fatalf("query-overload %v, db-overload %v; want %v, %v:\n%s %v\n%s %v", invs[0].Status, invs[1].Status, tc.wantQ, tc.wantD,
					invs[0].Result, invs[0].Details, invs[1].Result, invs[1].Details)
			}
		})
	}
	if invs := overloadInvariants(nil, nil, nil, tl, name, false); invs[0].Status != NotChecked || invs[1].Status != NotChecked {
		t.Fatal("without frontends the overload rows are not N/A")
	}
}

func TestClassifyOverloadRefusal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := &faultTimeline{start: t0, initial: State{Groups: initialGroups}}
	o := outcome{kind: opHeavy, group: GroupDefault, start: t0, end: t0.Add(time.Millisecond),
		err: status.Error(codes.ResourceExhausted, overloadMarker+" refuses this query")}
	if c := classify(o, tl); c.class != classOverload {
		t.Fatalf("class %v, want classOverload", c.class)
	}
	o.err = status.Error(codes.ResourceExhausted, "quota of the project")
	if c := classify(o, tl); c.class != classUnexplained {
		t.Fatalf("another RESOURCE_EXHAUSTED: class %v, want classUnexplained", c.class)
	}
}

// fakeStream is a grpc.ServerStream whose context carries md.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

func TestDatabaseOverloadInterceptor(t *testing.T) {
	var d dbOverload
	icpt := d.interceptor(1)
	call := func(method string, md metadata.MD) error {
		ss := fakeStream{ctx: metadata.NewIncomingContext(context.Background(), md)}
		return icpt(nil, ss, &grpc.StreamServerInfo{FullMethod: method}, func(any, grpc.ServerStream) error { return nil })
	}
	const query = "/google.spanner.v1.Spanner/ExecuteStreamingSql"
	heavy := metadata.Pairs(heavyQueryHeader, "1")
	probe := metadata.Pairs("x-goog-request-params", "session="+spannerme.ProbeSessionID)
	if err := call(query, heavy); err != nil {
		t.Fatalf("no overload in force: %v", err)
	}
	d.set(KindQueryOverload, 1)
	if err := call(query, heavy); status.Code(err) != codes.ResourceExhausted || !isOverloadRefusal(err) || hasRetryInfo(err) {
		t.Fatalf("query-overload, heavy query: %v (want RESOURCE_EXHAUSTED without RetryInfo)", err)
	}
	if err := call(query, nil); err != nil {
		t.Fatalf("query-overload, another query: %v", err)
	}
	d.set(KindDatabaseOverload, 1)
	shed := 0
	const n = 2000
	for range n {
		err := call(query, nil)
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted || !hasRetryInfo(err) {
				t.Fatalf("db-overload: %v (want RESOURCE_EXHAUSTED with RetryInfo)", err)
			}
			shed++
		}
		if err := call("/google.spanner.v1.Spanner/BatchCreateSessions", nil); err != nil {
			t.Fatalf("db-overload failed a session call: %v", err)
		}
		if err := call("/google.spanner.v1.Spanner/Commit", probe); err != nil {
			t.Fatalf("db-overload failed a probe: %v", err)
		}
	}
	if share := float64(shed) / n; share < 0.25 || share > 0.35 {
		t.Fatalf("db-overload shed %.3f of the data calls, want about %v", share, dbOverloadFraction)
	}
	if r, s := d.totals(); r != 1 || s != int64(shed) {
		t.Fatalf("totals %d refused, %d shed; want 1, %d", r, s, shed)
	}
	d.set(KindNone, 1)
	if err := call(query, heavy); err != nil {
		t.Fatalf("healed: %v", err)
	}
}

func hasRetryInfo(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() == dbOverloadDelay {
			return true
		}
	}
	return false
}

// A switch away from an endpoint during an overload is blamed on the overload only when
// nothing else hit the endpoint: a frontend restart on it just before (its connections cut)
// makes the switch the client's right answer.
func TestBlamedSwitchesExcuseInstantFaults(t *testing.T) {
	t0 := time.Unix(1000, 0)
	start := t0.Add(10 * time.Second)
	sw := []spannerme.SwitchEvent{{Name: "default", From: "e1", To: "e3", Reason: spannerme.Fallback, At: start.Add(1300 * time.Millisecond)}}
	name := func(s string) string { return s }
	for _, tc := range []struct {
		name   string
		steps  []applied
		blamed bool
	}{
		{"nothing on e1", nil, true},
		{"fe-restart on e1 0.4 s before", []applied{{at: start.Add(900 * time.Millisecond), step: Step{Kind: KindFrontendRestart, Endpoint: 0}}}, false},
		{"fe-restart on e2", []applied{{at: start.Add(900 * time.Millisecond), step: Step{Kind: KindFrontendRestart, Endpoint: 1}}}, true},
		{"fe-restart on e1 long before", []applied{{at: t0, step: Step{Kind: KindFrontendRestart, Endpoint: 0}}}, true},
	} {
		tl := &faultTimeline{start: t0, initial: State{Groups: initialGroups}, steps: tc.steps}
		got := blamedSwitches(sw, start, start.Add(5*time.Second), tl, name)
		if (len(got) > 0) != tc.blamed {
			t.Errorf("%s: blamed %v, want blamed %v", tc.name, got, tc.blamed)
		}
	}
}

// The lines of faults that broke a row come first, so that a report cut at 20 lines shows them.
func TestBrokenFirst(t *testing.T) {
	got := brokenFirst([]string{"a", "b BROKEN", "c", "d BROKEN"}, " BROKEN")
	if want := []string{"b BROKEN", "d BROKEN", "a", "c"}; !slices.Equal(got, want) {
		t.Fatalf("brokenFirst: %q, want %q", got, want)
	}
}

// A query-overload during which a connection of the heavy query's group was cut may count one
// frontend call more than 1.5 per refused query (a refusal lost on the cut connection, the
// query resent); and a refusal is counted in one overload only, though the windows of two
// overloads 200 ms apart overlap.
func TestQueryOverloadCutsAndWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	name := func(addr string) string { return addr }
	start, end := t0.Add(10*time.Second), t0.Add(12*time.Second)
	refusal := errors.New("spanner: code = \"ResourceExhausted\", desc = \"" + overloadMarker + " refuses this query\"")
	heavyAt := func(n int, from time.Time) []classified {
		var out []classified
		for i := range n {
			at := from.Add(time.Duration(i) * 10 * time.Millisecond)
			out = append(out, classified{outcome: outcome{kind: opHeavy, start: at, end: at, err: refusal}, class: classOverload})
		}
		return out
	}
	// west=[e3], so a cut of e3 is not the default group's.
	groups := Groups{{0, 1}, {2}, {0, 1, 2}}
	cut := func(kind Kind, e int, at time.Time) *faultTimeline {
		return &faultTimeline{start: t0, initial: State{Groups: groups},
			steps: []applied{{at: at, step: Step{Kind: kind, Endpoint: e, After: State{Groups: groups}}}}}
	}
	run := func(frontend int64) overloadRun {
		return overloadRun{kind: KindQueryOverload, start: start, end: end, refusedHeavy: frontend}
	}
	// healThen is the overload's heal, due at 12 s and applied at end, then a down of e1
	// applied after it (the steps of one instant are applied one after another), due at due.
	healThen := func(due time.Duration, after time.Duration) *faultTimeline {
		return &faultTimeline{start: t0, initial: State{Groups: groups}, steps: []applied{
			{at: end, step: Step{At: 12 * time.Second, Kind: KindOverloadPass, Endpoint: -1, After: State{Groups: groups}}},
			{at: end.Add(after), step: Step{At: due, Kind: KindDown, Endpoint: 0, After: State{Groups: groups}}},
		}}
	}
	cases := []struct {
		name     string
		tl       *faultTimeline
		frontend int64
		app      int
		want     Status
	}{
		{"an outage of every endpoint ends it", cut(KindDown, 0, end), 2, 1, Pass},
		{"a reset of a default endpoint", cut(KindReset, 1, start.Add(time.Second)), 2, 1, Pass},
		{"a frontend restart of a default endpoint", cut(KindFrontendRestart, 0, start.Add(time.Second)), 2, 1, Pass},
		{"a cut of another group's endpoint", cut(KindDown, 2, start.Add(time.Second)), 2, 1, Fail},
		{"a cut after the heal", cut(KindDown, 0, end.Add(time.Millisecond)), 2, 1, Fail},
		{"an outage due with the heal, applied after it", healThen(12*time.Second, 50*time.Microsecond), 2, 1, Pass},
		{"an outage due after the heal", healThen(12*time.Second+time.Millisecond, time.Millisecond), 2, 1, Fail},
		{"every refused query resent, with a cut", cut(KindDown, 0, end), 6, 3, Fail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			invs := overloadInvariants([]overloadRun{run(tc.frontend)}, heavyAt(tc.app, start), nil, tc.tl, name, true)
			if invs[0].Status != tc.want {
				t.Fatalf("query-overload %v, want %v: %s %v", invs[0].Status, tc.want, invs[0].Result, invs[0].Details)
			}
		})
	}

	// Two overloads 200 ms apart: the second's refusals end within a second of the first's
	// heal. The first resent each of its 10 refused queries once (20 frontend calls): broken,
	// however many refusals the second had.
	tl := &faultTimeline{start: t0, initial: State{Groups: groups}}
	next := end.Add(200 * time.Millisecond)
	first := run(20)
	second := overloadRun{kind: KindQueryOverload, start: next, end: next.Add(2 * time.Second), refusedHeavy: 10}
	refused := append(heavyAt(10, start), heavyAt(10, next.Add(100*time.Millisecond))...)
	invs := overloadInvariants([]overloadRun{first, second}, refused, nil, tl, name, true)
	if invs[0].Status != Fail || len(invs[0].Details) == 0 || !strings.Contains(invs[0].Details[0], "10 heavy queries failed RESOURCE_EXHAUSTED over 20 frontend calls") {
		t.Fatalf("query-overload %v, want the first of two overloads broken with its own 10 refusals: %s %v", invs[0].Status, invs[0].Result, invs[0].Details)
	}
}
