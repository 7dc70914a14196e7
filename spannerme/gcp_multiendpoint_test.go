package spannerme

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
)

func TestRoutingByContext(t *testing.T) {
	a, b := startEndpoint(t, "A"), startEndpoint(t, "B")
	logs := &syncBuffer{}
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, a.Addr()),
		"west":    group(0, 0, b.Addr()),
	}), fastSettings(logs))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"no group: default", ctx, "A"},
		{"spannerme.NewMEContext", NewMEContext(ctx, "west"), "B"},
		{"grpcgcp.NewMEContext", grpcgcp.NewMEContext(ctx, "west"), "B"},
		{"default by name", NewMEContext(ctx, "default"), "A"},
		{"unknown group: default", NewMEContext(ctx, "nope"), "A"},
		{"unknown group again", NewMEContext(ctx, "nope"), "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := call(tc.ctx, gme)
			if err != nil || got != tc.want {
				t.Fatalf("served by %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if got := gme.Status().UnknownGroups["nope"]; got != 2 {
		t.Errorf("UnknownGroups[nope] = %d, want 2", got)
	}
	if n := strings.Count(logs.String(), "unknown MultiEndpoint"); n != 1 {
		t.Errorf("unknown group logged %d times, want once:\n%s", n, logs)
	}
	if name, ok := FromMEContext(grpcgcp.NewMEContext(ctx, "x")); !ok || name != "x" {
		t.Errorf("FromMEContext(grpcgcp.NewMEContext(x)) = %q, %v", name, ok)
	}
}

// F3 (a) and (b): the first success on the fallback comes about RecoveryTimeout after the
// fault, whether the primary refuses connections or accepts TCP and never answers.
func TestCase_F3_FailoverAfterRecoveryTimeout(t *testing.T) {
	const rt = 500 * time.Millisecond
	for _, tc := range []struct {
		name  string
		fault func(e endpoint)
	}{
		{"refuses connections", func(e endpoint) { e.Down() }},
		{"accepts TCP, never completes the handshake", func(e endpoint) { e.Blackhole(); e.Drop() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
			s := fastSettings(nil)
			s.MinConnectTimeout = 20 * time.Second // gRPC's default: failover must not wait for it
			gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
				"g": group(rt, 0, e1.Addr(), e2.Addr()),
			}), s)
			ctx := context.Background()
			waitServedBy(t, ctx, gme, "E1", 5*time.Second)
			eventually(t, 5*time.Second, "E2 warm", func() bool { p, _ := poolOf(gme, e2.Addr()); return p.Connectivity == "READY" })
			tc.fault(e1)
			took, failed := firstServedUnderLoad(t, ctx, gme, "E2", rt+3*time.Second)
			t.Logf("first success on E2 %v after the fault (RecoveryTimeout %v), %d failed calls on the way", took, rt, failed)
			if took < rt-50*time.Millisecond {
				t.Errorf("failed over after %v, before RecoveryTimeout %v", took, rt)
			}
			// Calls issued while E1 hangs in its handshake wait for the failover, not for the
			// 20s connection attempt: the first success comes about RecoveryTimeout after.
			if took > rt+time.Second {
				t.Errorf("first success on E2 %v after the fault; want about RecoveryTimeout %v", took, rt)
			}
			if g := groupOf(gme, "g"); g.Endpoints[0].State != Unavailable {
				t.Errorf("E1 state %v, want Unavailable", g.Endpoints[0].State)
			}
		})
	}
}

// firstServedUnderLoad starts a call every 10ms, each on its own goroutine as an application
// under load does, until one is served by want; it returns how long that took and how many
// calls failed meanwhile. A call stuck on the old endpoint does not delay the others.
func firstServedUnderLoad(t *testing.T, ctx context.Context, gme *GCPMultiEndpoint, want string, within time.Duration) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	deadline, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	served := make(chan time.Duration, 1)
	var failed atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := call(deadline, gme)
			switch {
			case err == nil && got == want:
				select {
				case served <- time.Since(start):
				default:
				}
			case err != nil && deadline.Err() == nil:
				failed.Add(1)
			}
		}()
		select {
		case took := <-served:
			cancel()
			return took, int(failed.Load())
		case <-deadline.Done():
			t.Fatalf("not served by %s within %v\n%s", want, within, statusString(gme))
		case <-tick.C:
		}
	}
}

func TestSwitchBackAfterSwitchingDelay(t *testing.T) {
	const sd = 400 * time.Millisecond
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	var mu sync.Mutex
	var events []SwitchEvent
	s := fastSettings(nil)
	s.OnSwitch = func(ev SwitchEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() }
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(0, sd, e1.Addr(), e2.Addr()),
	}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 5*time.Second)
	eventually(t, 5*time.Second, "E2 warm", func() bool { p, _ := poolOf(gme, e2.Addr()); return p.Connectivity == "READY" })
	e1.Down()
	waitServedBy(t, ctx, gme, "E2", 5*time.Second)
	if err := e1.Up(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "E1 available again", func() bool { return groupOf(gme, "g").Endpoints[0].State == Available })
	back := time.Now()
	took, failed := waitServedBy(t, ctx, gme, "E1", sd+5*time.Second)
	t.Logf("switch-back %v after E1 became available (SwitchingDelay %v), %d failed calls", took, sd, failed)
	if took < sd-50*time.Millisecond {
		t.Errorf("switched back after %v, before SwitchingDelay %v", time.Since(back), sd)
	}
	if failed != 0 {
		t.Errorf("%d calls failed during switch-back", failed)
	}
	eventually(t, 5*time.Second, "a fallback then a recovery event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= 2 && events[0].Reason == Fallback && events[len(events)-1].Reason == Recovery
	})
}

// OnSwitch runs with no lock held: it may read the status, reconfigure and even close.
func TestOnSwitchMayCallBack(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr(), e2.Addr())})
	var gme *GCPMultiEndpoint
	ready := make(chan struct{})
	var armed atomic.Bool // startup switches (whichever pool connects first) do not count
	done := make(chan error, 1)
	s := fastSettings(nil)
	s.OnSwitch = func(ev SwitchEvent) {
		<-ready
		if !armed.Load() || ev.To != e2.Addr() {
			return
		}
		_ = gme.Status()
		err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e2.Addr())}))
		if err == nil {
			err = gme.Close()
		}
		done <- err
	}
	gme = newGME(t, o, s)
	close(ready)
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	armed.Store(true)
	e1.Down()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnSwitch calling back into the GCPMultiEndpoint did not finish")
	}
	if !gme.Status().Closed {
		t.Error("not closed")
	}
}

// F1: a standby that gets no call stays connected even with a short channel idle timeout, so
// failover to it is immediate.
func TestCase_F1_IdleStandbyTakesOverAtOnce(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(0, 0, e1.Addr(), e2.Addr()),
	}), fastSettings(nil), grpc.WithIdleTimeout(50*time.Millisecond))
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 5*time.Second)
	// The standby connects without a call (under load this can take longer than E1's first
	// call); then several idle timeouts pass with no call to E2.
	eventually(t, 5*time.Second, "standby pool READY", func() bool {
		p, _ := poolOf(gme, e2.Addr())
		return p.Connectivity == "READY"
	})
	accepted := e2.Stats().Accepted
	time.Sleep(300 * time.Millisecond)
	// gRPC idles the channel; the pool connects it again at once (it may be CONNECTING for
	// that moment on a loaded machine).
	eventually(t, 5*time.Second, "standby pool READY or IDLE after the idle timeouts", func() bool {
		p, _ := poolOf(gme, e2.Addr())
		return p.Connectivity == "READY" || p.Connectivity == "IDLE"
	})
	e1.Down()
	eventually(t, 5*time.Second, "E1 Unavailable", func() bool { return groupOf(gme, "g").Current == e2.Addr() })
	got, err := call(ctx, gme)
	if err != nil || got != "E2" {
		t.Fatalf("first call after failover: %q, %v", got, err)
	}
	t.Logf("E2 accepted %d connections before the failover and %d in all", accepted, e2.Stats().Accepted)
}

// F1: a healthy endpoint added on top becomes current after SwitchingDelay without any call
// routed to it.
func TestCase_F1_AddedTopEndpointBecomesCurrentWithoutCalls(t *testing.T) {
	e0, e1 := startEndpoint(t, "E0"), startEndpoint(t, "E1")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 200*time.Millisecond, e1.Addr())}), fastSettings(nil))
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 200*time.Millisecond, e0.Addr(), e1.Addr())})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "E0 current", func() bool { return groupOf(gme, "g").Current == e0.Addr() })
}

// F2: an endpoint already READY in group A becomes Available in group B the moment B lists
// it; switching B away from its available endpoint takes exactly SwitchingDelay.
func TestCase_F2_AlreadyConnectedEndpointJoinsAnotherGroup(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	clk := clock.NewFake(time.Time{})
	s := fastSettings(nil)
	const sd = time.Second
	gme := newGMEWith(t, options("a", map[string]*multiendpoint.MultiEndpointOptions{
		"a": group(0, sd, e1.Addr()),
		"b": group(0, sd, e2.Addr()),
	}), s, plumbing{clock: clk})
	eventually(t, 5*time.Second, "both ready", func() bool {
		return groupOf(gme, "a").Endpoints[0].State == Available && groupOf(gme, "b").Endpoints[0].State == Available
	})
	// Move E1 (READY, served by group a) to the top of group b, and add E1 to a new group c.
	err := gme.UpdateMultiEndpoints(options("a", map[string]*multiendpoint.MultiEndpointOptions{
		"a": group(0, sd, e1.Addr()),
		"b": group(0, sd, e1.Addr(), e2.Addr()),
		"c": group(0, sd, e1.Addr()),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if g := groupOf(gme, "b"); g.Endpoints[0].State != Available || g.PendingSwitch != e1.Addr() || g.Current != e2.Addr() {
		t.Fatalf("group b right after the update: %+v", g)
	}
	if g := groupOf(gme, "c"); g.Endpoints[0].State != Available || g.Current != e1.Addr() {
		t.Fatalf("group c right after the update: %+v", g)
	}
	clk.Advance(sd - time.Millisecond)
	if g := groupOf(gme, "b"); g.Current != e2.Addr() {
		t.Fatalf("group b switched before SwitchingDelay: %+v", g)
	}
	clk.Advance(time.Millisecond)
	if g := groupOf(gme, "b"); g.Current != e1.Addr() {
		t.Fatalf("group b did not switch at SwitchingDelay: %+v", g)
	}
	if got, err := call(NewMEContext(context.Background(), "b"), gme); err != nil || got != "E1" {
		t.Fatalf("group b call served by %q, %v", got, err)
	}
}

// F5: a server-streaming call keeps going while its endpoint is removed; new calls go to the
// new endpoint; the old pool closes once the stream ends.
func TestCase_F5_StreamSurvivesEndpointRemoval(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())}), fastSettings(nil))
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 5*time.Second)
	const n = 20
	params := make([]*testpb.ResponseParameters, n)
	for i := range params {
		params[i] = &testpb.ResponseParameters{IntervalUs: 30_000}
	}
	stream, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e2.Addr())})); err != nil {
		t.Fatal(err)
	}
	if p, ok := poolOf(gme, e1.Addr()); !ok || !p.Retired || p.InFlight != 1 {
		t.Fatalf("E1 pool after removal: %+v (found %v), want retired with 1 call in flight", p, ok)
	}
	if got, err := call(ctx, gme); err != nil || got != "E2" {
		t.Fatalf("new call served by %q, %v; want E2", got, err)
	}
	received := 3
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream cut after %d messages: %v", received, err)
		}
		if string(m.Payload.Body) != "E1" {
			t.Fatalf("message from %q", m.Payload.Body)
		}
		received++
	}
	if received != n {
		t.Fatalf("received %d messages, want %d", received, n)
	}
	eventually(t, 5*time.Second, "E1 pool closed", func() bool { _, ok := poolOf(gme, e1.Addr()); return !ok })
}

// F10 and F11 in small: 16 goroutines call through random groups (one unknown) while the
// configuration changes every few milliseconds; every endpoint is healthy, so no call fails.
func TestCase_F10_ConcurrentCallsAndUpdates(t *testing.T) {
	eps := []endpoint{startEndpoint(t, "E0"), startEndpoint(t, "E1"), startEndpoint(t, "E2"), startEndpoint(t, "E3")}
	addr := func(i int) string { return eps[i].Addr() }
	gme := newGME(t, options("a", map[string]*multiendpoint.MultiEndpointOptions{
		"a": group(time.Second, 10*time.Millisecond, addr(0), addr(1)),
		"b": group(time.Second, 10*time.Millisecond, addr(2)),
	}), fastSettings(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	names := []string{"a", "b", "c", "unknown", ""}
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 1))
			for ctx.Err() == nil {
				cctx := context.Background()
				if n := names[r.IntN(len(names))]; n != "" {
					cctx = NewMEContext(cctx, n)
				}
				cctx, c := context.WithTimeout(cctx, 5*time.Second)
				var err error
				if r.IntN(4) == 0 {
					err = streamOnce(cctx, gme)
				} else {
					_, err = testpb.NewTestServiceClient(gme).UnaryCall(cctx, &testpb.SimpleRequest{})
				}
				c()
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	updates := 0
	r := rand.New(rand.NewPCG(99, 2))
	for ctx.Err() == nil {
		groups := map[string]*multiendpoint.MultiEndpointOptions{}
		for _, name := range []string{"a", "b", "c"} {
			if name != "a" && r.IntN(3) == 0 {
				continue
			}
			perm := r.Perm(len(eps))[:1+r.IntN(len(eps))]
			var list []string
			for _, i := range perm {
				list = append(list, addr(i))
			}
			groups[name] = group(time.Duration(r.IntN(3))*time.Second, time.Duration(r.IntN(20))*time.Millisecond, list...)
		}
		if err := gme.UpdateMultiEndpoints(options("a", groups)); err != nil {
			t.Fatalf("update: %v", err)
		}
		updates++
		time.Sleep(3 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("%d calls, %d failed, %d updates", calls.Load(), failures.Load(), updates)
	if failures.Load() != 0 {
		t.Errorf("%d of %d calls failed; first: %v", failures.Load(), calls.Load(), firstErr.Load())
	}
	for _, p := range gme.Status().Pools {
		if !p.Retired && p.InFlight != 0 {
			t.Errorf("pool %s has %d calls in flight after all calls returned", p.Endpoint, p.InFlight)
		}
	}
}

func streamOnce(ctx context.Context, gme *GCPMultiEndpoint) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{}, {}, {}}})
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func TestRemoveAndReAddQuickly(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr(), e2.Addr())}), fastSettings(nil))
	for i := range 50 {
		list := []string{e2.Addr()}
		if i%2 == 1 {
			list = []string{e1.Addr(), e2.Addr()}
		}
		if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, list...)})); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "E1 current again", func() bool { return groupOf(gme, "g").Current == e1.Addr() })
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	eventually(t, 10*time.Second, "retired pools closed", func() bool { return len(gme.Status().Pools) == 2 })
}

func TestConfigErrors(t *testing.T) {
	g := func(es ...string) *multiendpoint.MultiEndpointOptions { return group(0, 0, es...) }
	for _, tc := range []struct {
		name string
		opts *grpcgcp.GCPMultiEndpointOptions
		want string
	}{
		{"nil options", nil, "nil GCPMultiEndpointOptions"},
		{"no groups", options("a", nil), "no MultiEndpoints"},
		{"empty default", options("", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h:1")}), "Default is empty"},
		{"default not a group", options("x", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h:1")}), `group "x": Default names a MultiEndpoint that is not configured; the MultiEndpoints are "a"`},
		{"default misspelled", options("defualt", map[string]*multiendpoint.MultiEndpointOptions{"default": g("h:1"), "west": g("h:2")}),
			`group "defualt": Default names a MultiEndpoint that is not configured (did you mean "default"?); the MultiEndpoints are "default", "west"`},
		{"nil group", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h:1"), "b": nil}), `group "b": nil MultiEndpointOptions`},
		{"no endpoints", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g()}), `group "a": no endpoints`},
		{"empty endpoint", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h:1", "")}), `group "a": endpoint 1 "": empty endpoint`},
		{"no port", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("psc-east4")}), `endpoint 0 "psc-east4": not host:port`},
		{"bad port", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h:99999")}), `endpoint 0 "h:99999": port "99999"`},
		{"http scheme", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("http://h:1")}), `endpoint 0 "http://h:1": unsupported scheme`},
		{"https with path", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("https://h/x")}), `may not have a path`},
		{"white space", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h :1")}), `white space`},
		{"duplicate", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h:1", "h:2", "h:1")}), `group "a": endpoint 2 "h:1": duplicate endpoint`},
		{"duplicate after https normalization", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h:443", "https://h")}), `endpoint 1 "https://h": duplicate endpoint (same as "h:443" at position 0)`},
		{"negative recovery timeout", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(-time.Second, 0, "h:1")}), `group "a": negative RecoveryTimeout`},
		{"negative switching delay", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, -1, "h:1")}), `group "a": negative SwitchingDelay`},
		{"empty group name", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("h:1"), "": g("h:1")}), `empty MultiEndpoint name`},
		{"empty target", options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": g("dns:///")}), `no address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gme, err := NewGCPMultiEndpoint(tc.opts, insecureDial)
			if err == nil {
				gme.Close()
				t.Fatalf("no error, want %q", tc.want)
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want ErrInvalidConfig containing %q", err, tc.want)
			}
			var ce *ConfigError // this package's, whichever part found the mistake
			if !errors.As(err, &ce) || ce.Error() != err.Error() {
				t.Fatalf("error %q (%T) is not a *spannerme.ConfigError", err, err)
			}
		})
	}
}

func TestInvalidUpdateChangesNothing(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	orig := options("a", map[string]*multiendpoint.MultiEndpointOptions{
		"a": group(time.Second, 0, e1.Addr()),
		"b": group(time.Second, 0, e2.Addr()),
	})
	gme := newGME(t, orig, fastSettings(nil))
	waitServedBy(t, context.Background(), gme, "E1", 5*time.Second)
	waitServedBy(t, NewMEContext(context.Background(), "b"), gme, "E2", 5*time.Second) // both settled
	before := statusString(gme)
	bad := []*grpcgcp.GCPMultiEndpointOptions{
		options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, e2.Addr()), "b": group(0, 0, "bad endpoint")}),
		options("zzz", map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, e2.Addr())}),
		nil,
	}
	for _, o := range bad {
		if err := gme.UpdateMultiEndpoints(o); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("UpdateMultiEndpoints(%v) = %v, want ErrInvalidConfig", o, err)
		}
		if after := statusString(gme); after != before {
			t.Fatalf("invalid update changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	}
	// A dial failure also leaves everything as it was and closes what was dialed.
	var dialed []*grpc.ClientConn
	failing := *orig
	failing.MultiEndpoints = map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, "new-one:1", "new-two:2")}
	gme.dial = func(_ context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		if target == "new-two:2" {
			return nil, errors.New("boom")
		}
		cc, err := grpc.NewClient(target, opts...)
		dialed = append(dialed, cc)
		return cc, err
	}
	if err := gme.UpdateMultiEndpoints(&failing); err == nil || !strings.Contains(err.Error(), `"new-two:2"`) {
		t.Fatalf("dial failure: %v", err)
	}
	if after := statusString(gme); after != before {
		t.Fatalf("failed update changed the state:\n%s", after)
	}
	for _, cc := range dialed {
		if s := cc.GetState().String(); s != "SHUTDOWN" {
			t.Errorf("pool dialed by the failed update is %s, want SHUTDOWN", s)
		}
	}
	if got, err := call(context.Background(), gme); err != nil || got != "E1" {
		t.Fatalf("after failed updates: %q, %v", got, err)
	}
}

func TestCallerOptionsNotMutated(t *testing.T) {
	e1 := startEndpoint(t, "E1")
	o := options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, "https://"+e1.Addr())})
	before := fmt.Sprintf("%+v %+v %v", *o, *o.MultiEndpoints["a"], o.GRPCgcpConfig)
	gme := newGME(t, o, fastSettings(nil))
	if after := fmt.Sprintf("%+v %+v %v", *o, *o.MultiEndpoints["a"], o.GRPCgcpConfig); after != before {
		t.Errorf("options changed:\n%s\n%s", before, after)
	}
	if got := gme.GCPConfig().GetChannelPool(); got.GetMinSize() != DefaultPoolSize || got.GetMaxSize() != DefaultMaxPoolSize {
		t.Errorf("GCPConfig channel pool = %v, want MinSize %d, MaxSize %d", got, DefaultPoolSize, DefaultMaxPoolSize)
	}
}

func TestCloseLifecycle(t *testing.T) {
	e1 := startEndpoint(t, "E1")
	o := options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(time.Second, time.Second, e1.Addr())})
	// New then Close at once.
	gme, err := NewGCPMultiEndpointWithSettings(o, fastSettings(nil), insecureDial)
	if err != nil {
		t.Fatal(err)
	}
	if err := gme.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := gme.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := gme.UpdateMultiEndpoints(o); !errors.Is(err, ErrClosed) {
		t.Fatalf("Update after Close = %v, want ErrClosed", err)
	}
	if _, err := call(context.Background(), gme); status.Code(err) != codes.Canceled {
		t.Fatalf("call after Close = %v, want Canceled", err)
	}
	if !gme.Status().Closed {
		t.Fatal("Status().Closed = false")
	}
}

// F4: E1 becomes READY and drops every connection ~100ms later, again and again. Traffic
// settles on E2 and stays (no ping-pong); it returns to E1 only after E1 stayed available for
// a whole SwitchingDelay.
func TestCase_F4_FlappingEndpoint(t *testing.T) {
	const rt, sd = 300 * time.Millisecond, time.Second
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	var mu sync.Mutex
	var events []SwitchEvent
	s := fastSettings(nil)
	s.OnSwitch = func(ev SwitchEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() }
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(rt, sd, e1.Addr(), e2.Addr())}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 5*time.Second)
	eventually(t, 5*time.Second, "E2 warm", func() bool { p, _ := poolOf(gme, e2.Addr()); return p.Connectivity == "READY" })
	mu.Lock()
	events = nil
	mu.Unlock()

	flapStart := time.Now()
	var settled time.Duration
	var lastDrop time.Time
	for time.Since(flapStart) < 3*time.Second {
		lastDrop = time.Now()
		e1.Reset() // every connection of E1 dropped; the pool reconnects at once
		time.Sleep(100 * time.Millisecond)
		if settled == 0 && groupOf(gme, "g").Current == e2.Addr() {
			settled = time.Since(flapStart)
		}
	}
	if settled == 0 {
		t.Fatalf("traffic never left the flapping endpoint\n%s", statusString(gme))
	}
	mu.Lock()
	during := append([]SwitchEvent(nil), events...)
	mu.Unlock()
	if len(during) != 1 || during[0].To != e2.Addr() || during[0].Reason != Fallback {
		t.Fatalf("events while E1 flapped: %v; want exactly one fallback to E2", during)
	}
	if got, err := call(ctx, gme); err != nil || got != "E2" {
		t.Fatalf("call while E1 flaps: %q, %v", got, err)
	}
	waitServedBy(t, ctx, gme, "E1", sd+5*time.Second)
	back := time.Since(lastDrop)
	// A Reset racing a reconnection can miss a connection, so not every Reset is a drop seen
	// by the client; the rule is about the availability it saw: the switch-back comes a
	// whole SwitchingDelay after E1 last became Available.
	availableSince := groupOf(gme, "g").Endpoints[0].Since
	var switchBack SwitchEvent
	eventually(t, 5*time.Second, "the switch-back event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		last := events[len(events)-1]
		switchBack = last
		return last.To == e1.Addr()
	})
	t.Logf("settled on E2 %v after flapping began (RecoveryTimeout %v); back on E1 %v after the last Reset, %v after E1 last became available (SwitchingDelay %v)",
		settled.Round(time.Millisecond), rt, back.Round(time.Millisecond), switchBack.At.Sub(availableSince), sd)
	if got := switchBack.At.Sub(availableSince); got < sd {
		t.Errorf("switched back %v after E1 last became available, before SwitchingDelay %v", got, sd)
	}
}

// Unknown group names: with 64 distinct names and 8 concurrent first calls each, exactly the
// 64 names are kept, each with its 8 calls, each logged once; a 65th name is counted under
// "(other unknown names)".
func TestUnknownGroupNamesKeptUnderConcurrentFirstCalls(t *testing.T) {
	const names, callsPerName = route.MaxUnknownNames, 8
	addr := startServer(t, "A")
	for round := range 50 { // the race is narrow: many rounds
		var logs syncBuffer
		gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, addr)}), fastSettings(&logs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range names * callsPerName {
			wg.Go(func() {
				<-start
				gme.noteUnknown(fmt.Sprintf("unknown-%d", i%names))
			})
		}
		close(start)
		wg.Wait()
		gme.noteUnknown("one-too-many")
		got := gme.Status().UnknownGroups
		for i := range names {
			if n := got[fmt.Sprintf("unknown-%d", i)]; n != callsPerName {
				t.Errorf("round %d: UnknownGroups[unknown-%d] = %d, want %d", round, i, n, callsPerName)
			}
		}
		if len(got) != names+1 || got[route.OtherUnknownNames] != 1 {
			t.Errorf("round %d: %d names kept, %q = %d; want %d names and 1 other call", round, len(got)-1, route.OtherUnknownNames, got[route.OtherUnknownNames], names)
		}
		if n := strings.Count(logs.String(), "unknown MultiEndpoint"); n != names {
			t.Errorf("round %d: %d unknown names logged, want %d", round, n, names)
		}
		gme.Close()
		if t.Failed() {
			return
		}
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

// A DialFunc that returns neither a connection nor an error is a configuration error, not a
// panic.
func TestDialFuncReturningNil(t *testing.T) {
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "h:1")})
	o.DialFunc = func(context.Context, string, ...grpc.DialOption) (*grpc.ClientConn, error) { return nil, nil }
	if _, err := NewGCPMultiEndpoint(o, insecureDial); err == nil {
		t.Fatal("no error for a DialFunc that returned nil, nil")
	}
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
