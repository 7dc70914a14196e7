package spannerme

import (
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// A frontend that ends every connection at a maximum age (600 ms, ±10% of gRPC's jitter, then
// 20 ms of grace for the calls in flight) while 4 workers run queries of 40 ms, which outlive
// the grace: once the pool has seen its first connections end, it replaces each connection at
// half that age, so no query starts on a connection the frontend is about to end, and none is
// cut. A cut query reaches the frontend twice (the Spanner client retries it once its
// connection closes), so the frontend receives exactly one query per query run. Without the
// replacement, the queries started in the last 20 ms before a GOAWAY (about one in thirty) are
// cut.
func TestConnectionChurnCutsNoQuery(t *testing.T) {
	const (
		age, grace = 600 * time.Millisecond, 20 * time.Millisecond
		latency    = 40 * time.Millisecond
		workers    = 4
		measured   = 200 // queries; without the replacement about 7 would be cut
	)
	fe := spannermetest.NewFrontendTB(t, startFakeSpanner(t), spannermetest.WithMaxConnectionAge(age, grace))
	client, gme := newSpannerClient(t, &spannerBackend{database: fixture.SpannertestDatabase},
		options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, fe.Addr())}),
		fastSettings(nil))
	fe.SetLatency(latency)

	// Warm-up: the frontend has ended each channel's connections three times (channels that
	// connected together end together, and such ends are one sample: three rounds teach the
	// age), and the channels have connected again each time.
	warm := startLoad(client, workers, time.Minute)
	eventually(t, 30*time.Second, "three new connections per channel", func() bool {
		return fe.Stats().Accepted >= 4*DefaultPoolSize
	})
	warm.end()
	if n := warm.failed.Load(); n != 0 {
		t.Fatalf("%d warm-up queries failed: %v", n, warm.errors())
	}

	fe.ResetStats()
	l := startLoad(client, workers, time.Minute)
	start := time.Now()
	eventually(t, time.Minute, "the measured queries", func() bool { return l.ok.Load()+l.failed.Load() >= measured })
	l.end()
	took := time.Since(start)
	ran, received := l.ok.Load()+l.failed.Load(), queries(fe)
	if n := l.failed.Load(); n != 0 {
		t.Fatalf("%d of %d queries failed: %v", n, ran, l.errors())
	}
	if received != ran {
		ps, _ := poolOf(gme, fe.Addr())
		t.Fatalf("%d queries ran in %v, the frontend received %d: %d cut and retried (pool: %+v)",
			ran, took, received, received-ran, ps)
	}
	t.Logf("%d queries in %v, each received once; %d connections accepted by the frontend since the start",
		ran, took, fe.Stats().Accepted)
}
