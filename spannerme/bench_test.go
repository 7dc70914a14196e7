package spannerme

// Benchmarks of the call path, side by side in one run: a plain grpc.ClientConn, upstream
// grpcgcp's GCPMultiEndpoint and this package's, all over loopback to in-process TestService
// servers with no proxy in the path, so that only the client side differs.
//
// B/op and allocs/op include the server's allocations (it runs in the same process); they
// are the same for every variant, so the differences between variants are the client's.
//
//	go test -run '^$' -bench 'Invoke|Pick|Stream' -benchmem -count 3 ./spannerme/
//	go test -run '^$' -bench Failover -benchtime=5x ./spannerme/

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// benchPoolSize is the channel pool of every endpoint, for upstream and for us alike.
const benchPoolSize = 4

// benchOptions is the configuration given to both GCPMultiEndpoints. Upstream needs
// GRPCgcpConfig non-nil (it marshals it into the service config); ours gets the same.
func benchOptions(def string, groups map[string]*multiendpoint.MultiEndpointOptions) *grpcgcp.GCPMultiEndpointOptions {
	o := options(def, groups)
	o.GRPCgcpConfig = &pb.ApiConfig{ChannelPool: &pb.ChannelPoolConfig{MaxSize: benchPoolSize, MinSize: benchPoolSize}}
	return o
}

// newUpstreamGME returns upstream's GCPMultiEndpoint over o, closed by tb.Cleanup.
func newUpstreamGME(tb testing.TB, o *grpcgcp.GCPMultiEndpointOptions) *grpcgcp.GCPMultiEndpoint {
	tb.Helper()
	gme, err := grpcgcp.NewGCPMultiEndpoint(o, insecureDial)
	if err != nil {
		tb.Fatalf("grpcgcp.NewGCPMultiEndpoint: %v", err)
	}
	tb.Cleanup(func() { _ = gme.Close() })
	return gme
}

// newPlainConn returns a plain grpc.ClientConn to addr, closed by tb.Cleanup.
func newPlainConn(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	cc, err := grpc.NewClient(addr, insecureDial)
	if err != nil {
		tb.Fatalf("grpc.NewClient: %v", err)
	}
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// benchTarget is one variant of the call path: a connection and the context its calls use,
// and the server that must answer them.
type benchTarget struct {
	name string
	cc   grpc.ClientConnInterface
	ctx  context.Context
	want string
}

// benchTargets starts the servers "primary" (the default group's endpoint) and "routed" (the
// endpoint of a second group, "routed") and returns the variants, each checked with one call
// that waits for the connection to be ready.
func benchTargets(b *testing.B) []benchTarget {
	b.Helper()
	primary, routed := startServer(b, "primary"), startServer(b, "routed")
	groups := func() map[string]*multiendpoint.MultiEndpointOptions {
		return map[string]*multiendpoint.MultiEndpointOptions{
			"default": group(0, 0, primary),
			"routed":  group(0, 0, routed),
		}
	}
	up := newUpstreamGME(b, benchOptions("default", groups()))
	ours := newGME(b, benchOptions("default", groups()), fastSettings(nil))
	// The same without health from call outcomes: the cost of outcome tracking, same run.
	offSettings := fastSettings(nil)
	offSettings.Health.Disabled = true
	healthOff := newGME(b, benchOptions("default", groups()), offSettings)
	// The same with a directed read policy on the other group: the call path of a group
	// without one must cost what it costs without any (the calls here are not Spanner reads,
	// so even the policy's own group sends them unchanged).
	policySettings := fastSettings(nil)
	policySettings.DirectedReads = map[string]*spannerpb.DirectedReadOptions{"routed": {Replicas: &spannerpb.DirectedReadOptions_IncludeReplicas_{
		IncludeReplicas: &spannerpb.DirectedReadOptions_IncludeReplicas{ReplicaSelections: []*spannerpb.DirectedReadOptions_ReplicaSelection{
			{Type: spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY}}}}}}
	policy := newGME(b, benchOptions("default", groups()), policySettings)
	bg := context.Background()
	toRouted := NewMEContext(bg, "routed")
	targets := []benchTarget{
		{"plain", newPlainConn(b, primary), bg, "primary"},
		{"upstream", up, bg, "primary"},
		{"upstream/routed", up, toRouted, "routed"},
		{"spannerme", ours, bg, "primary"},
		{"spannerme/routed", ours, toRouted, "routed"},
		{"spannerme/health-off", healthOff, bg, "primary"},
		{"spannerme/policy-elsewhere", policy, bg, "primary"},
	}
	for _, t := range targets {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		resp, err := testpb.NewTestServiceClient(t.cc).UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil || resp.Username != t.want {
			b.Fatalf("%s: warm-up call served by %q, %v; want %q", t.name, resp.GetUsername(), err, t.want)
		}
	}
	return targets
}

// BenchmarkInvoke measures a trivial unary call.
func BenchmarkInvoke(b *testing.B) {
	for _, t := range benchTargets(b) {
		b.Run(t.name, func(b *testing.B) {
			client := testpb.NewTestServiceClient(t.cc)
			req := &testpb.SimpleRequest{}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				for p.Next() {
					if _, err := client.UnaryCall(t.ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// benchStreamMessages is the number of responses of one streaming call.
const benchStreamMessages = 10

// BenchmarkStream measures a server-streaming call of benchStreamMessages responses, read
// to io.EOF.
func BenchmarkStream(b *testing.B) {
	req := &testpb.StreamingOutputCallRequest{}
	for range benchStreamMessages {
		req.ResponseParameters = append(req.ResponseParameters, &testpb.ResponseParameters{})
	}
	for _, t := range benchTargets(b) {
		b.Run(t.name, func(b *testing.B) {
			client := testpb.NewTestServiceClient(t.cc)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				for p.Next() {
					if err := streamTen(t.ctx, client, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func streamTen(ctx context.Context, client testpb.TestServiceClient, req *testpb.StreamingOutputCallRequest) error {
	stream, err := client.StreamingOutputCall(ctx, req)
	if err != nil {
		return err
	}
	n := 0
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n++
	}
	if n != len(req.ResponseParameters) {
		return fmt.Errorf("got %d responses, want %d", n, len(req.ResponseParameters))
	}
	return nil
}

// upstreamConnStub stands for upstream's unexported *monitoredConn, the value of its pools map.
type upstreamConnStub struct{ endpoint string }

// upstreamPickConn is upstream's GCPMultiEndpoint.pickConn (grpcgcp v1.6.0,
// gcp_multiendpoint.go) line for line, on maps built here: upstream exports no pick, and its
// maps are unexported. It uses upstream's own FromMEContext and multiendpoint.MultiEndpoint
// (whose Current takes a sync.RWMutex read lock), so it costs what upstream's routing costs.
// Upstream reads its maps without a lock (racing UpdateMultiEndpoints) and does not count
// calls in flight, so it has nothing to release.
func upstreamPickConn(ctx context.Context, defaultName string, mes map[string]multiendpoint.MultiEndpoint, pools map[string]*upstreamConnStub) *upstreamConnStub {
	name, ok := grpcgcp.FromMEContext(ctx)
	me, ook := mes[name]
	if !ok || !ook {
		me = mes[defaultName]
	}
	return pools[me.Current()]
}

// BenchmarkPick measures the routing pick alone: the group from the context, its current
// endpoint, that endpoint's pool (and, for us, counting the call in flight and releasing it).
// Ours must not allocate.
func BenchmarkPick(b *testing.B) {
	const primary, routed = "127.0.0.1:1001", "127.0.0.1:1002" // upstream's side dials nothing
	groups := map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, primary),
		"routed":  group(0, 0, routed),
	}
	bg := context.Background()
	toRouted := NewMEContext(bg, "routed")
	cases := []struct {
		name, group string
		ctx         context.Context
		want        string
	}{{"", "default", bg, primary}, {"/routed", "routed", toRouted, routed}}

	mes := make(map[string]multiendpoint.MultiEndpoint)
	pools := make(map[string]*upstreamConnStub)
	for name, g := range groups {
		me, err := multiendpoint.NewMultiEndpoint(g)
		if err != nil {
			b.Fatal(err)
		}
		mes[name] = me
		for _, e := range g.Endpoints {
			pools[e] = &upstreamConnStub{endpoint: e}
			me.SetEndpointAvailability(e, true)
		}
	}
	for _, c := range cases {
		b.Run("upstream"+c.name, func(b *testing.B) {
			if got := upstreamPickConn(c.ctx, "default", mes, pools); got == nil || got.endpoint != c.want {
				b.Fatalf("picked %v, want %s", got, c.want)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				for p.Next() {
					if upstreamPickConn(c.ctx, "default", mes, pools) == nil {
						b.Error("no conn")
						return
					}
				}
			})
		})
	}

	// Our pools are real (they connect to real servers) but the pick never touches them.
	gme := newGME(b, benchOptions("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, startServer(b, "primary")),
		"routed":  group(0, 0, startServer(b, "routed")),
	}), fastSettings(nil))
	for _, c := range cases {
		want := gme.snap.Load().Group(c.group).Current()
		b.Run("spannerme"+c.name, func(b *testing.B) {
			p, _, err := gme.pickConnected(c.ctx, health.Reads, spannerreq.MethodStreamingRead, nil)
			if err != nil || p.Endpoint() != want {
				b.Fatalf("picked %v, %v; want %s", p, err, want)
			}
			p.Release()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pp *testing.PB) {
				for pp.Next() {
					p, _, err := gme.pickConnected(c.ctx, health.Reads, spannerreq.MethodStreamingRead, nil)
					if err != nil {
						b.Error(err)
						return
					}
					p.Release()
				}
			})
		})
	}
}

// TestPickDoesNotAllocate guards the call path's promise: routing a call allocates nothing.
func TestPickDoesNotAllocate(t *testing.T) {
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, "127.0.0.1:1"),
		"routed":  group(0, 0, "127.0.0.1:2"),
	}), fastSettings(nil))
	bg := context.Background()
	for _, ctx := range []context.Context{bg, NewMEContext(bg, "routed"), NewMEContext(bg, "default")} {
		if n := testing.AllocsPerRun(1000, func() {
			p, _, err := gme.pickConnected(ctx, health.Reads, spannerreq.MethodStreamingRead, nil)
			if err != nil {
				t.Fatal(err)
			}
			p.Release()
		}); n != 0 {
			t.Errorf("pick allocates %v times per call, want 0", n)
		}
	}
}

// BenchmarkFailover measures, per iteration, the time from Down of the primary's fake
// endpoint to the first call served by the fallback, with RecoveryTimeout 0 and a warm
// standby (the fallback's pool is READY before the fault). Calls are fail-fast and made
// back to back. Run it with -benchtime=5x: each iteration builds fresh endpoints and a fresh
// GCPMultiEndpoint (not timed).
func BenchmarkFailover(b *testing.B) {
	type conn interface {
		grpc.ClientConnInterface
		Close() error
	}
	impls := []struct {
		name string
		dial func(b *testing.B, o *grpcgcp.GCPMultiEndpointOptions) conn
	}{
		{"upstream", func(b *testing.B, o *grpcgcp.GCPMultiEndpointOptions) conn {
			gme, err := grpcgcp.NewGCPMultiEndpoint(o, insecureDial)
			if err != nil {
				b.Fatal(err)
			}
			return gme
		}},
		{"spannerme", func(b *testing.B, o *grpcgcp.GCPMultiEndpointOptions) conn {
			gme, err := NewGCPMultiEndpointWithSettings(o, fastSettings(nil), insecureDial)
			if err != nil {
				b.Fatal(err)
			}
			return gme
		}},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			primarySrv, fallbackSrv := startServer(b, "primary"), startServer(b, "fallback")
			var total time.Duration
			failed := 0
			b.StopTimer()
			b.ResetTimer()
			for range b.N {
				d, f := failoverOnce(b, primarySrv, fallbackSrv, func(o *grpcgcp.GCPMultiEndpointOptions) conn { return impl.dial(b, o) })
				total += d
				failed += f
			}
			b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "failover-ms")
			b.ReportMetric(float64(failed)/float64(b.N), "failed-calls/op")
		})
	}
}

// failoverOnce runs one failover with the timer stopped except from Down to the first
// success on the fallback, and returns that time and the calls that failed meanwhile.
func failoverOnce[C interface {
	grpc.ClientConnInterface
	Close() error
}](b *testing.B, primarySrv, fallbackSrv string, dial func(*grpcgcp.GCPMultiEndpointOptions) C) (time.Duration, int) {
	b.Helper()
	primary, err := spannermetest.NewEndpoint(primarySrv)
	if err != nil {
		b.Fatal(err)
	}
	defer primary.Close()
	fallback, err := spannermetest.NewEndpoint(fallbackSrv)
	if err != nil {
		b.Fatal(err)
	}
	defer fallback.Close()
	cc := dial(benchOptions("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, primary.Addr(), fallback.Addr()),
		// Only to warm the standby the same way for both implementations.
		"standby": group(0, 0, fallback.Addr()),
	}))
	defer cc.Close()
	ctx := context.Background()
	// Whichever pool turns READY first is current for a moment, so the warm-up retries
	// until the default group is back on the primary.
	deadline := time.Now().Add(10 * time.Second)
	for _, w := range []struct {
		ctx  context.Context
		want string
	}{{NewMEContext(ctx, "standby"), "fallback"}, {ctx, "primary"}} {
		for {
			cctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
			resp, err := testpb.NewTestServiceClient(cc).UnaryCall(cctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true))
			cancel()
			if err == nil && resp.Username == w.want {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("warm-up: served by %q, %v; want %q", resp.GetUsername(), err, w.want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if gme, ok := any(cc).(*GCPMultiEndpoint); ok {
		// Ours tells: wait until the default group sees the standby Available.
		for !standbyAvailable(gme, fallback.Addr()) {
			if time.Now().After(deadline) {
				b.Fatalf("standby not Available:\n%s", statusString(gme))
			}
			time.Sleep(time.Millisecond)
		}
	} else {
		// Upstream does not tell; its monitor notifies right after the pool turns READY.
		time.Sleep(50 * time.Millisecond)
	}

	client := testpb.NewTestServiceClient(cc)
	failed := 0
	b.StartTimer()
	start := time.Now()
	primary.Down()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := client.UnaryCall(cctx, &testpb.SimpleRequest{})
		cancel()
		if err == nil && resp.Username == "fallback" {
			break
		}
		if err != nil {
			failed++
		}
		if time.Since(start) > 10*time.Second {
			b.StopTimer()
			b.Fatalf("no failover within 10s (last: %q, %v)", resp.GetUsername(), err)
		}
	}
	d := time.Since(start)
	b.StopTimer()
	return d, failed
}

func standbyAvailable(gme *GCPMultiEndpoint, endpoint string) bool {
	for _, e := range groupOf(gme, "default").Endpoints {
		if e.Endpoint == endpoint {
			return e.State == Available
		}
	}
	return false
}
