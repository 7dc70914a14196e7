package pool

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// latencyConnPool returns a pool of one channel, dialed with the pool's own policy (with a
// latency connection when latencyConn is set), over a loopback server that allows one
// stream per connection, answers "/spannerme.test.Fast/Call" at once and holds every other
// call until its caller gives up; it returns once the pool is READY.
func latencyConnPool(t *testing.T, clk *clock.Fake, latencyConn bool, lo LatencyOptions) *Pool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	handler := func(_ any, ss grpc.ServerStream) error {
		if m, _ := grpc.MethodFromServerStream(ss); m == "/spannerme.test.Fast/Call" {
			if err := ss.RecvMsg(&emptypb.Empty{}); err != nil {
				return err
			}
			return ss.SendMsg(&emptypb.Empty{})
		}
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(handler), grpc.MaxConcurrentStreams(1))
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	w := NewWatch(ln.Addr().String(), clk, &recordingObserver{})
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		DialOptions(w, []byte(`{"channelPool":{"minSize":1,"maxSize":1}}`),
			[]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, false, nil, latencyConn)...)
	if err != nil {
		w.Release()
		t.Fatal(err)
	}
	p := New(ln.Addr().String(), conn, Options{Observer: &latencyObserver{}, Clock: clk, Watch: w,
		Health: &HealthOptions{ProbeTimeout: time.Second, Latency: &lo}})
	t.Cleanup(func() { p.Close() })
	p.StartMonitor()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p.State() != connectivity.Ready || (latencyConn && w.latencyConnOf() == nil) {
		if ctx.Err() != nil {
			t.Fatalf("pool not READY (%v), or its latency connection not READY", p.State())
		}
		time.Sleep(5 * time.Millisecond) // polling a real connection's state, bounded by ctx
	}
	return p
}

// fastProbe is a probe the server of latencyConnPool answers at once.
func fastProbe(ctx context.Context, conn grpc.ClientConnInterface) error {
	return conn.Invoke(ctx, "/spannerme.test.Fast/Call", &emptypb.Empty{}, &emptypb.Empty{})
}

// holdEveryStream opens a call on p that holds the one stream its channel's connection
// allows (the server's limit), until the test ends, and returns once that limit applies to
// the next stream: the server's SETTINGS reach the client after the connection is READY.
func holdEveryStream(t *testing.T, p *Pool) {
	t.Helper()
	hold, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	held, err := p.conn.NewStream(hold, &grpc.StreamDesc{ServerStreams: true}, "/spannerme.test.Hang/Hold")
	if err != nil {
		t.Fatal(err)
	}
	if err := held.SendMsg(&emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, c := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := p.conn.NewStream(ctx, &grpc.StreamDesc{}, "/spannerme.test.Hang/Other")
		c()
		if status.Code(err) == codes.DeadlineExceeded {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's one-stream limit never applied: %v", err)
		}
	}
}

// A latency probe takes no stream from the calls: while the calls hold every stream of every
// channel, it is sent on the pool's latency connection and measures the endpoint, and the
// calls' channels carry no probe (a call waiting for a stream would wait behind it for a
// whole latency of the endpoint).
func TestLatencyProbeTakesNoStreamFromTheCalls(t *testing.T) {
	const interval = time.Second
	clk := clock.NewFake(time.Time{})
	p := latencyConnPool(t, clk, true, LatencyOptions{Interval: interval, Timeout: 500 * time.Millisecond, Probe: fastProbe})
	holdEveryStream(t, p)
	clk.Advance(interval)
	if d, known := p.Latency(); !known || d >= 250*time.Millisecond {
		t.Fatalf("latency %v (known %v) while the calls hold every stream, want a sample of the endpoint", d, known)
	}
}

// Without a latency connection (a caller's dial option replaced the pool's policy, or it is
// still connecting), latency probes go on the calls' channels, as before.
func TestLatencyProbeOnTheChannelsWithoutALatencyConnection(t *testing.T) {
	const interval = time.Second
	clk := clock.NewFake(time.Time{})
	p := latencyConnPool(t, clk, false, LatencyOptions{Interval: interval, Timeout: 500 * time.Millisecond, Probe: fastProbe})
	clk.Advance(interval)
	if _, known := p.Latency(); !known {
		t.Fatal("no latency from a probe on the channels")
	}
	holdEveryStream(t, p)
	before, _ := p.Latency()
	clk.Advance(interval)
	clk.Advance(interval)
	if d, _ := p.Latency(); d != before {
		t.Fatalf("latency moved to %v from %v while its probes had no free stream on the channels", d, before)
	}
}
