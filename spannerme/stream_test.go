package spannerme

import (
	"context"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/observe"
)

// How a stream's end reaches the pool's in-flight count and the calls metric, on each path:
// gRPC reports it (grpc.OnFinish) when the caller cancels and walks away; this package watches
// the context where grpcgcp's interceptor would never create the gRPC stream, and where gRPC
// ended the stream without the caller seeing it (in Header, on a timeout of its own); a
// stream an interceptor gives up does not end the call; and a caller's interceptor that
// fails before gRPC runs ends it through NewStream's error. Each stream is counted once, with
// its code.
func TestStreamEndReported(t *testing.T) {
	// retrying opens a stream, gives it up (as a retry policy would after an error), and
	// returns a second one, both with the call's options.
	retrying := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		first, cancel := context.WithCancel(ctx)
		ended := make(chan struct{}) // gRPC has reported the first stream's end to every OnFinish
		firstOpts := append(opts[:len(opts):len(opts)], grpc.OnFinish(func(error) { close(ended) }))
		if _, err := streamer(first, desc, cc, method, firstOpts...); err != nil {
			cancel()
			return nil, err
		}
		cancel()
		select {
		case <-ended:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
	// methodTimeout gives the test service's calls a timeout of gRPC's own (a service config).
	methodTimeout := grpc.WithDefaultServiceConfig(`{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],"timeout":"0.05s"}]}`)
	failing := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, status.Error(codes.PermissionDenied, "refused by the caller's interceptor")
	})
	tests := []struct {
		name     string
		affinity bool
		dial     []grpc.DialOption
		// use starts a stream of gme with ctx and cancels it or lets it fail, as a caller
		// would; it returns the code the stream is counted with.
		use func(t *testing.T, gme *GCPMultiEndpoint, ctx context.Context, cancel context.CancelFunc) codes.Code
	}{
		{"cancelled after the first message, never read again", false, nil,
			func(t *testing.T, gme *GCPMultiEndpoint, ctx context.Context, cancel context.CancelFunc) codes.Code {
				s, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
					ResponseParameters: []*testpb.ResponseParameters{{}, {IntervalUs: 1_000_000}}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Recv(); err != nil {
					t.Fatal(err)
				}
				cancel()
				return codes.Canceled
			}},
		{"affinity: cancelled before the first SendMsg", true, nil,
			func(t *testing.T, gme *GCPMultiEndpoint, ctx context.Context, cancel context.CancelFunc) codes.Code {
				if _, err := gme.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/grpc.testing.TestService/StreamingOutputCall"); err != nil {
					t.Fatal(err)
				}
				cancel()
				return codes.Canceled
			}},
		{"a caller's interceptor gives up one stream and returns another", false, []grpc.DialOption{retrying},
			func(t *testing.T, gme *GCPMultiEndpoint, ctx context.Context, cancel context.CancelFunc) codes.Code {
				defer cancel()
				s, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
					ResponseParameters: []*testpb.ResponseParameters{{}, {IntervalUs: 20_000}}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Recv(); err != nil {
					t.Fatal(err)
				}
				if p, _ := poolOf(gme, gme.snap.Load().Default.ME.Current()); p.InFlight != 1 {
					t.Fatalf("in flight while the stream is read: %d, want 1", p.InFlight)
				}
				for err == nil {
					_, err = s.Recv()
				}
				if err != io.EOF {
					t.Fatal(err)
				}
				return codes.OK
			}},
		{"gRPC ends the stream in Header (trailers only), then the caller cancels", false, nil,
			func(t *testing.T, gme *GCPMultiEndpoint, ctx context.Context, cancel context.CancelFunc) codes.Code {
				s, err := gme.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/grpc.testing.TestService/NoSuchMethod")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Header(); err != nil {
					t.Fatal(err)
				}
				cancel()
				return codes.Unimplemented
			}},
		{"gRPC's own method timeout ends the stream, then the caller cancels", false, []grpc.DialOption{methodTimeout},
			func(t *testing.T, gme *GCPMultiEndpoint, ctx context.Context, cancel context.CancelFunc) codes.Code {
				s, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
					ResponseParameters: []*testpb.ResponseParameters{{IntervalUs: 2_000_000}}})
				if err != nil {
					t.Fatal(err)
				}
				_, _ = s.Header() // returns when the timeout ends the stream
				cancel()
				return codes.DeadlineExceeded
			}},
		{"a caller's interceptor fails before gRPC runs", false, []grpc.DialOption{failing},
			func(t *testing.T, gme *GCPMultiEndpoint, ctx context.Context, cancel context.CancelFunc) codes.Code {
				defer cancel()
				_, err := gme.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/grpc.testing.TestService/StreamingOutputCall")
				if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("NewStream: %v, want the interceptor's PERMISSION_DENIED", err)
				}
				return codes.PermissionDenied
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e1 := startEndpoint(t, "E1")
			o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())})
			if tc.affinity {
				o.GRPCgcpConfig = SessionAffinityConfig(1)
			}
			reader, mp := newMetricReader()
			s := fastSettings(nil)
			s.MeterProvider = mp
			gme := newGME(t, o, s, tc.dial...)
			waitConnected(t, gme, e1.Addr())
			const n = 20
			var want codes.Code
			for range n {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				want = tc.use(t, gme, ctx, cancel)
			}
			eventually(t, 5*time.Second, "no stream in flight", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.InFlight == 0 })
			got := sumBy(collect(t, reader), observe.MetricCalls, AttrGRPCStatusCode)
			if got[codeAttr(want)] != n || len(got) != 1 {
				t.Fatalf("calls counted by code: %v, want %d with code %d only", got, n, want)
			}
		})
	}
}

// codeAttr is a gRPC code as the calls metric's AttrGRPCStatusCode writes it.
func codeAttr(c codes.Code) string { return strconv.Itoa(int(c)) }

// A stream started with a context that is already done: with grpcgcp's stream interceptor
// (an affinity configuration) gRPC's stream is created only at the first SendMsg, so
// NewStream succeeds and the context's callback runs at once, on another goroutine. The
// stream's tracking must be complete before that callback can run (run with -race: the callback
// must not read fields still being written), the call ends once (in flight back to 0, counted once as
// CANCELED).
func TestStreamWithContextAlreadyDone(t *testing.T) {
	e1 := startEndpoint(t, "E1")
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())})
	o.GRPCgcpConfig = SessionAffinityConfig(1)
	reader, mp := newMetricReader()
	s := fastSettings(nil)
	s.MeterProvider = mp
	gme := newGME(t, o, s)
	waitServedBy(t, context.Background(), gme, "E1", 10*time.Second)
	before := sumBy(collect(t, reader), observe.MetricCalls, AttrGRPCStatusCode)["1"]
	const n = 50
	desc := &grpc.StreamDesc{ServerStreams: true}
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		cs, err := gme.NewStream(ctx, desc, "/grpc.testing.TestService/StreamingOutputCall")
		if err != nil {
			t.Fatalf("NewStream with grpcgcp's interceptor: %v, want a stream (created at SendMsg)", err)
		}
		if err := cs.SendMsg(&testpb.StreamingOutputCallRequest{}); err == nil {
			_ = cs.RecvMsg(new(testpb.StreamingOutputCallResponse))
		}
	}
	eventually(t, 10*time.Second, "no call in flight", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.InFlight == 0 })
	if got := sumBy(collect(t, reader), observe.MetricCalls, AttrGRPCStatusCode)["1"] - before; got != n {
		t.Fatalf("CANCELED calls counted: %d, want %d (each stream once)", got, n)
	}
}

// gRPC lets a caller stop after a non-io.EOF error from SendMsg (generated code returns
// nil, err, so nobody can call RecvMsg). The stream is over; the in-flight count must drop,
// and a removed endpoint's pool must close without waiting for DrainTimeout.
func TestStream_ReleasedAfterSendMsgError(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())}), fastSettings(nil))
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	_, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(context.Background(),
		&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{}}},
		grpc.MaxCallSendMsgSize(1)) // the request is too large: SendMsg fails
	if err == nil || err == io.EOF {
		t.Fatalf("StreamingOutputCall = %v, want a non-EOF error", err)
	}
	if p, _ := poolOf(gme, e1.Addr()); p.InFlight != 0 {
		t.Errorf("after a failed SendMsg the pool counts %d call(s) in flight", p.InFlight)
	}
	if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e2.Addr())})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "retired pool closed", func() bool { _, ok := poolOf(gme, e1.Addr()); return !ok })
}

// grpcgcp's stream interceptor creates the real stream in the first SendMsg, so streams on a
// failing endpoint fail there; none may stay counted in flight.
func TestStream_FailingEndpointLeavesNothingInFlight(t *testing.T) {
	e1 := startEndpoint(t, "E1")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(time.Minute, 0, e1.Addr())}), fastSettings(nil))
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	e1.Down()
	eventually(t, 5*time.Second, "pool TRANSIENT_FAILURE", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.Connectivity == "TRANSIENT_FAILURE" })
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
		cancel()
		if err == nil {
			t.Fatal("stream on a down endpoint succeeded")
		}
	}
	if p, _ := poolOf(gme, e1.Addr()); p.InFlight != 0 {
		t.Errorf("10 failed stream attempts left InFlight = %d", p.InFlight)
	}
}

// F11: 10k streams, a third read to the end, a third abandoned after one message (the caller
// cancels, as the Spanner client's iterator Stop does), a third cancelled mid-stream; then the
// endpoint is removed. The in-flight count reaches zero and the pool closes promptly
// (goleak checks the goroutines at the end of the package).
func TestCase_F11_AbandonedStreams(t *testing.T) {
	const n, workers = 10_000, 32
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())}), fastSettings(nil))
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	params := []*testpb.ResponseParameters{{}, {}, {IntervalUs: 2000}, {}}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params})
				if err == nil {
					_, err = s.Recv()
				}
				switch i % 3 {
				case 0: // to the end
					for err == nil {
						_, err = s.Recv()
					}
					if err == io.EOF {
						err = nil
					}
				case 1: // abandoned after one message
				case 2: // cancelled while the server waits
					go cancel()
					for err == nil {
						_, err = s.Recv()
					}
					err = nil
				}
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "nothing in flight", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.InFlight == 0 })
	start := time.Now()
	if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e2.Addr())})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "removed pool closed", func() bool { _, ok := poolOf(gme, e1.Addr()); return !ok })
	t.Logf("%d streams; removed pool closed %v after the update", n, time.Since(start).Round(time.Millisecond))
}
