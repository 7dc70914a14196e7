package spannerme

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
)

// BenchmarkHedgedStream measures a single-use streaming query (fakeSpanner: one message) of
// a group of two endpoints, same run: "off" without hedging (its allocations are those of
// any stream), "on-not-fired" with hedging whose delay never passes (the cost of being
// ready to hedge), "on-other-group" with hedging on another group only.
func BenchmarkHedgedStream(b *testing.B) {
	e1, e2 := startFakeSpanner(b), startFakeSpanner(b)
	groups := func() map[string]*multiendpoint.MultiEndpointOptions {
		return map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, e1, e2)}
	}
	settings := func(h map[string]HedgingSettings) Settings {
		s := fastSettings(nil)
		s.Hedging = h
		return s
	}
	targets := []struct {
		name string
		gme  *GCPMultiEndpoint
	}{
		{"off", newGME(b, options("default", groups()), settings(nil))},
		{"on-not-fired", newGME(b, options("default", groups()), settings(map[string]HedgingSettings{"default": {Delay: time.Hour}}))},
		{"on-other-group", newGME(b, options("default", groups()), settings(map[string]HedgingSettings{"other": {Delay: time.Hour}}))},
	}
	req := &spannerpb.ExecuteSqlRequest{Session: "projects/p/instances/i/databases/d/sessions/s", Sql: "SELECT 1", Transaction: singleUse}
	for _, t := range targets {
		b.Run(t.name, func(b *testing.B) {
			api := spannerpb.NewSpannerClient(t.gme)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := queryOnce(ctx, api, req); err != nil { // warm up, and wait for the connection
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				for p.Next() {
					if err := queryOnce(ctx, api, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if h := hedgingStatusOf(t.gme.hedger.Group("default")); h != nil && h.Sent != 0 {
				b.Errorf("%d hedges sent", h.Sent)
			}
		})
	}
}

// queryOnce runs req as a streaming query, read to its end.
func queryOnce(ctx context.Context, api spannerpb.SpannerClient, req *spannerpb.ExecuteSqlRequest) error {
	s, err := api.ExecuteStreamingSql(ctx, req)
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
