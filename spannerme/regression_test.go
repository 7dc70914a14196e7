package spannerme

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

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

// A group created by an earlier update must judge a re-added endpoint by its new pool, not by
// the retired one's last state.
func TestReAddedEndpointReadsLiveReadiness(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	gme := newGME(t, options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, e1.Addr())}), fastSettings(nil))
	eventually(t, 5*time.Second, "E1 Available", func() bool { return groupOf(gme, "a").Endpoints[0].State == Available })
	update := func(groups map[string]*multiendpoint.MultiEndpointOptions) {
		t.Helper()
		if err := gme.UpdateMultiEndpoints(options("a", groups)); err != nil {
			t.Fatal(err)
		}
	}
	update(map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, e1.Addr()), "b": group(time.Minute, 0, e2.Addr())})
	eventually(t, 5*time.Second, "E2 Available in b", func() bool { return groupOf(gme, "b").Endpoints[0].State == Available })
	update(map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, e2.Addr()), "b": group(time.Minute, 0, e2.Addr())})
	eventually(t, 5*time.Second, "E1's pool closed", func() bool { _, ok := poolOf(gme, e1.Addr()); return !ok })
	e1.Down()
	update(map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, e2.Addr()), "b": group(time.Minute, 0, e1.Addr(), e2.Addr())})
	if g := groupOf(gme, "b"); g.Current != e2.Addr() || g.Endpoints[0].State == Available {
		t.Errorf("group b after re-adding the down E1 on top: %+v", g)
	}
	if _, err := call(NewMEContext(context.Background(), "b"), gme); err != nil {
		t.Errorf("call through b right after the update: %v", err)
	}
}

// F1: a caller's channel idle timeout (dial options may override ours) must not make idle
// cycles look like failures: no switch with both endpoints healthy.
func TestCase_F1_IdleCyclesCauseNoSwitches(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	var mu sync.Mutex
	var events []SwitchEvent
	s := fastSettings(nil)
	s.OnSwitch = func(ev SwitchEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() }
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr(), e2.Addr())}), s,
		grpc.WithIdleTimeout(100*time.Millisecond))
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	eventually(t, 5*time.Second, "E2 warm", func() bool { return groupOf(gme, "g").Endpoints[1].State == Available })
	mu.Lock()
	events = nil
	mu.Unlock()
	time.Sleep(time.Second) // ten idle timeouts, no call, no fault
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 0 {
		t.Errorf("%d switches in 1s of idle cycles with both endpoints healthy, e.g. %+v", len(events), events[0])
	}
}

// F8: with SPANNER_EMULATOR_HOST set, a runtime update keeps every group on the emulator.
func TestCase_F8_UpdateKeepsEmulatorRewrite(t *testing.T) {
	b := startSpannerBackend(t, 1)
	t.Setenv(emulatorHostEnv, b.eps[0].Addr())
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, "psc-east4.invalid:443")})
	client, gme, err := NewMultiEndpointClientWithSettings(context.Background(), b.database, fixture.ClientConfig(), o, fastSettings(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	if err := gme.UpdateMultiEndpoints(options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, "psc-west2.invalid:443"), "west": group(0, 0, "psc-west2.invalid:443")})); err != nil {
		t.Fatal(err)
	}
	for _, g := range gme.Status().Groups {
		if len(g.Endpoints) != 1 || g.Endpoints[0].Endpoint != b.eps[0].Addr() {
			t.Errorf("group %s after the update: %+v, want only the emulator", g.Name, g.Endpoints)
		}
	}
	if n, err := countAccounts(NewMEContext(context.Background(), "west"), client); err != nil || n == 0 {
		t.Errorf("query after the update: %d, %v", n, err)
	}
}

// A DialFunc that returns neither a connection nor an error is a configuration error, not a
// panic.
func TestDialFuncReturningNil(t *testing.T) {
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "h:1")})
	o.DialFunc = func(context.Context, string, ...grpc.DialOption) (*grpc.ClientConn, error) { return nil, nil }
	if _, err := NewGCPMultiEndpoint(o, insecureDial); err == nil {
		t.Fatal("no error for a DialFunc that returned nil, nil")
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

// With RecoveryTimeout 0 (the zero value), a primary that connects a little later than its
// fallback still takes the traffic from the start: no fallback at startup, no event.
func TestStartupWithZeroRecoveryTimeoutKeepsThePrimary(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	e1.Slow(100*time.Millisecond, 0) // its handshake takes a few round trips of 100ms
	var mu sync.Mutex
	var events []SwitchEvent
	s := fastSettings(nil)
	s.OnSwitch = func(ev SwitchEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() }
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, time.Second, e1.Addr(), e2.Addr())}), s)
	got, err := call(context.Background(), gme)
	if err != nil || got != "E1" {
		t.Fatalf("first call served by %q, %v; want E1", got, err)
	}
	eventually(t, 5*time.Second, "both Available", func() bool {
		g := groupOf(gme, "g")
		return g.Endpoints[0].State == Available && g.Endpoints[1].State == Available
	})
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 0 {
		t.Errorf("switch events at startup: %v", events)
	}
}

// With RecoveryTimeout 0, a primary whose first connection attempt fails hands over to the
// fallback as soon as that attempt has failed.
func TestStartupWithZeroRecoveryTimeoutPrimaryDown(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	e1.Down()
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, time.Second, e1.Addr(), e2.Addr())}), fastSettings(nil))
	took, _ := waitServedBy(t, context.Background(), gme, "E2", 5*time.Second)
	t.Logf("served by the fallback %v after creation", took)
}

// An endpoint whose established connections silently stop carrying bytes (packets dropped, no
// reset, no refusal) keeps its pool READY until keepalive finds the connections dead:
// KeepaliveTime plus KeepaliveTimeout after the silence, the pool leaves READY and the group
// fails over RecoveryTimeout later. Here with gRPC's shortest KeepaliveTime (10s; the test
// servers allow it), a 300ms KeepaliveTimeout, and calls in flight, so that pings are sent.
func TestSilentlyDeadCurrentEndpointFoundByKeepalive(t *testing.T) {
	if testing.Short() {
		t.Skip("takes over 10s: gRPC's shortest keepalive interval")
	}
	const rt, ka, kaTimeout = 300 * time.Millisecond, 10 * time.Second, 300 * time.Millisecond
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	s := fastSettings(nil)
	s.KeepaliveTime, s.KeepaliveTimeout = ka, kaTimeout
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(rt, 0, e1.Addr(), e2.Addr())}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 5*time.Second)
	eventually(t, 5*time.Second, "E2 warm", func() bool { p, _ := poolOf(gme, e2.Addr()); return p.Connectivity == "READY" })
	e1.Blackhole() // live connections stop forwarding; nothing is reset
	took, _ := firstServedUnderLoad(t, ctx, gme, "E2", ka+kaTimeout+rt+10*time.Second)
	t.Logf("first success on E2 %v after E1 went silent (KeepaliveTime %v + KeepaliveTimeout %v + RecoveryTimeout %v)", took, ka, kaTimeout, rt)
}

// With RecoveryTimeout 0, a primary whose first connection attempt never ends (here a
// resolver that never answers) holds the group for MinConnectTimeout at most, then the
// fallback takes over.
func TestStartupWithZeroRecoveryTimeoutPrimaryNeverConnects(t *testing.T) {
	e2 := startEndpoint(t, "E2")
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "stuck:1", e2.Addr())})
	o.DialFunc = func(_ context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		if target == "stuck:1" {
			return grpc.NewClient("stuck:///x", append(opts, grpc.WithResolvers(manual.NewBuilderWithScheme("stuck")))...)
		}
		return grpc.NewClient(target, opts...)
	}
	s := fastSettings(nil) // MinConnectTimeout 1s
	gme := newGME(t, o, s)
	took, _ := waitServedBy(t, context.Background(), gme, "E2", s.MinConnectTimeout+5*time.Second)
	t.Logf("served by the fallback %v after creation (MinConnectTimeout %v)", took, s.MinConnectTimeout)
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

// A name that resolves to no address (gRPC's DNS resolver reports NXDOMAIN so) must not make
// grpcgcp's balancer spin: the group fails over and Close returns. The resolver here is a
// manual one that resolves to nothing; no DNS query is made. The pool's balancer refuses the
// empty state (balancer.go), whatever the resolver.
func TestNameWithoutAddressesDoesNotHang(t *testing.T) {
	e2 := startEndpoint(t, "E2")
	empty := manual.NewBuilderWithScheme("empty")
	empty.InitialState(resolver.State{}) // resolves to nothing
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(300*time.Millisecond, 0, "nxdomain:1", e2.Addr())})
	o.DialFunc = func(_ context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		if target == "nxdomain:1" {
			return grpc.NewClient("empty:///nxdomain", append(opts, grpc.WithResolvers(empty))...)
		}
		return grpc.NewClient(target, opts...)
	}
	gme, err := NewGCPMultiEndpointWithSettings(o, fastSettings(nil), insecureDial)
	if err != nil {
		t.Fatal(err)
	}
	waitServedBy(t, context.Background(), gme, "E2", 5*time.Second)
	done := make(chan struct{})
	go func() { gme.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}
