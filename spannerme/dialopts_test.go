package spannerme

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// recordingServer is a TestService that answers UnaryCall with ResponseSize bytes and
// records the incoming metadata of every UnaryCall.
type recordingServer struct {
	testpb.UnimplementedTestServiceServer
	mu   sync.Mutex // guards seen
	seen []metadata.MD
}

func (s *recordingServer) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, md)
	s.mu.Unlock()
	return &testpb.SimpleResponse{Username: "recording", Payload: &testpb.Payload{Body: make([]byte, req.ResponseSize)}}, nil
}

func (s *recordingServer) last() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == 0 {
		return nil
	}
	return s.seen[len(s.seen)-1]
}

func startRecordingServer(tb testing.TB) (*recordingServer, string) {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	rs := &recordingServer{}
	srv := grpc.NewServer(grpc.MaxSendMsgSize(64 << 20))
	testpb.RegisterTestServiceServer(srv, rs)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	tb.Cleanup(func() { srv.Stop(); <-done })
	return rs, lis.Addr().String()
}

// dialPath builds a GCPMultiEndpoint with settings s over one endpoint with the caller's dial
// options, in one of the three ways a caller can give them.
type dialPath struct {
	name   string
	dialIn func(t *testing.T, s Settings, endpoint string, caller ...grpc.DialOption) *GCPMultiEndpoint
}

// dial is dialIn with fastSettings.
func (d dialPath) dial(t *testing.T, endpoint string, caller ...grpc.DialOption) *GCPMultiEndpoint {
	return d.dialIn(t, fastSettings(nil), endpoint, caller...)
}

var dialPaths = []dialPath{
	{"NewGCPMultiEndpoint", func(t *testing.T, s Settings, endpoint string, caller ...grpc.DialOption) *GCPMultiEndpoint {
		return newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, endpoint)}), s, caller...)
	}},
	{"client options", func(t *testing.T, s Settings, endpoint string, caller ...grpc.DialOption) *GCPMultiEndpoint {
		opts := clientOptions()
		for _, o := range caller {
			opts = append(opts, option.WithGRPCDialOption(o))
		}
		return newClientGMEWith(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, endpoint)}), s, opts...)
	}},
	{"client DialFunc", func(t *testing.T, s Settings, endpoint string, caller ...grpc.DialOption) *GCPMultiEndpoint {
		o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, endpoint)})
		o.DialFunc = func(_ context.Context, target string, dopts ...grpc.DialOption) (*grpc.ClientConn, error) {
			return grpc.NewClient(target, append(append(dopts, insecureDial), caller...)...)
		}
		return newClientGMEWith(t, o, s)
	}},
}

// newClientGMEWith returns the GCPMultiEndpoint of a Spanner client built by
// NewMultiEndpointClientWithSettings over o with settings s (the client is closed at the
// end of the test).
// The endpoints need not be Spanner: the GCPMultiEndpoint is used directly.
func newClientGMEWith(t *testing.T, o *grpcgcp.GCPMultiEndpointOptions, s Settings, opts ...option.ClientOption) *GCPMultiEndpoint {
	t.Helper()
	fixture.DisableGCEDetection()
	client, gme, err := NewMultiEndpointClientWithSettings(context.Background(), fixture.SpannertestDatabase, fixture.ClientConfig(), o, s, opts...)
	if err != nil {
		t.Fatalf("NewMultiEndpointClientWithSettings: %v", err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	return gme
}

// manualDNS is a resolver for the "dns" scheme that resolves every name to addr.
func manualDNS(addr string) resolver.Builder {
	r := manual.NewBuilderWithScheme("dns")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: addr}}})
	return r
}

// Each kind of caller dial option wins over this package's own and the Spanner client's
// defaults, given as NewGCPMultiEndpoint's dial options, as the client's
// option.WithGRPCDialOption, or by a DialFunc (which appends them to the options it is
// given).
func TestDialOptions_CallerWins(t *testing.T) {
	for _, path := range dialPaths {
		t.Run(path.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			call := func(gme *GCPMultiEndpoint, size int32) (*testpb.SimpleResponse, error) {
				return testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: size}, grpc.WaitForReady(true))
			}
			t.Run("resolver", func(t *testing.T) {
				// Ours wraps gRPC's DNS resolver; the caller's for the same scheme is used
				// instead (grpc/grpc-go#3320). No DNS query is made: the name does not exist.
				_, addr := startRecordingServer(t)
				gme := path.dial(t, "dns:///caller-resolved.invalid:443", grpc.WithResolvers(manualDNS(addr)))
				if resp, err := call(gme, 0); err != nil || resp.Username != "recording" {
					t.Fatalf("call = %v, %v; want served through the caller's resolver", resp, err)
				}
			})
			t.Run("max receive size", func(t *testing.T) {
				_, addr := startRecordingServer(t)
				gme := path.dial(t, addr, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1024)))
				if _, err := call(gme, 512); err != nil {
					t.Fatalf("small response: %v", err)
				}
				if _, err := call(gme, 4096); status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("4 KiB response with the caller's 1 KiB limit: %v, want ResourceExhausted", err)
				}
			})
			t.Run("interceptor", func(t *testing.T) {
				rs, addr := startRecordingServer(t)
				var seen atomic.Int64
				gme := path.dial(t, addr, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
					seen.Add(1)
					return invoker(metadata.AppendToOutgoingContext(ctx, "x-caller-interceptor", "yes"), method, req, reply, cc, opts...)
				}))
				if _, err := call(gme, 0); err != nil {
					t.Fatal(err)
				}
				if got := rs.last().Get("x-caller-interceptor"); seen.Load() == 0 || len(got) != 1 || got[0] != "yes" {
					t.Fatalf("interceptor ran %d times, server saw %v", seen.Load(), got)
				}
			})
			t.Run("authority", func(t *testing.T) {
				rs, addr := startRecordingServer(t)
				gme := path.dial(t, addr, grpc.WithAuthority("caller.example"))
				if _, err := call(gme, 0); err != nil {
					t.Fatal(err)
				}
				if got := rs.last().Get(":authority"); len(got) != 1 || got[0] != "caller.example" {
					t.Fatalf(":authority = %v, want caller.example", got)
				}
			})
		})
	}
}

// The Spanner client receives responses of any size (vkit.DefaultClientOptions sets the
// maximum receive size to MaxInt32); its pools do too, including pools dialed by a caller's
// DialFunc, which is given that option. NewGCPMultiEndpoint alone keeps gRPC's 4 MiB.
func TestDialOptions_SpannerMaxReceiveSize(t *testing.T) {
	const size = 5 << 20
	for _, path := range dialPaths {
		t.Run(path.name, func(t *testing.T) {
			_, addr := startRecordingServer(t)
			gme := path.dial(t, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: size}, grpc.WaitForReady(true))
			if path.name == "NewGCPMultiEndpoint" {
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("5 MiB response on a plain GCPMultiEndpoint: %v, want ResourceExhausted (gRPC's 4 MiB)", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("5 MiB response through a client constructor's pool: %v", err)
			}
		})
	}
}

// A caller's keepalive parameters win over this package's (KeepaliveTime 120s by default):
// with the caller's 10s (gRPC's minimum) and pings without calls, an idle pool's connections
// carry pings within about 10s. Health is off, so that no idle-endpoint probe (every
// ProbeInterval, 10s) puts bytes on the connections instead.
func TestDialOptions_CallerKeepaliveWins(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for gRPC's shortest keepalive interval, 10s")
	}
	caller := grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true})
	for _, path := range dialPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			e := startEndpoint(t, "E1")
			s := fastSettings(nil)
			s.Health.Disabled = true
			gme := path.dialIn(t, s, e.Addr(), caller)
			waitConnected(t, gme, e.Addr())
			// Let the connections settle (handshakes, settings acknowledgements), then count
			// what the idle connections send: only pings.
			var before int64
			settled := time.Now()
			eventually(t, 5*time.Second, "connections quiet", func() bool {
				if b := e.Stats().BytesToBackend; b != before {
					before, settled = b, time.Now()
				}
				return time.Since(settled) > 500*time.Millisecond
			})
			start := time.Now()
			eventually(t, 20*time.Second, "a keepalive ping", func() bool { return e.Stats().BytesToBackend > before })
			t.Logf("first bytes on the idle pool %v after it went quiet", time.Since(start).Round(100*time.Millisecond))
		})
	}
}
