package spannerme

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// What the Spanner client's own interceptors do reaches the application through spannerme:
// its built-in metrics interceptor runs (on the front connection the client dials), and a
// DEADLINE_EXCEEDED error is marked "transaction outcome unknown" as its request-ID
// interceptor marks it. integration_test's differential suite compares both with a plain
// client; these tests state them on their own.

// sendServerTiming is a frontend's server interceptor that answers every call with a
// server-timing header, as a Google frontend does.
func sendServerTiming(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	_ = ss.SetHeader(metadata.Pairs("server-timing", "gfet4t7; dur=7"))
	return handler(srv, ss)
}

// interceptedClient is a multi-endpoint client over one frontend in front of a seeded
// spannertest, with its built-in metrics read by the returned reader.
func interceptedClient(t *testing.T, opts ...spannermetest.FrontendOption) (*spanner.Client, *spannermetest.Frontend, *sdkmetric.ManualReader) {
	t.Helper()
	addr, db := startSeededSpannertest(t)
	front := spannermetest.NewFrontendTB(t, addr, opts...)
	reader := sdkmetric.NewManualReader()
	config := fixture.ClientConfig()
	config.ClientMetricsProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, front.Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, db, config, o, fastSettings(nil), clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	return client, front, reader
}

func TestClient_BuiltinMetricsRecorded(t *testing.T) {
	client, _, reader := interceptedClient(t, spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(sendServerTiming)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := countAccounts(ctx, client); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("Orders",
			[]string{"OrderId", "AccountId", "Amount"}, []any{"metrics-order", "a", int64(1)})})
	}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	// instrument -> method -> count (a counter's sum, a histogram's number of samples)
	got := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			name, ok := strings.CutPrefix(m.Name, "spanner/client/")
			if !ok {
				continue
			}
			add := func(method string, n int64) {
				if got[name] == nil {
					got[name] = map[string]int64{}
				}
				got[name][method] += n
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("method")
					add(v.AsString(), p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("method")
					add(v.AsString(), int64(p.Count))
				}
			}
		}
	}
	for _, want := range []struct{ instrument, method string }{
		{"attempt_count", "Spanner.ExecuteStreamingSql"},
		{"attempt_count", "Spanner.Commit"},
		{"attempt_latencies", "Spanner.ExecuteStreamingSql"},
		{"attempt_latencies", "Spanner.Commit"},
		{"gfe_latencies", "Spanner.ExecuteStreamingSql"},
		{"gfe_latencies", "Spanner.Commit"},
	} {
		if got[want.instrument][want.method] == 0 {
			t.Errorf("built-in %s recorded nothing for %s; recorded: %v", want.instrument, want.method, got)
		}
	}
}

func TestClient_CommitDeadlineIsOutcomeUnknown(t *testing.T) {
	client, front, _ := interceptedClient(t)
	insert := func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("Orders",
			[]string{"OrderId", "AccountId", "Amount"}, []any{"outcome-order", "a", int64(1)})})
	}
	check := func(what string, err error) {
		t.Helper()
		var tou *spanner.TransactionOutcomeUnknownError
		//lint:ignore SA1019 the request ID is only exposed by spanner.Error
		var se *spanner.Error
		switch {
		case spanner.ErrCode(err) != codes.DeadlineExceeded:
			t.Errorf("%s: %v, want DEADLINE_EXCEEDED", what, err)
		case !errors.As(err, &tou):
			t.Errorf("%s: %v is no TransactionOutcomeUnknownError", what, err)
		case !strings.Contains(err.Error(), "transaction outcome unknown"):
			t.Errorf("%s: %q does not say the outcome is unknown", what, err)
		case !errors.As(err, &se) || se.RequestID == "":
			t.Errorf("%s: %v carries no request ID", what, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := front.FailMethods(codes.DeadlineExceeded, "/google.spanner.v1.Spanner/Commit"); err != nil {
		t.Fatal(err)
	}
	_, err := client.ReadWriteTransaction(ctx, insert)
	check("Commit answered DEADLINE_EXCEEDED", err)

	front.Pass()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	_, err = client.ReadWriteTransaction(short, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		if err := insert(ctx, tx); err != nil {
			return err
		}
		front.Hang() // the Commit, sent when this function returns, is held past the deadline
		return nil
	})
	check("the caller's deadline ends during the Commit", err)
	front.Pass()
}

// callRecorder is a caller's unary and stream client interceptor (given with
// option.WithGRPCDialOption) that records each call it sees: its method and whether it
// carries the Spanner client's request ID. Safe for concurrent use.
type callRecorder struct {
	mu    sync.Mutex
	calls []string // "method id" or "method none"
}

func (r *callRecorder) add(ctx context.Context, method string) {
	md, _ := metadata.FromOutgoingContext(ctx)
	id := "none"
	if len(md.Get("x-goog-spanner-request-id")) > 0 {
		id = "id"
	}
	r.mu.Lock()
	r.calls = append(r.calls, method+" "+id)
	r.mu.Unlock()
}

func (r *callRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *callRecorder) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.add(ctx, method)
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			r.add(ctx, method)
			return streamer(ctx, desc, cc, method, opts...)
		})),
	}
}

// The caller's interceptors (option.WithGRPCDialOption) see the application's calls on the
// endpoint that serves them, and never a probe: with health probes of the standby and the
// latency probes of both endpoints every 50ms, the frontend receives probes (calls without a
// request ID), while every call the interceptors saw carries one, and they saw each of the
// application's calls that reached the frontend.
func TestCallerInterceptorsSeeNoProbe(t *testing.T) {
	addr, db := startSeededSpannertest(t)
	var probes, appCalls atomic.Int64
	count := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if len(md.Get("x-goog-spanner-request-id")) == 0 {
			probes.Add(1)
		} else {
			appCalls.Add(1)
		}
		return handler(srv, ss)
	}
	front := spannermetest.NewFrontendTB(t, addr, spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(count)))
	e1, e2 := spannermetest.NewEndpointTB(t, front.Addr()), spannermetest.NewEndpointTB(t, front.Addr())
	settings := fastSettings(nil)
	settings.Health.ProbeInterval = 50 * time.Millisecond
	settings.Health.Brownout.ProbeInterval = 50 * time.Millisecond
	rec := &callRecorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, e1.Addr(), e2.Addr())})
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, db, fixture.ClientConfig(), o, settings, append(clientOptions(), rec.options()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	for probes.Load() < 20 {
		if _, err := countAccounts(ctx, client); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the frontend saw %d probes within 30s; want 20", probes.Load())
		case <-time.After(20 * time.Millisecond):
		}
	}
	seen := rec.seen()
	for _, c := range seen {
		if strings.HasSuffix(c, " none") {
			t.Errorf("the caller's interceptor saw %q, a call without a request ID (a probe)", c)
		}
	}
	if got, want := int64(len(seen)), appCalls.Load(); got != want {
		t.Errorf("the caller's interceptors saw %d calls, the frontend received %d of the application's", got, want)
	}
	t.Logf("frontend: %d probes, %d application calls; the caller's interceptors: %d calls", probes.Load(), appCalls.Load(), len(seen))
}
