package spannerme

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// tieredFrontends is the number of members of the top tier of BenchmarkClient_Frontend's
// client=spannerme-tiers.
const tieredFrontends = 2

// benchFrontendTiers is BenchmarkClient_Frontend's client=spannerme-tiers row at one latency
// and concurrency: this package's client with one group whose only tier has two members
// (Settings.Tiers), each a spannermetest.Frontend in front of the same backend with the same
// limit per connection (frontendStreams, 100 streams) and the same added latency as the one
// frontend of the other rows. The comparison with client=plain is stated, not equalized: the
// plain client has one endpoint, a tier of two has two, so the tiered client may open
// connections to both frontends; each frontend still allows 100 streams per connection.
// x-limit is against what the frontends allow the channels this client opened (channels
// counts the connections of both frontends that carry calls); x-plain is the ratio to
// plainQPS, the plain client's qps at the same latency and concurrency in the same run (0:
// not reported). The other metrics are benchFrontend's.
func benchFrontendTiers(b *testing.B, backend string, latency time.Duration, c int, query func(context.Context, *spanner.Client) error, plainQPS float64) {
	var row rowOnce // the frontends and the client, for every round of the row
	defer row.close()
	b.Run(fmt.Sprintf("latency=%v/C=%d/client=spannerme-tiers", latency, c), func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		warm := row.setUp(func() {
			var fes []*spannermetest.Frontend
			var addrs []string
			for range tieredFrontends {
				fe, err := spannermetest.NewFrontend(backend, spannermetest.WithMaxConcurrentStreams(frontendStreams))
				if err != nil {
					b.Fatal(err)
				}
				row.closers = append(row.closers, func() { _ = fe.Close() })
				fe.SetLatency(latency)
				fes = append(fes, fe)
				addrs = append(addrs, fe.Addr())
			}
			s := benchSettings
			s.Tiers = map[string]TierSettings{"default": {Tiers: [][]string{addrs}}}
			client, gme, err := NewMultiEndpointClientWithSettings(context.Background(), fixture.SpannertestDatabase, benchConfig(),
				options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, addrs...)}),
				s, benchClientOptions()...)
			if err != nil {
				b.Fatal(err)
			}
			row.closers = append(row.closers, func() { client.Close(); _ = gme.Close() })
			if err := waitTierMembers(ctx, gme, tieredFrontends); err != nil {
				b.Fatal(err)
			}
			row.vals = []any{fes, client}
		})
		fes, client := row.vals[0].([]*spannermetest.Frontend), row.vals[1].(*spanner.Client)
		qps := measureWave(ctx, b, c, warm, func() error { return query(ctx, client) })
		var channels int64
		for _, fe := range fes {
			channels += fe.Stats().Active - latencyConns
		}
		limit := float64(min(int64(c), channels*frontendStreams)) / latency.Seconds()
		b.ReportMetric(qps, "qps")
		b.ReportMetric(qps/limit, "x-limit")
		b.ReportMetric(float64(channels), "channels")
		if plainQPS > 0 {
			b.ReportMetric(qps/plainQPS, "x-plain")
		}
	})
}

// waitTierMembers waits until the default group of gme has n Available endpoints, so that
// calls are spread over every member from the first one measured. Errors: ctx ends first.
func waitTierMembers(ctx context.Context, gme *GCPMultiEndpoint, n int) error {
	for {
		for _, g := range gme.Status().Groups {
			avail := 0
			for _, e := range g.Endpoints {
				if e.State == Available {
					avail++
				}
			}
			if g.Name == "default" && avail >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fewer than %d members Available: %w", n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
