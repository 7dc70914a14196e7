package spannerme

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// The default call options are read from the dial options without a connection and without
// any interceptor of the caller seeing a call; a call's own option overrides the default, as
// in gRPC.
func TestWaitForReadyDefaultFromDialOptions(t *testing.T) {
	var seen atomic.Int64
	for _, tc := range []struct {
		name     string
		dial     []grpc.DialOption
		call     []grpc.CallOption
		wantWait bool
	}{
		{"none", []grpc.DialOption{insecureDial}, nil, false},
		{"per call", []grpc.DialOption{insecureDial}, []grpc.CallOption{grpc.WaitForReady(true)}, true},
		{"default", []grpc.DialOption{insecureDial, grpc.WithDefaultCallOptions(grpc.WaitForReady(true))}, nil, true},
		{"default, call overrides", []grpc.DialOption{insecureDial, grpc.WithDefaultCallOptions(grpc.WaitForReady(true))},
			[]grpc.CallOption{grpc.WaitForReady(false)}, false},
		{"default false, call true", []grpc.DialOption{insecureDial, grpc.WithDefaultCallOptions(grpc.WaitForReady(false))},
			[]grpc.CallOption{grpc.WaitForReady(true)}, true},
		{"last default wins", []grpc.DialOption{insecureDial, grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
			grpc.WithDefaultCallOptions(grpc.WaitForReady(false))}, nil, false},
		{"no transport credentials (a DialFunc adds them)", []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.WaitForReady(true))}, nil, true},
		{"with the caller's interceptors", []grpc.DialOption{insecureDial, grpc.WithUnaryInterceptor(counting(&seen)),
			grpc.WithChainUnaryInterceptor(counting(&seen)), grpc.WithDefaultCallOptions(grpc.WaitForReady(true))}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := pool.WaitForReady(false, pool.DefaultCallOptions(tc.dial))
			if got := pool.WaitForReady(def, tc.call); got != tc.wantWait {
				t.Errorf("waitForReady = %v, want %v", got, tc.wantWait)
			}
		})
	}
	if n := seen.Load(); n != 0 {
		t.Errorf("the caller's interceptors saw %d calls while the default call options were read, want 0", n)
	}
}

// counting is a unary interceptor that counts the calls that reach it.
func counting(n *atomic.Int64) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// The default call options are read from client options without a connection: a caller's
// dialer is not called, a caller's grpc.WithBlock is not waited for, and no interceptor of
// the caller sees a call.
func TestWaitForReadyDefaultFromClientOptions(t *testing.T) {
	var dialed, seen atomic.Int64
	dialer := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		dialed.Add(1)
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	})
	wfr := option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	for _, tc := range []struct {
		name string
		opts []option.ClientOption
		want bool
	}{
		{"none", clientOptions(), false},
		{"default", append(clientOptions(), wfr), true},
		// TLS and credentials, as in production (an API key: no look-up of its own).
		{"with TLS and credentials", []option.ClientOption{option.WithAPIKey("key"), wfr}, true},
		{"last default wins", append(clientOptions(), wfr, option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.WaitForReady(false)))), false},
		{"with the caller's dialer and interceptors", append(clientOptions(), wfr, option.WithGRPCDialOption(dialer),
			option.WithGRPCDialOption(grpc.WithUnaryInterceptor(counting(&seen))),
			option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(counting(&seen)))), true},
		// A blocking dial needs a connection: the default is not seen (documented), at once.
		{"with a blocking dial", append(clientOptions(), wfr, option.WithGRPCDialOption(dialer),
			option.WithGRPCDialOption(grpc.WithBlock())), false}, //lint:ignore SA1019 a caller may give it
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			if got := pool.WaitForReady(false, clientDefaultCallOptions(tc.opts)); got != tc.want {
				t.Errorf("WaitForReady default = %v, want %v", got, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("reading the default call options took %v", d)
			}
		})
	}
	if dialed.Load() != 0 || seen.Load() != 0 {
		t.Errorf("the caller's dialer was called %d times and interceptors saw %d calls, want 0", dialed.Load(), seen.Load())
	}
}

// A call with grpc.WaitForReady(true) is not left in a failed pool's queue: it waits in
// spannerme and goes to the fallback once the group fails over.
func TestWaitForReadyCallFollowsFailover(t *testing.T) {
	const rt = 500 * time.Millisecond
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(rt, 0, e1.Addr(), e2.Addr())}), fastSettings(nil))
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	e1.Down()
	eventually(t, 5*time.Second, "E1's pool failing", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.Connectivity == "TRANSIENT_FAILURE" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil || resp.Username != "E2" {
		t.Fatalf("WaitForReady call: %v, %v; want served by E2", resp, err)
	}
	t.Logf("WaitForReady call served by E2 %v after it started", time.Since(start))
}

// grpc.WithDefaultCallOptions(grpc.WaitForReady(true)) in the dial options behaves as a
// per-call WaitForReady: the call waits in spannerme and follows the failover, instead of
// being held in the failed pool until its deadline. Group (RecoveryTimeout 500ms) [E1, E2],
// E1 down, one call with a 5s deadline.
func TestWaitForReadyAsDefaultCallOptionFollowsFailover(t *testing.T) {
	const rt = 500 * time.Millisecond
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(rt, 0, e1.Addr(), e2.Addr())}),
		fastSettings(nil), grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	e1.Down()
	eventually(t, 5*time.Second, "E1's pool failing", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.Connectivity == "TRANSIENT_FAILURE" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{}) // no per-call option
	if err != nil || resp.Username != "E2" {
		t.Fatalf("call with WaitForReady as a default call option: %v, %v; want served by E2\n%s", resp, err, statusString(gme))
	}
	t.Logf("served by E2 %v after it started", time.Since(start))
}

// Through the Spanner client: WaitForReady as a default call option given
// in the client options (option.WithGRPCDialOption, the only way to give dial options to
// NewMultiEndpointClient*) behaves as a per-call WaitForReady. Group (RecoveryTimeout 2s)
// [E1, E2], E1 down; a query made while E1 is still current (Recovering) waits in spannerme
// and is served by E2 once the group fails over, instead of being held in E1's failed pool
// until its deadline.
func TestWaitForReadyDefaultInClientOptionsFollowsFailover(t *testing.T) {
	const rt = 2 * time.Second
	b := startSpannerBackend(t, 2)
	e1, e2 := b.eps[0], b.eps[1]
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(rt, 0, e1.Addr(), e2.Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, fastSettings(nil),
		append(clientOptions(), option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.WaitForReady(true))))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	if _, err := countAccounts(ctx, client); err != nil { // the session exists
		t.Fatal(err)
	}
	e1.Down()
	eventually(t, 10*time.Second, "E1's pool failing", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.Connectivity == "TRANSIENT_FAILURE" })
	if g := groupOf(gme, "default"); g.Current != e1.Addr() {
		t.Fatalf("the group failed over before the query; the test needs a longer RecoveryTimeout\n%s", statusString(gme))
	}
	qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
	defer qcancel()
	start := time.Now()
	var n int64
	on := served([]*spannermetest.Endpoint{e2}, func() { n, err = countAccounts(qctx, client) })
	if err != nil || !on[0] {
		t.Fatalf("query with WaitForReady as a default call option: %d, %v, served by E2: %v; want served by E2 after the failover\n%s",
			n, err, on[0], statusString(gme))
	}
	t.Logf("served by E2 %v after the query started", time.Since(start))
}
