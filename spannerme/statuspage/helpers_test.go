package statuspage

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// The tests here use spannerme's exported API only: a real GCPMultiEndpoint over fake PSC
// endpoints (spannermetest) where they follow a failover, a canned Status (cannedSource)
// where they only check what is rendered.

// go.opencensus.io (a dependency of the Spanner client, linked in through spannermetest)
// starts its stats worker in an init function; it is not ours to stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// cannedSource is a Source that always reports the same Status.
type cannedSource spannerme.Status

func (s cannedSource) Status() spannerme.Status { return spannerme.Status(s) }

// get fetches path from the handler with the given Accept header.
func get(t *testing.T, h http.Handler, method, path, accept string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// nameServer is a gRPC TestService that answers with its name, so a test knows which
// endpoint served a call.
type nameServer struct {
	testpb.UnimplementedTestServiceServer
	name string
}

func (s *nameServer) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Username: s.name}, nil
}

// endpoint is a named server behind its own fake PSC endpoint.
type endpoint struct {
	name string
	*spannermetest.Endpoint
}

// startEndpoint starts a named TestService on 127.0.0.1:0 behind a fake PSC endpoint.
func startEndpoint(tb testing.TB, name string) endpoint {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &nameServer{name: name})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	tb.Cleanup(func() { srv.Stop(); <-done })
	return endpoint{name: name, Endpoint: spannermetest.NewEndpointTB(tb, lis.Addr().String())}
}

// fastSettings reconnect quickly and log nowhere.
func fastSettings() spannerme.Settings {
	return spannerme.Settings{ReconnectMaxDelay: 100 * time.Millisecond, MinConnectTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func group(rt, sd time.Duration, endpoints ...string) *multiendpoint.MultiEndpointOptions {
	return &multiendpoint.MultiEndpointOptions{Endpoints: endpoints, RecoveryTimeout: rt, SwitchingDelay: sd}
}

func options(def string, groups map[string]*multiendpoint.MultiEndpointOptions) *grpcgcp.GCPMultiEndpointOptions {
	return &grpcgcp.GCPMultiEndpointOptions{MultiEndpoints: groups, Default: def}
}

// newGME makes a GCPMultiEndpoint dialing without TLS, closed when the test ends.
func newGME(tb testing.TB, o *grpcgcp.GCPMultiEndpointOptions, s spannerme.Settings) *spannerme.GCPMultiEndpoint {
	tb.Helper()
	gme, err := spannerme.NewGCPMultiEndpointWithSettings(o, s, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("NewGCPMultiEndpoint: %v", err)
	}
	tb.Cleanup(func() { gme.Close() })
	return gme
}

// waitServedBy makes fail-fast calls until one is answered by want, within the deadline.
func waitServedBy(t *testing.T, ctx context.Context, gme *spannerme.GCPMultiEndpoint, want string, within time.Duration) {
	t.Helper()
	deadline, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	client := testpb.NewTestServiceClient(gme)
	for {
		callCtx, cancelCall := context.WithTimeout(deadline, 2*time.Second)
		resp, err := client.UnaryCall(callCtx, &testpb.SimpleRequest{})
		cancelCall()
		if err == nil && resp.Username == want {
			return
		}
		select {
		case <-deadline.Done():
			st, _ := json.MarshalIndent(gme.Status(), "", "  ")
			t.Fatalf("not served by %s within %v (last: %v, %v)\n%s", want, within, resp.GetUsername(), err, st)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
