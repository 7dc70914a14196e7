package spannerme

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"

	"github.com/spannerme/spanner-multiendpoint/internal/testutil"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// goleakOptions ignore the one goroutine that is not ours to stop: go.opencensus.io (a
// dependency of the Spanner client) starts its stats worker in an init function.
var goleakOptions = []goleak.Option{goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleakOptions...) }

// nameServer is a gRPC TestService that answers with its name, so a test knows which
// endpoint served a call.
type nameServer struct {
	testpb.UnimplementedTestServiceServer
	name string
}

func (s *nameServer) UnaryCall(_ context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Username: s.name}, nil
}

// StreamingOutputCall sends one response per ResponseParameters entry, each after its
// interval, carrying the server's name.
func (s *nameServer) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	for _, p := range req.ResponseParameters {
		select {
		case <-time.After(time.Duration(p.IntervalUs) * time.Microsecond):
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(s.name)}}); err != nil {
			return err
		}
	}
	return nil
}

// startServer starts a named TestService on 127.0.0.1:0 and returns its address.
func startServer(tb testing.TB, name string) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	// Tests may ping often (KeepaliveTime in milliseconds): the server allows it.
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Millisecond, PermitWithoutStream: true}))
	testpb.RegisterTestServiceServer(srv, &nameServer{name: name})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	tb.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// endpoint is a named server behind its own fake PSC endpoint.
type endpoint struct {
	name string
	*spannermetest.Endpoint
}

func startEndpoint(tb testing.TB, name string) endpoint {
	tb.Helper()
	return endpoint{name: name, Endpoint: spannermetest.NewEndpointTB(tb, startServer(tb, name))}
}

// fastSettings reconnect quickly and log into buf.
func fastSettings(buf *syncBuffer) Settings {
	s := Settings{ReconnectMaxDelay: 100 * time.Millisecond, MinConnectTimeout: time.Second}
	if buf != nil {
		s.Logger = slog.New(slog.NewTextHandler(buf, nil))
	} else {
		s.Logger = slog.New(slog.NewTextHandler(&syncBuffer{}, nil))
	}
	return s
}

// syncBuffer collects a logger's output for a test.
type syncBuffer = testutil.SyncBuffer

func group(rt, sd time.Duration, endpoints ...string) *multiendpoint.MultiEndpointOptions {
	return &multiendpoint.MultiEndpointOptions{Endpoints: endpoints, RecoveryTimeout: rt, SwitchingDelay: sd}
}

func options(def string, groups map[string]*multiendpoint.MultiEndpointOptions) *grpcgcp.GCPMultiEndpointOptions {
	return &grpcgcp.GCPMultiEndpointOptions{MultiEndpoints: groups, Default: def}
}

var insecureDial = grpc.WithTransportCredentials(insecure.NewCredentials())

// latencyConns is the number of connections to its endpoint that a pool keeps besides its
// channels while brownout detection is on (the default): its latency connection
// (docs/channels.md).
const latencyConns = 1

func newGME(tb testing.TB, o *grpcgcp.GCPMultiEndpointOptions, s Settings, opts ...grpc.DialOption) *GCPMultiEndpoint {
	tb.Helper()
	return newGMEWith(tb, o, s, plumbing{}, opts...)
}

// newGMEWith is newGME with plumbing (a fake clock, a resolver for the "dns" scheme).
func newGMEWith(tb testing.TB, o *grpcgcp.GCPMultiEndpointOptions, s Settings, pl plumbing, opts ...grpc.DialOption) *GCPMultiEndpoint {
	tb.Helper()
	gme, err := newGCPMultiEndpointChecked(o, s, pl, append([]grpc.DialOption{insecureDial}, opts...))
	if err != nil {
		tb.Fatalf("NewGCPMultiEndpoint: %v", err)
	}
	tb.Cleanup(func() { gme.Close() })
	return gme
}

// call makes one fail-fast unary call and returns the name of the server that answered.
func call(ctx context.Context, gme *GCPMultiEndpoint) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{})
	if err != nil {
		return "", err
	}
	return resp.Username, nil
}

// waitServedBy calls until a call is answered by want, within the deadline, and returns how
// long it took and how many calls failed on the way.
func waitServedBy(t *testing.T, ctx context.Context, gme *GCPMultiEndpoint, want string, within time.Duration) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	deadline, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	failed := 0
	for {
		got, err := call(ctx, gme)
		if err == nil && got == want {
			return time.Since(start), failed
		}
		if err != nil {
			failed++
		}
		select {
		case <-deadline.Done():
			t.Fatalf("not served by %s within %v (last: %q, %v)\n%s", want, within, got, err, statusString(gme))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// eventually polls cond every 10ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", within, what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func statusString(gme *GCPMultiEndpoint) string {
	var b strings.Builder
	s := gme.Status()
	for _, g := range s.Groups {
		fmt.Fprintf(&b, "group %s current=%s pending=%q:", g.Name, g.Current, g.PendingSwitch)
		for _, e := range g.Endpoints {
			fmt.Fprintf(&b, " %s=%v", e.Endpoint, e.State)
		}
		b.WriteString("\n")
	}
	for _, p := range s.Pools {
		fmt.Fprintf(&b, "pool %s %s in-flight=%d retired=%v\n", p.Endpoint, p.Connectivity, p.InFlight, p.Retired)
	}
	return b.String()
}

func poolOf(gme *GCPMultiEndpoint, endpoint string) (PoolStatus, bool) {
	for _, p := range gme.Status().Pools {
		if p.Endpoint == endpoint {
			return p, true
		}
	}
	return PoolStatus{}, false
}

func groupOf(gme *GCPMultiEndpoint, name string) GroupStatus {
	for _, g := range gme.Status().Groups {
		if g.Name == name {
			return g
		}
	}
	return GroupStatus{}
}

// waitConnected waits until the pool of endpoint is READY.
func waitConnected(t *testing.T, gme *GCPMultiEndpoint, endpoint string) {
	t.Helper()
	eventually(t, 10*time.Second, endpoint+" READY", func() bool { p, _ := poolOf(gme, endpoint); return p.Connectivity == "READY" })
}
