package spannerme

// Failure scenario F24 (docs/health.md): a frontend restart (or a load balancer recycling some of its
// connections) while queries are in flight is a connectivity event, not endpoint failures.
// Figures are logged with t.Logf (go test -v -run TestCase_F24).

import (
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
)

// F24: group [E1, E2], RecoveryTimeout 1s, SwitchingDelay 1s, default health settings; 40
// queries of about 300ms each in flight through E1's frontend. Every connection of E1 (or
// half of them) is closed once; the frontend keeps accepting and the client reconnects at
// once. Expect no failed query, E1 never ejected, and at least 90% of the queries that start
// after the reset served by E1.
func TestCase_F24_ConnectionResetIsNotAnEndpointFailure(t *testing.T) {
	const (
		rt, sd  = time.Second, time.Second
		workers = 40
		latency = 300 * time.Millisecond
		after   = 200 // queries counted after the reset
	)
	for _, tc := range []struct {
		name string
		all  bool
	}{
		{"every connection", true},
		{"half of the connections", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startFrontendBackend(t, 2)
			e1, e2 := b.fes[0], b.fes[1]
			tl := newEventLog()
			s := tl.settings(fastSettings(nil)) // Health: every default
			client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
				"default": group(rt, sd, e1.Addr(), e2.Addr()),
			}), s)
			e1.SetLatency(latency)

			l := startLoad(client, workers, 10*time.Second)
			defer l.end()
			// Steady state: every worker has had queries served by E1.
			eventually(t, 20*time.Second, "queries on E1", func() bool { return queries(e1) > 3*workers })

			conns := int(e1.Stats().Active)
			var dropped int
			if tc.all {
				dropped = conns
				e1.DropConnections()
			} else {
				dropped = e1.DropSomeConnections(conns / 2)
			}
			reset := tl.restart()
			q1, q2 := queries(e1), queries(e2)
			eventually(t, 20*time.Second, "queries after the reset", func() bool {
				return queries(e1)-q1+queries(e2)-q2 >= after
			})
			window := time.Since(reset)
			on1, on2 := queries(e1)-q1, queries(e2)-q2
			l.end()

			ph, _ := poolOf(gme, e1.Addr())
			if ph.Health.Ejections != 0 {
				t.Fatalf("E1 ejected after the reset of %d of its %d connections: %+v\n%s", dropped, conns, ph.Health, tl)
			}
			if _, _, _, ok := tl.switchTo(e2.Addr(), 0); ok {
				t.Fatalf("traffic switched to E2 after the reset\n%s", tl)
			}
			if on1*10 < (on1+on2)*9 {
				t.Fatalf("%d of %d queries after the reset served by E1, want at least 90%%\n%s", on1, on1+on2, tl)
			}
			if n := l.failed.Load(); n != 0 {
				t.Fatalf("%d of %d queries failed: %v\n%s", n, n+l.ok.Load(), l.errors(), tl)
			}
			t.Logf("F24 figures (%s; %d workers, %v per query, default health): %d of %d connections of E1 closed; "+
				"of the first %d queries after the reset (%v) %d on E1, %d on E2; %d queries, none failed; E1 health: ejections %d, "+
				"failures in the interval %d, consecutive %d",
				tc.name, workers, latency, dropped, conns, on1+on2, window.Round(time.Millisecond), on1, on2, l.ok.Load(),
				ph.Health.Ejections, ph.Health.Failures, ph.Health.ConsecutiveFailures)
		})
	}
}
