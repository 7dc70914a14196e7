package pool

import (
	"context"
	"net"
	"sync"
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

// latencyObserver counts the pool's latency reports.
type latencyObserver struct {
	recordingObserver
	mu      sync.Mutex
	reports int
}

func (o *latencyObserver) Latency(*Pool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reports++
}

func (o *latencyObserver) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reports
}

// scriptedProbe is a latency probe on a fake clock: each call takes the next scripted
// latency (it advances the clock by it) and returns the next scripted error.
type scriptedProbe struct {
	clk   *clock.Fake
	mu    sync.Mutex // guards the fields below
	steps []probeStep
	calls int
}

type probeStep struct {
	took time.Duration
	err  error
}

func (s *scriptedProbe) probe(ctx context.Context, _ grpc.ClientConnInterface) error {
	s.mu.Lock()
	s.calls++
	var st probeStep
	if len(s.steps) > 0 {
		st, s.steps = s.steps[0], s.steps[1:]
	}
	s.mu.Unlock()
	s.clk.Advance(st.took)
	if st.err == context.DeadlineExceeded {
		// The real probe would have run into ctx's deadline; on the fake clock the deadline
		// is real time, so the probe reports it as an RPC would.
		return status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	}
	return st.err
}

func (s *scriptedProbe) script(steps ...probeStep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, steps...)
}

func (s *scriptedProbe) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// readyPool returns a pool over a loopback gRPC server, with latency probes on clk, once its
// connection is READY, and a function that stops the server.
func readyPool(t *testing.T, clk *clock.Fake, obs Observer, lo LatencyOptions, sopts ...grpc.ServerOption) (*Pool, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Every method hangs until its caller gives up: a probe that was sent and got no answer.
	hang := func(_ any, ss grpc.ServerStream) error {
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.UnknownServiceHandler(hang)}, sopts...)...)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := New(ln.Addr().String(), conn, Options{Observer: obs, Clock: clk,
		Health: &HealthOptions{ProbeTimeout: time.Second, Latency: &lo}})
	t.Cleanup(func() { p.Close() })
	p.StartMonitor()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p.State() != connectivity.Ready {
		if ctx.Err() != nil {
			t.Fatalf("pool not READY: %v", p.State())
		}
		time.Sleep(5 * time.Millisecond) // polling a real connection's state, bounded by ctx
	}
	return p, srv.Stop
}

// A pool's latency probes run every Interval on its clock, one at a time; its latency is the
// median of the last three successful ones (the mean of two, the one); a failed probe
// changes nothing and is not reported; a probe that reaches its timeout counts as Timeout;
// after Close no probe is sent and no timer is left.
func TestLatencyProbesMedianOfTheLastThree(t *testing.T) {
	const interval = 2 * time.Second
	clk := clock.NewFake(time.Time{})
	start := clk.Now()
	sp := &scriptedProbe{clk: clk}
	obs := &latencyObserver{}
	p, _ := readyPool(t, clk, obs, LatencyOptions{Interval: interval, Timeout: time.Second, Probe: sp.probe})

	if _, known := p.Latency(); known {
		t.Fatal("latency known before any probe")
	}
	clk.Advance(interval - time.Millisecond)
	if n := sp.count(); n != 0 {
		t.Fatalf("%d probes before the first Interval, want 0", n)
	}
	steps := []struct {
		step    probeStep
		want    time.Duration
		reports int
	}{
		{probeStep{took: 100 * time.Millisecond}, 100 * time.Millisecond, 1},
		{probeStep{took: 300 * time.Millisecond}, 200 * time.Millisecond, 2}, // mean of two
		{probeStep{took: 200 * time.Millisecond}, 200 * time.Millisecond, 3}, // median of 100, 300, 200
		{probeStep{took: 50 * time.Millisecond, err: status.Error(codes.Unavailable, "down")}, 200 * time.Millisecond, 3},
		{probeStep{took: 10 * time.Millisecond}, 200 * time.Millisecond, 4},                                 // 300, 200, 10
		{probeStep{took: 20 * time.Millisecond}, 20 * time.Millisecond, 5},                                  // 200, 10, 20
		{probeStep{took: 1500 * time.Millisecond, err: context.DeadlineExceeded}, 20 * time.Millisecond, 5}, // a failure, not a timeout of ours
	}
	for i, st := range steps {
		sp.script(st.step)
		before := sp.count()
		// The next probe starts Interval after the previous one started (it took less).
		clk.Set(start.Add(time.Duration(i+1) * interval))
		if n := sp.count(); n != before+1 {
			t.Fatalf("step %d: %d probes at the tick, want 1", i, n-before)
		}
		want := st.want
		if got, known := p.Latency(); !known || got != want {
			t.Errorf("step %d (%+v): latency %v (known %v), want %v", i, st.step, got, known, want)
		}
		if got := obs.count(); got != st.reports {
			t.Errorf("step %d: %d latency reports, want %d", i, got, st.reports)
		}
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	before := sp.count()
	clk.Advance(10 * interval)
	if n := sp.count(); n != before {
		t.Fatalf("%d latency probes after Close", n-before)
	}
}

// The latency probe's own deadline counts as a sample of Timeout (the endpoint is at least
// that slow), and a pool without latency options reports no latency.
func TestLatencyProbeTimeoutIsASample(t *testing.T) {
	const interval, timeout = time.Second, 50 * time.Millisecond
	clk := clock.NewFake(time.Time{})
	obs := &latencyObserver{}
	p, _ := readyPool(t, clk, obs, LatencyOptions{Interval: interval, Timeout: timeout, Probe: hangingProbe})
	clk.Advance(interval)
	if got, known := p.Latency(); !known || got != timeout {
		t.Fatalf("latency after a probe that timed out: %v (known %v), want %v", got, known, timeout)
	}
	var none Pool
	if _, known := none.Latency(); known {
		t.Fatal("a pool without latency probes reports a latency")
	}
}

// A pool that lost its ready connection sends no latency probe and forgets its latency (the
// next path may differ), and says so once.
func TestLatencyForgottenWithoutAReadyConnection(t *testing.T) {
	const interval = time.Second
	clk := clock.NewFake(time.Time{})
	sp := &scriptedProbe{clk: clk}
	obs := &latencyObserver{}
	p, stop := readyPool(t, clk, obs, LatencyOptions{Interval: interval, Timeout: time.Second, Probe: sp.probe})
	sp.script(probeStep{took: 30 * time.Millisecond})
	clk.Advance(interval)
	if d, known := p.Latency(); !known || d != 30*time.Millisecond {
		t.Fatalf("latency %v (known %v), want 30ms", d, known)
	}
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p.State() == connectivity.Ready {
		if ctx.Err() != nil {
			t.Fatal("pool still READY 10s after its server stopped")
		}
		time.Sleep(5 * time.Millisecond) // polling a real connection's state, bounded by ctx
	}
	probes, reports := sp.count(), obs.count()
	clk.Advance(interval)
	clk.Advance(interval)
	if _, known := p.Latency(); known {
		t.Fatal("latency still known without a ready connection")
	}
	if n := sp.count() - probes; n != 0 {
		t.Fatalf("%d latency probes without a ready connection", n)
	}
	if n := obs.count() - reports; n != 1 {
		t.Fatalf("%d latency reports for the loss of the samples, want 1", n)
	}
}

// A sent probe that the server answers DEADLINE_EXCEEDED at the probe's deadline, an instant
// before the probe's own context ends (a server enforcing the grpc-timeout it was sent), is a
// sample of Timeout; one answered DEADLINE_EXCEEDED with most of its time left (a deadline of
// the server's own) is a failure, no sample.
func TestLatencyProbeAnsweredDeadlineExceeded(t *testing.T) {
	const interval, timeout = time.Second, 500 * time.Millisecond
	// answerAt sends the probe's request, then answers DEADLINE_EXCEEDED once at most left
	// of the probe's time remains, as the server would.
	answerAt := func(left time.Duration) func(context.Context, grpc.ClientConnInterface) error {
		return func(ctx context.Context, conn grpc.ClientConnInterface) error {
			cs, err := conn.NewStream(ctx, &grpc.StreamDesc{}, "/spannerme.test.Hang/Call")
			if err != nil {
				return err
			}
			if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
				return err
			}
			d, _ := ctx.Deadline()
			select {
			case <-time.After(time.Until(d) - left):
			case <-ctx.Done():
			}
			return status.Error(codes.DeadlineExceeded, "deadline exceeded (from the server)")
		}
	}
	for _, tc := range []struct {
		name  string
		left  time.Duration
		known bool
	}{
		{"at the probe's deadline", timeout / 50, true},
		{"with most of the time left", timeout * 9 / 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Time{})
			p, _ := readyPool(t, clk, &latencyObserver{}, LatencyOptions{Interval: interval, Timeout: timeout, Probe: answerAt(tc.left)})
			clk.Advance(interval)
			got, known := p.Latency()
			if known != tc.known || (known && got != timeout) {
				t.Fatalf("latency %v (known %v), want known %v (%v)", got, known, tc.known, timeout)
			}
		})
	}
}

// hangingProbe sends a call that the server of readyPool never answers, so it ends at the
// deadline of ctx.
func hangingProbe(ctx context.Context, conn grpc.ClientConnInterface) error {
	return conn.Invoke(ctx, "/spannerme.test.Hang/Call", &emptypb.Empty{}, &emptypb.Empty{})
}

// A latency probe that waited behind the calls in front of it for a free stream (the server
// allows one, and a call holds it) until its deadline was never sent: it is no sample, while
// one that was sent and got no answer is (TestLatencyProbeTimeoutIsASample).
func TestLatencyProbeWaitingForAStreamIsNoSample(t *testing.T) {
	const interval, timeout = time.Second, 50 * time.Millisecond
	clk := clock.NewFake(time.Time{})
	p, _ := readyPool(t, clk, &latencyObserver{}, LatencyOptions{Interval: interval, Timeout: timeout, Probe: hangingProbe},
		grpc.MaxConcurrentStreams(1))
	holdEveryStream(t, p)
	clk.Advance(interval)
	if got, known := p.Latency(); known {
		t.Fatalf("latency %v from a probe that never got a stream, want none", got)
	}
}
