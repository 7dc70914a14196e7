package spannermetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	// The Spanner client (frontend tests, spanner.go) starts OpenCensus's worker once per
	// process; it never stops.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// waitTimeout bounds every wait for network state in these tests.
const waitTimeout = 5 * time.Second

// tcpServer is a loopback TCP backend for tests: it echoes what it reads,
// or, with sink, accepts connections and never reads them.
type tcpServer struct {
	ln       net.Listener
	sink     bool
	accepted atomic.Int64

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startEcho starts a TCP echo server on 127.0.0.1:0, closed at cleanup.
func startEcho(tb testing.TB) *tcpServer { return startTCPServer(tb, false) }

// startSink starts a TCP server that accepts and never reads.
func startSink(tb testing.TB) *tcpServer { return startTCPServer(tb, true) }

func startTCPServer(tb testing.TB, sink bool) *tcpServer {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &tcpServer{ln: ln, sink: sink, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go s.serve()
	tb.Cleanup(s.close)
	return s
}

func (s *tcpServer) addr() string { return s.ln.Addr().String() }

func (s *tcpServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		if s.sink {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_, _ = io.Copy(c, c)
			_ = c.Close()
		}()
	}
}

func (s *tcpServer) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// dial connects to addr and closes the connection at cleanup.
func dial(tb testing.TB, addr string) *net.TCPConn {
	tb.Helper()
	c, err := net.DialTimeout("tcp4", addr, waitTimeout)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes payload to c while reading its echo back, and fails tb
// unless the echo is identical and arrives within waitTimeout.
func roundTrip(tb testing.TB, c net.Conn, payload []byte) {
	tb.Helper()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		werr <- err
	}()
	got := make([]byte, len(payload))
	_, rerr := io.ReadFull(c, got)
	if err := <-werr; err != nil {
		tb.Fatalf("write: %v", err)
	}
	if rerr != nil {
		tb.Fatalf("read echo: %v", rerr)
	}
	if !bytes.Equal(got, payload) {
		tb.Fatal("echo differs from what was sent")
	}
}

// expectNoEcho writes to c and fails tb if anything comes back within wait.
func expectNoEcho(tb testing.TB, c net.Conn, wait time.Duration) {
	tb.Helper()
	if _, err := c.Write([]byte("ping")); err != nil {
		tb.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	n, err := c.Read(make([]byte, 16))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		tb.Fatalf("read = %d bytes, %v; want nothing until the deadline", n, err)
	}
}

// expectDropped fails tb unless c's peer closes or resets it within
// waitTimeout.
func expectDropped(tb testing.TB, c net.Conn) {
	tb.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	for {
		_, err := c.Read(make([]byte, 1024))
		if err == nil {
			continue // bytes that were already in flight
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			tb.Fatal("connection still open; want it dropped")
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			tb.Fatalf("read error %v; want EOF or connection reset", err)
		}
		return
	}
}

// waitFor polls cond until it holds, failing tb after waitTimeout.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return b
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{
		Pass: "pass", Down: "down", Blackhole: "blackhole", Slow: "slow", Closed: "closed", DieYoung: "die-young", Mode(42): "Mode(42)",
	} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
}

func TestNewEndpointRejectsBadBackend(t *testing.T) {
	for _, backend := range []string{"", "localhost", "127.0.0.1"} {
		if e, err := NewEndpoint(backend); err == nil {
			_ = e.Close()
			t.Errorf("NewEndpoint(%q): no error", backend)
		}
	}
}

func TestPassRoundTripCountsExactly(t *testing.T) {
	echo := startEcho(t)
	e := NewEndpointTB(t, echo.addr())
	if e.Backend() != echo.addr() {
		t.Errorf("Backend() = %q, want %q", e.Backend(), echo.addr())
	}
	if e.Mode() != Pass {
		t.Errorf("Mode() = %v, want pass", e.Mode())
	}

	c := dial(t, e.Addr())
	const n = 300 << 10 // several chunks
	roundTrip(t, c, randomBytes(n))
	roundTrip(t, c, []byte("x"))
	// Bytes are counted when received, so an echo seen means counted.
	want := Stats{Accepted: 1, Active: 1, BytesToBackend: n + 1, BytesFromBackend: n + 1}
	if got := e.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}

	// Half-close: the EOF travels to the backend, the echo server closes,
	// and that EOF travels back.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("after CloseWrite: read %d bytes, %v; want clean EOF", len(b), err)
	}
	waitFor(t, "Active == 0", func() bool { return e.Stats().Active == 0 })
	want.Active = 0
	if got := e.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func TestDownRefusesAndUpRestoresSamePort(t *testing.T) {
	echo := startEcho(t)
	e := NewEndpointTB(t, echo.addr())
	addr := e.Addr()
	live := dial(t, addr)
	roundTrip(t, live, []byte("hello"))

	e.Down()
	e.Down() // idempotent
	if e.Mode() != Down {
		t.Errorf("Mode() = %v, want down", e.Mode())
	}
	expectDropped(t, live)
	start := time.Now()
	if c, err := net.DialTimeout("tcp4", addr, waitTimeout); err == nil {
		_ = c.Close()
		t.Fatal("dial succeeded while Down")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial error %v; want connection refused", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refusal took %v; want it at once", d)
	}
	waitFor(t, "Active == 0", func() bool { return e.Stats().Active == 0 })
	// While Down, forwarding changes are no-ops.
	e.Pass()
	e.Blackhole()
	e.Reset()
	if e.Mode() != Down {
		t.Errorf("Mode() = %v after Pass/Blackhole/Reset while down, want down", e.Mode())
	}

	if err := e.Up(); err != nil {
		t.Fatal(err)
	}
	if e.Addr() != addr || e.Mode() != Pass {
		t.Errorf("after Up: Addr %s mode %v; want %s pass", e.Addr(), e.Mode(), addr)
	}
	roundTrip(t, dial(t, addr), []byte("again"))
	if err := e.Up(); err != nil { // Up on a listening endpoint is Pass
		t.Fatal(err)
	}
	if got := e.Stats().Accepted; got != 2 {
		t.Errorf("Accepted = %d, want 2", got)
	}
}

func TestResetDropsLiveConnectionsKeepsAccepting(t *testing.T) {
	echo := startEcho(t)
	e := NewEndpointTB(t, echo.addr())
	live := dial(t, e.Addr())
	roundTrip(t, live, []byte("hello"))

	e.Reset()
	expectDropped(t, live)
	waitFor(t, "Active == 0", func() bool { return e.Stats().Active == 0 })
	if e.Mode() != Pass {
		t.Errorf("Mode() = %v, want pass", e.Mode())
	}
	roundTrip(t, dial(t, e.Addr()), []byte("new"))
	if got := e.Stats().Accepted; got != 2 {
		t.Errorf("Accepted = %d, want 2", got)
	}
}

func TestDropKeepsMode(t *testing.T) {
	echo := startEcho(t)
	e := NewEndpointTB(t, echo.addr())
	e.Blackhole()
	hole := dial(t, e.Addr())
	waitFor(t, "Active == 1", func() bool { return e.Stats().Active == 1 })

	e.Drop()
	expectDropped(t, hole)
	waitFor(t, "Active == 0", func() bool { return e.Stats().Active == 0 })
	if e.Mode() != Blackhole {
		t.Errorf("Mode() = %v after Drop, want blackhole", e.Mode())
	}
	expectNoEcho(t, dial(t, e.Addr()), 100*time.Millisecond)
	if got := echo.accepted.Load(); got != 0 {
		t.Errorf("backend accepted %d connections, want 0", got)
	}
}

func TestBackendUnreachableDropsClient(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	e := NewEndpointTB(t, dead)
	// The reset can come so fast that the dial itself reports it.
	c, err := net.DialTimeout("tcp4", e.Addr(), waitTimeout)
	if err == nil {
		defer c.Close()
		expectDropped(t, c)
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial: %v; want success or connection reset", err)
	}
	waitFor(t, "1 accepted", func() bool { return e.Stats().Accepted == 1 })
	waitFor(t, "Active == 0", func() bool { return e.Stats().Active == 0 })
}

func TestBlackholeForwardsNothingThenPassDropsIt(t *testing.T) {
	echo := startEcho(t)
	e := NewEndpointTB(t, echo.addr())
	before := dial(t, e.Addr())
	roundTrip(t, before, []byte("hello"))

	e.Blackhole()
	if e.Mode() != Blackhole {
		t.Errorf("Mode() = %v, want blackhole", e.Mode())
	}
	// A live connection stops forwarding.
	expectNoEcho(t, before, 200*time.Millisecond)
	// A new connection is accepted but gets nothing, and the backend is
	// never dialed for it.
	hole := dial(t, e.Addr())
	expectNoEcho(t, hole, 200*time.Millisecond)
	waitFor(t, "2 accepted", func() bool { return e.Stats().Accepted == 2 })
	if got := echo.accepted.Load(); got != 1 {
		t.Errorf("backend accepted %d connections, want 1 (none for the blackholed one)", got)
	}
	if s := e.Stats(); s.Active != 2 || s.BytesToBackend != 5 || s.BytesFromBackend != 5 {
		t.Errorf("Stats() = %+v; want 2 active and only the 5 bytes from before the blackhole", s)
	}

	// Leaving Blackhole drops the blackholed connections; new ones work.
	e.Pass()
	expectDropped(t, before)
	expectDropped(t, hole)
	waitFor(t, "Active == 0", func() bool { return e.Stats().Active == 0 })
	roundTrip(t, dial(t, e.Addr()), []byte("back"))
}

func TestBlackholeClientCloseIsNoticed(t *testing.T) {
	e := NewEndpointTB(t, startEcho(t).addr())
	e.Blackhole()
	c := dial(t, e.Addr())
	waitFor(t, "Active == 1", func() bool { return e.Stats().Active == 1 })
	_ = c.Close()
	waitFor(t, "Active == 0", func() bool { return e.Stats().Active == 0 })
}

func TestSlowBandwidthLimit(t *testing.T) {
	e := NewEndpointTB(t, startEcho(t).addr())
	e.Slow(0, 20000)
	if e.Mode() != Slow {
		t.Errorf("Mode() = %v, want slow", e.Mode())
	}
	c := dial(t, e.Addr())
	start := time.Now()
	roundTrip(t, c, randomBytes(10000))
	// 10000 bytes at 20000 B/s: 0.5 s each way, overlapping. Lower bound only.
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("10000 bytes at 20000 B/s took %v; want >= 400ms", d)
	}
	if s := e.Stats(); s.BytesToBackend != 10000 || s.BytesFromBackend != 10000 {
		t.Errorf("Stats() = %+v; want 10000 bytes each way", s)
	}
	e.Pass() // clears Slow
	if e.Mode() != Pass {
		t.Errorf("Mode() = %v, want pass", e.Mode())
	}
	roundTrip(t, c, randomBytes(10000))
}

func TestSlowLatency(t *testing.T) {
	e := NewEndpointTB(t, startEcho(t).addr())
	c := dial(t, e.Addr())
	roundTrip(t, c, []byte("warm"))

	const latency = 100 * time.Millisecond
	e.Slow(latency, 0) // applies to a live connection
	start := time.Now()
	roundTrip(t, c, []byte("ping"))
	if d := time.Since(start); d < 2*latency {
		t.Errorf("round trip took %v; want >= %v (one-way latency each way)", d, 2*latency)
	}
	e.Slow(0, 0) // is Pass
	if e.Mode() != Pass {
		t.Errorf("Mode() after Slow(0, 0) = %v, want pass", e.Mode())
	}
}

func TestCloseIsIdempotentAndWaitsForGoroutines(t *testing.T) {
	echo := startEcho(t)
	sink := startSink(t)

	// Goroutines blocked in every way a pump can block: a latency wait,
	// a bandwidth wait, a write to a backend that never reads, a read.
	limited, err := NewEndpoint(echo.addr())
	if err != nil {
		t.Fatal(err)
	}
	limited.Slow(time.Hour, 0)
	throttled, err := NewEndpoint(echo.addr())
	if err != nil {
		t.Fatal(err)
	}
	throttled.Slow(0, 1)
	stuck, err := NewEndpoint(sink.addr())
	if err != nil {
		t.Fatal(err)
	}
	idle, err := NewEndpoint(echo.addr())
	if err != nil {
		t.Fatal(err)
	}
	hole, err := NewEndpoint(echo.addr())
	if err != nil {
		t.Fatal(err)
	}
	hole.Blackhole()

	c1 := dial(t, limited.Addr())
	if _, err := c1.Write(randomBytes(100)); err != nil {
		t.Fatal(err)
	}
	c0 := dial(t, throttled.Addr())
	if _, err := c0.Write(randomBytes(100)); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, stuck.Addr())
	big := make([]byte, 64<<20)
	go func() { _, _ = c2.Write(big) }() // ends when c2 is dropped
	dial(t, idle.Addr())
	dial(t, hole.Addr())
	waitFor(t, "bytes queued", func() bool {
		return limited.Stats().BytesToBackend == 100 && throttled.Stats().BytesToBackend == 100 &&
			stuck.Stats().BytesToBackend > 512<<10 &&
			idle.Stats().Active == 1 && hole.Stats().Active == 1
	})

	for _, e := range []*Endpoint{limited, throttled, stuck, idle, hole} {
		start := time.Now()
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close took %v", d)
		}
		if n := e.running.Load(); n != 0 {
			t.Errorf("%d goroutines still running after Close", n)
		}
		if s := e.Stats(); s.Active != 0 {
			t.Errorf("Active = %d after Close", s.Active)
		}
		if err := e.Close(); err != nil { // idempotent
			t.Errorf("second Close: %v", err)
		}
		if e.Mode() != Closed {
			t.Errorf("Mode() = %v, want closed", e.Mode())
		}
		if err := e.Up(); !errors.Is(err, ErrClosed) {
			t.Errorf("Up after Close = %v, want ErrClosed", err)
		}
		e.Pass()
		e.Down()
		e.Reset()
		e.Slow(time.Second, 1)
		if e.Mode() != Closed {
			t.Errorf("Mode() = %v after changes on a closed endpoint, want closed", e.Mode())
		}
		if c, err := net.Dial("tcp4", e.Addr()); err == nil {
			_ = c.Close()
			t.Error("dial succeeded after Close")
		}
	}
	expectDropped(t, c0)
	expectDropped(t, c1)
	expectDropped(t, c2)
}

// TestConcurrentTrafficAndModeChanges runs traffic while another goroutine
// switches modes as fast as it can; it is meant for -race and leak checks.
func TestConcurrentTrafficAndModeChanges(t *testing.T) {
	echo := startEcho(t)
	e, err := NewEndpoint(echo.addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp4", e.Addr(), time.Second)
				if err != nil {
					continue // Down
				}
				_ = c.SetDeadline(time.Now().Add(100 * time.Millisecond))
				_, _ = c.Write(randomBytes(4096))
				_, _ = io.ReadFull(c, make([]byte, 4096))
				_ = c.Close()
			}
		})
	}
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			switch i % 6 {
			case 0:
				e.Blackhole()
			case 1:
				e.Slow(time.Millisecond, 1<<20)
			case 2:
				e.Reset()
			case 3:
				e.Down()
			case 4:
				if err := e.Up(); err != nil {
					t.Errorf("Up: %v", err)
				}
			case 5:
				e.Pass()
			}
			_ = e.Stats()
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.running.Load(); n != 0 {
		t.Errorf("%d goroutines still running after Close", n)
	}
	if s := e.Stats(); s.Active != 0 {
		t.Errorf("Active = %d after Close", s.Active)
	}
}

// startHealthServer starts a gRPC server with the health service on
// 127.0.0.1:0, stopped at cleanup.
func startHealthServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return ln.Addr().String()
}

// healthClient dials addr with fast reconnects, closed at cleanup.
func healthClient(tb testing.TB, addr string) healthpb.HealthClient {
	tb.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// check calls Health.Check with a bounded deadline.
func check(hc healthpb.HealthClient, timeout time.Duration, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return errors.New("not SERVING: " + resp.GetStatus().String())
	}
	return err
}

func TestGRPCThroughTwoEndpointsDownAndUp(t *testing.T) {
	backend := startHealthServer(t)
	e1 := NewEndpointTB(t, backend)
	e2 := NewEndpointTB(t, backend)
	hc1 := healthClient(t, e1.Addr())
	hc2 := healthClient(t, e2.Addr())

	if err := check(hc1, waitTimeout, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("via E1: %v", err)
	}
	if s := e1.Stats(); s.Accepted != 1 || s.BytesToBackend == 0 || s.BytesFromBackend == 0 {
		t.Errorf("E1 Stats() = %+v; want the call counted", s)
	}
	if s := e2.Stats(); s != (Stats{}) {
		t.Errorf("E2 Stats() = %+v; want nothing through E2 yet", s)
	}

	e1.Down()
	if err := check(hc1, waitTimeout); status.Code(err) != codes.Unavailable {
		t.Fatalf("via E1 while down: %v; want Unavailable", err)
	}
	// The other endpoint of the same backend still serves.
	if err := check(hc2, waitTimeout, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("via E2 while E1 is down: %v", err)
	}

	if err := e1.Up(); err != nil {
		t.Fatal(err)
	}
	if err := check(hc1, waitTimeout, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("via E1 after Up: %v", err)
	}
}

// TestGRPCBlackholeHandshakeNeverCompletes is the fake side of F3(b): the
// TCP connection is accepted but the HTTP/2 handshake never completes.
func TestGRPCBlackholeHandshakeNeverCompletes(t *testing.T) {
	backend := startHealthServer(t)
	e := NewEndpointTB(t, backend)
	e.Blackhole()
	hc := healthClient(t, e.Addr())

	if err := check(hc, 300*time.Millisecond, grpc.WaitForReady(true)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("via a blackhole: %v; want DeadlineExceeded", err)
	}
	if s := e.Stats(); s.Accepted == 0 || s.BytesToBackend != 0 || s.BytesFromBackend != 0 {
		t.Errorf("Stats() = %+v; want accepted connections and no byte forwarded", s)
	}

	e.Pass()
	if err := check(hc, waitTimeout, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("after Pass: %v", err)
	}
}
