package spannerme

import (
	"github.com/spannerme/spanner-multiendpoint/internal/pool"

	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// Regression tests for the spannerme defects of issue 13, each with the input.

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

// counting is a unary interceptor that counts the calls that reach it.
func counting(n *atomic.Int64) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

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

// Unknown group names: with 64 distinct names and 8 concurrent first calls each, exactly the
// 64 names are kept, each with its 8 calls, each logged once; a 65th name is counted under
// "(other unknown names)".
func TestUnknownGroupNamesKeptUnderConcurrentFirstCalls(t *testing.T) {
	const names, callsPerName = maxUnknownNames, 8
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
		if len(got) != names+1 || got[otherUnknownNames] != 1 {
			t.Errorf("round %d: %d names kept, %q = %d; want %d names and 1 other call", round, len(got)-1, otherUnknownNames, got[otherUnknownNames], names)
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

// blockingHandler is a slog handler whose switch records block until released, as a slow
// logger would (the issue: 300ms per record), so that Close happens during the log line.
type blockingHandler struct {
	started chan struct{} // closed when the first switch record is being written
	release chan struct{} // switch records return once it is closed
	once    sync.Once
}

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler            { return h }
func (h *blockingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "current endpoint changed") {
		h.once.Do(func() { close(h.started) })
		<-h.release
	}
	return nil
}

// OnSwitch is not called after Close: an event taken for delivery, but still being logged
// when Close is called, is dropped; only an OnSwitch already running may finish.
func TestNoOnSwitchAfterClose(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	e1.Down() // the group falls over to E2 at startup: one switch event
	h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	var calls atomic.Int64
	s := fastSettings(nil)
	s.Logger = slog.New(h)
	s.OnSwitch = func(SwitchEvent) { calls.Add(1) }
	gme, err := NewGCPMultiEndpointWithSettings(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr(), e2.Addr())}), s, insecureDial)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
		gme.Close()
	}()
	select {
	case <-h.started:
	case <-time.After(10 * time.Second):
		t.Fatalf("no switch was logged\n%s", statusString(gme))
	}
	closeErr := make(chan error, 1)
	go func() { closeErr <- gme.Close() }()
	select {
	case err := <-closeErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the log line being written")
	}
	close(h.release) // the log line ends after Close returned
	released = true
	select {
	case <-gme.events.q.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the event goroutine did not end after Close")
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("OnSwitch was called %d times after Close returned, want 0", n)
	}
}
