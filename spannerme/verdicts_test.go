package spannerme

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// Group [A B C], A at 20ms, B and C at 400ms (one local PSC endpoint, two far ones): B and C
// are degraded against A. When A goes down, B and C are the group's last resort at once: the
// group fails over RecoveryTimeout after A's loss, not a brownout Window later (the brownout
// rule alone would keep B and C degraded against each other's fallback until it has seen
// them fast for a Window).
func TestVerdictSlowEndpointsAreTheLastResort(t *testing.T) {
	const (
		rt, sd   = time.Second, time.Second
		interval = 2 * time.Second  // BrownoutSettings.ProbeInterval default
		window   = 10 * time.Second // BrownoutSettings.Window default
	)
	a := startEndpoint(t, "A")
	b, c := startServer(t, "B"), startServer(t, "C")
	clk := clock.NewFake(time.Time{})
	lat := &fakeLatencies{lat: map[string]time.Duration{}}
	logs := &syncBuffer{}
	s := fastSettings(logs)
	reader, mp := newMetricReader()
	s.MeterProvider = mp
	gme := newGMEWith(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(rt, sd, a.Addr(), b, c)}),
		s, plumbing{clock: clk, latency: lat.of})
	eventually(t, 10*time.Second, "every endpoint Available", func() bool {
		for _, e := range groupOf(gme, "g").Endpoints {
			if e.State != Available {
				return false
			}
		}
		return true
	})
	lat.set(a.Addr(), 20*time.Millisecond)
	lat.set(b, 400*time.Millisecond)
	lat.set(c, 400*time.Millisecond)
	start := clk.Now()
	for k := 1; clk.Now().Sub(start) <= window+interval; k++ {
		clk.Set(start.Add(time.Duration(k) * interval))
	}
	clk.Advance(rt)
	verdicts := func() []string {
		var v []string
		for _, e := range groupOf(gme, "g").Endpoints {
			v = append(v, e.Verdict)
		}
		return v
	}
	for _, e := range []string{b, c} {
		if bs, st := brownoutOf(gme, "g", e); bs == nil || !bs.Degraded || st != Unavailable {
			t.Fatalf("%s at 400ms beside A at 20ms: %v, brownout %+v; want degraded and Unavailable (verdicts %q)", e, st, bs, verdicts())
		}
	}
	if g := groupOf(gme, "g"); g.Current != a.Addr() || g.Endpoints[1].Verdict != verdict.Degraded.String() {
		t.Fatalf("before A goes down: %+v", g)
	}

	a.Down()
	eventually(t, 10*time.Second, "B and C the last resort once A is down", func() bool {
		g := groupOf(gme, "g")
		return g.Endpoints[0].Verdict == verdict.NotConnected.String() &&
			g.Endpoints[1].Verdict == verdict.DegradedLastResort.String() && g.Endpoints[2].Verdict == verdict.DegradedLastResort.String()
	})
	// The verdict shows in the logs (one line per endpoint: no other line tells it) and in
	// the verdict gauge.
	for _, e := range []string{b, c} {
		if got := logLines(logs, "level=WARN", "last resort", "endpoint="+e, "was=degraded"); len(got) != 1 {
			t.Errorf("%d last-resort lines for %s, want 1:\n%s", len(got), e, logs)
		}
		for key, want := range map[string]int64{"degraded_last_resort": 1, "degraded": 0, "usable": 0} {
			if v, ok := valueWhere(collect(t, reader), observe.MetricVerdict, attribute.String(AttrMultiEndpoint, "g"),
				attribute.String(AttrEndpoint, e), attribute.String(AttrVerdict, key)); !ok || v != want {
				t.Errorf("verdict{%s, %s} = %d (%v), want %d", e, key, v, ok, want)
			}
		}
	}
	// No brownout evaluation has run since (the fake clock has not moved): the verdicts
	// alone made B and C available.
	if bs, _ := brownoutOf(gme, "g", b); bs == nil || !bs.Degraded {
		t.Fatalf("B's brownout verdict changed without a probe: %+v", bs)
	}
	if g := groupOf(gme, "g"); g.Current != a.Addr() {
		t.Fatalf("the group left A before its RecoveryTimeout: %+v", g)
	}
	clk.Advance(rt)
	if g := groupOf(gme, "g"); g.Current != b {
		t.Fatalf("RecoveryTimeout after A went down the group serves from %q, want B (verdicts %q)", g.Current, verdicts())
	}
	if got := statusString(gme); testing.Verbose() {
		t.Log(got)
	}
}

// Every endpoint of a group answers UNAVAILABLE for 10s (the database, not a path to it, is
// failing), then heals: the group never switches (its first endpoint is ejected, the probe
// that confirms the fallback fails too, and with every connected endpoint ejected the group
// keeps using them), and its first endpoint serves as soon as the fault ends.
func TestVerdictFaultEverywhereIsNoReasonToMove(t *testing.T) {
	b := startFrontendBackend(t, 2)
	e1, e2 := b.fes[0], b.fes[1]
	tl := newEventLog()
	s := tl.settings(fastSettings(nil)) // health at its defaults
	client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(time.Second, time.Second, e1.Addr(), e2.Addr()),
	}), s)
	l := startLoad(client, 4, 2*time.Second)
	defer l.end()
	tl.restart()
	for _, fe := range b.fes {
		if err := fe.FailAll(codes.Unavailable); err != nil {
			t.Fatal(err)
		}
	}
	tl.waitHealth(t, e1.Addr(), EndpointEjected, 10*time.Second)
	tl.waitHealth(t, e2.Addr(), EndpointEjected, 10*time.Second)
	time.Sleep(10 * time.Second) // the fault lasts; real time, since the frontends are real servers
	if _, sw := tl.counts(); sw != 0 {
		t.Fatalf("%d switches while every endpoint failed alike\n%s", sw, tl)
	}
	okBefore, e1Before := l.ok.Load(), queries(e1)
	for _, fe := range b.fes {
		fe.Pass()
	}
	took := waitFor(t, 10*time.Second, "a query served by E1 after the heal", func() bool {
		return l.ok.Load() > okBefore && queries(e1) > e1Before
	})
	time.Sleep(2 * time.Second) // the readmissions may come later; no switch meanwhile either
	if _, sw := tl.counts(); sw != 0 {
		t.Fatalf("%d switches after the heal\n%s", sw, tl)
	}
	if g := groupOf(gme, "default"); g.Current != e1.Addr() {
		t.Fatalf("current %q after the heal, want E1", g.Current)
	}
	t.Logf("fault on every endpoint for 10s: 0 switches; E1 served %v after the heal\n%s", took.Round(time.Millisecond), tl)
}

// A fault of the whole database reaches each endpoint at its own moment, so a standby's probe
// can pass just before the fault reaches it, or be under way since before and pass after. Group
// [E1 E2], ProbeInterval 3s, RecoveryTimeout 1s, 4 workers calling GetSession on E1 (raw
// calls: no Spanner client retry, so no retry elsewhere fails E2's calls for it): E2's idle
// probe is held when every call on both starts failing UNAVAILABLE, and passes once E1 is
// ejected. The probe that confirms E2 (E1's ejection asks for it) cannot be that one: it
// follows it, fails and ejects E2, and the group stays where it is. Until the chaos soak's
// hour on 530bb91 broke its db-unavailable row, the confirm was skipped while a probe was under
// way (or had ended less than ProbeInterval/10 before): E2 looked usable until its next probe,
// 3s later, and the group moved to it after 1s.
func TestVerdictFaultEverywhereConfirmsAfterAProbeUnderWay(t *testing.T) {
	const rt, sd = time.Second, time.Second
	b := startFrontendBackend(t, 2)
	e1, e2 := b.fes[0], b.fes[1]
	tl := newEventLog()
	s := tl.settings(fastSettings(nil))
	s.Health = healthSettings(5*time.Second, 3*time.Second)
	s.Health.Brownout.Disabled = true // its latency probes are not the health probes held here
	var hold, released atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	probe := SpannerProbe(b.database)
	s.Health.Probe = func(ctx context.Context, conn grpc.ClientConnInterface) error {
		// E1 answers calls, so only the standby E2 is probed: the first probe held is E2's.
		if hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			select {
			case <-release:
				released.Store(true)
				return nil // it passed before the fault reached E2
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return probe(ctx, conn)
	}
	_, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(rt, sd, e1.Addr(), e2.Addr()),
	}), s)
	ctx, stop := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	defer func() { stop(); workers.Wait() }()
	for range 4 {
		workers.Go(func() {
			for ctx.Err() == nil {
				// NOT_FOUND from the database (an answer: a success for health), UNAVAILABLE
				// from the frontend during the fault.
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_ = gme.Invoke(cctx, "/google.spanner.v1.Spanner/GetSession",
					&spannerpb.GetSessionRequest{Name: b.database + "/sessions/none"}, &spannerpb.Session{})
				cancel()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	hold.Store(true)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no probe of E2 within 10s (ProbeInterval 3s)")
	}
	tl.restart()
	for _, fe := range b.fes {
		if err := fe.FailAll(codes.Unavailable); err != nil {
			t.Fatal(err)
		}
	}
	_, e1Out := tl.waitHealth(t, e1.Addr(), EndpointEjected, 10*time.Second)
	// E1's ejection event is delivered before the confirms are asked for, on the same
	// goroutine: give them that moment, so that E2's confirm meets the probe still under way.
	time.Sleep(200 * time.Millisecond)
	close(release)
	ev, e2Out := tl.waitHealth(t, e2.Addr(), EndpointEjected, 10*time.Second)
	time.Sleep(rt + sd) // a move the fault caused would have happened by now
	if _, sw := tl.counts(); sw != 0 {
		t.Fatalf("%d switches while every endpoint failed alike (E1 ejected at %v, E2 at %v)\n%s", sw, e1Out, e2Out, tl)
	}
	if !released.Load() {
		t.Fatalf("E2's held probe gave up before its release (its timeout): the test saw no probe pass after the fault\n%s", tl)
	}
	if ev.Reason != ReasonProbeFailed || e2Out-e1Out >= rt {
		t.Fatalf("E2 ejected %v after E1 (%s), want by its confirming probe within RecoveryTimeout %v\n%s", e2Out-e1Out, ev.Reason, rt, tl)
	}
	t.Logf("E2's probe under way at the fault passed: E2 ejected %v after E1 by the probe that followed it; 0 switches\n%s",
		(e2Out - e1Out).Round(time.Millisecond), tl)
}
