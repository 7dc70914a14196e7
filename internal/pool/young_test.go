package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
)

func TestYoungDeathWaitIsGRPCsBackoff(t *testing.T) {
	cfg := backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, MaxDelay: 5 * time.Second}
	y := &youth{cfg: cfg}
	for _, tc := range []struct {
		strike int
		want   time.Duration
	}{
		{1, time.Second},
		{2, 1600 * time.Millisecond},
		{3, 2560 * time.Millisecond},
		{4, 4096 * time.Millisecond},
		{5, 5 * time.Second}, // capped at MaxDelay
		{50, 5 * time.Second},
	} {
		if got := y.delayLocked(tc.strike); got.Round(time.Millisecond) != tc.want {
			t.Errorf("wait before strike %d = %v, want %v", tc.strike, got, tc.want)
		}
	}
	cfg.Jitter = 0.2
	y = &youth{cfg: cfg}
	for range 1000 {
		if d := y.delayLocked(1); d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("jittered first wait %v, want within 1s ±20%%", d)
		}
	}
	// Zero fields take gRPC's defaults (1s, x1.6, 120s).
	y = &youth{}
	if d := y.delayLocked(1); d < 800*time.Millisecond || d > 1200*time.Millisecond {
		t.Errorf("first wait with a zero configuration %v, want gRPC's 1s ±20%%", d)
	}
	if d := y.delayLocked(100); d > 144*time.Second || d < 96*time.Second {
		t.Errorf("wait after many strikes with a zero configuration %v, want gRPC's 120s ±20%%", d)
	}
}

// Deaths within one wait are one round; a new round waits longer; lived ends the backoff.
func TestYoungDeathRounds(t *testing.T) {
	y := &youth{cfg: backoff.Config{BaseDelay: time.Second, Multiplier: 2, MaxDelay: time.Minute}}
	t0 := time.Unix(0, 0)
	if d := y.died(t0); d != time.Second {
		t.Fatalf("first death: wait %v, want 1s", d)
	}
	if d := y.died(t0.Add(300 * time.Millisecond)); d != 700*time.Millisecond {
		t.Fatalf("a death within the round: wait %v, want the round's end (700ms)", d)
	}
	if d := y.died(t0.Add(time.Second)); d != 2*time.Second {
		t.Fatalf("a death after the round: wait %v, want 2s", d)
	}
	if s := y.status(); s.Deaths != 3 || s.Strikes != 2 || !s.Until.Equal(t0.Add(3*time.Second)) || !y.inBackoff() {
		t.Fatalf("status %+v", s)
	}
	y.lived()
	if s := y.status(); s.Strikes != 0 || !s.Until.IsZero() || s.Deaths != 3 || y.inBackoff() {
		t.Fatalf("status after lived %+v", s)
	}
	if d := y.died(t0.Add(4 * time.Second)); d != time.Second {
		t.Fatalf("first death after lived: wait %v, want 1s again", d)
	}
	var none *youth
	if none.inBackoff() || none.status() != (YoungStatus{}) {
		t.Fatal("a nil youth backs off")
	}
}

// childState returns the state grpc_gcp last published for the pool.
func (r *rotationRig) childState() connectivity.State {
	b := r.b.(*poolBalancer)
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	return b.published.ConnectivityState
}

// A connection that ends before it carried a call, whether gRPC reported it READY or not, is
// shown to grpc_gcp as TRANSIENT_FAILURE and connected again only when the backoff's wait is
// over; each round waits longer. A connection that carried a call, or lived youngLife, is
// reconnected at once and ends the backoff.
func TestYoungDeathBacksOff(t *testing.T) {
	r := newRotationRig(t)
	r.watch.SetBackoff(backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, MaxDelay: 5 * time.Second})
	sc := r.sub(1)
	connects := func() int { c, _ := sc.counts(); return c }

	// Established, then IDLE before gRPC reported READY (the GOAWAY read first).
	r.state(sc, connectivity.Connecting)
	before := connects()
	r.state(sc, connectivity.Idle)
	if connects() != before {
		t.Fatal("grpc_gcp reconnected a connection that died young at once")
	}
	if s := r.childState(); s != connectivity.TransientFailure {
		t.Fatalf("pool state %v after a young death, want TRANSIENT_FAILURE", s)
	}
	e := r.watch.lastError()
	if e == nil || e.Kind != KindClosed || !strings.Contains(e.Message, "before it carried a call") {
		t.Fatalf("recorded error %+v, want a young death", e)
	}
	y := r.watch.youth.status()
	if y.Strikes != 1 || y.Deaths != 1 {
		t.Fatalf("young status %+v, want 1 strike", y)
	}
	r.clk.Advance(999 * time.Millisecond)
	if connects() != before {
		t.Fatal("reconnected before the wait was over")
	}
	r.clk.Advance(time.Millisecond)
	if connects() != before+1 {
		t.Fatal("not reconnected when the wait was over")
	}

	// READY for 10ms, no call: a second round, 1.6s.
	r.ready(sc)
	r.clk.Advance(10 * time.Millisecond)
	r.state(sc, connectivity.Idle)
	if y := r.watch.youth.status(); y.Strikes != 2 || !y.Until.Equal(r.clk.Now().Add(1600*time.Millisecond)) {
		t.Fatalf("young status %+v after the second round, want 2 strikes, 1.6s", y)
	}
	r.clk.Advance(1600 * time.Millisecond)
	if connects() != before+2 {
		t.Fatal("not reconnected after the second wait")
	}

	// A connection that carried a call is replaced at once and ends the backoff.
	r.ready(sc)
	r.picked()
	r.state(sc, connectivity.Idle)
	if connects() != before+3 {
		t.Fatal("a connection that carried a call was not replaced at once")
	}
	if y := r.watch.youth.status(); y.Strikes != 0 {
		t.Fatalf("young status %+v after a connection carried a call, want no backoff", y)
	}

	// So is one that lived youngLife without a call.
	r.ready(sc)
	r.clk.Advance(youngLife)
	r.state(sc, connectivity.Idle)
	if connects() != before+4 {
		t.Fatal("a connection that lived youngLife was not replaced at once")
	}
}

// A young death's timer is stale once the channel connected otherwise, or the balancer closed.
func TestYoungDeathTimerStale(t *testing.T) {
	r := newRotationRig(t)
	sc := r.sub(1)
	r.state(sc, connectivity.Connecting)
	r.state(sc, connectivity.Idle)
	before, _ := sc.counts()
	r.b.Close()
	r.clk.Advance(time.Minute)
	if c, _ := sc.counts(); c != before {
		t.Fatal("a closed balancer's reconnect timer connected")
	}
}

// The latency connection backs off the same way.
func TestYoungDeathLatencyConnection(t *testing.T) {
	r := newRotationRig(t)
	b := r.b.(*poolBalancer)
	b.mu.Lock()
	b.latencyConn = true
	b.mu.Unlock()
	b.updateLatencyConn([]resolver.Address{{Addr: "127.0.0.1:2"}})
	subs := r.cc.subConns()
	lat := subs[len(subs)-1]
	if lat.listener == nil {
		t.Fatal("the latency connection has no state listener")
	}
	start, _ := lat.counts()
	lat.listener(balancer.SubConnState{ConnectivityState: connectivity.Connecting})
	lat.listener(balancer.SubConnState{ConnectivityState: connectivity.Idle})
	if c, _ := lat.counts(); c != start {
		t.Fatal("the latency connection was reconnected at once after a young death")
	}
	r.clk.Advance(2 * time.Minute) // beyond any jittered first wait
	if c, _ := lat.counts(); c != start+1 {
		t.Fatal("the latency connection was not reconnected after the wait")
	}
	lat.listener(balancer.SubConnState{ConnectivityState: connectivity.Connecting})
	lat.listener(balancer.SubConnState{ConnectivityState: connectivity.Ready})
	r.clk.Advance(youngLife)
	lat.listener(balancer.SubConnState{ConnectivityState: connectivity.Idle})
	if c, _ := lat.counts(); c != start+2 {
		t.Fatal("a latency connection that lived youngLife was not reconnected at once")
	}
}

// GetOrBuildProducer builds nothing: a latency connection that becomes READY publishes no
// stream interface in these tests.
func (s *fakeSubConn) GetOrBuildProducer(balancer.ProducerBuilder) (balancer.Producer, func()) {
	return nil, func() {}
}

// A connection that died young teaches the rotation nothing: its lifetime is the peer's
// refusal, not a maximum connection age, and a rotation timed on it would connect a
// replacement beside the backoff (more connections a second than the backoff allows). One
// that carried a call and was ended as young is still a lifetime.
func TestYoungDeathIsNoLifetime(t *testing.T) {
	r := newRotationRig(t)
	r.watch.SetBackoff(backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1, MaxDelay: 100 * time.Millisecond})
	b := r.b.(*poolBalancer)
	samples := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.lives.n
	}
	sc := r.sub(1)
	for i := range 5 {
		r.ready(sc)
		r.clk.Advance(5 * time.Millisecond)
		r.state(sc, connectivity.Idle) // GOAWAY 5 ms after READY, no call
		if n := samples(); n != 0 {
			t.Fatalf("young death %d: %d lifetime samples, want 0", i+1, n)
		}
		r.clk.Advance(time.Second) // the backoff's wait (jittered) is over; reconnected
	}
	r.ready(sc)
	if n := len(r.cc.subConns()); n != 1 {
		t.Fatalf("%d SubConns after five young deaths, want 1 (no replacement timed)", n)
	}
	r.learn(5*time.Millisecond, 5*time.Millisecond, 5*time.Millisecond) // each carried a call
	if n := samples(); n != 3 {
		t.Fatalf("%d lifetime samples after three connections that carried a call, want 3", n)
	}
}

// An endpoint that goes down kills its connections, young ones too, and then refuses new
// ones: an attempt it never accepted (refused, timed out) ends the young-death backoff, so the
// endpoint is available without a dwell once it is back; gRPC's own backoff paces the
// attempts. An attempt that failed after the accept (a reset, a close before the server's
// preface) is what a peer that kills connections young may answer too: the strike stays.
func TestFailedAttemptEndsTheYoungBackoff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		strikes int
	}{
		{"refused", fmt.Errorf("connection error: desc = %q: %w", "transport: Error while dialing", syscall.ECONNREFUSED), 0},
		{"timed out", fmt.Errorf("connection error: desc = %q: %w", "transport: Error while dialing", os.ErrDeadlineExceeded), 0},
		{"reset after the accept", fmt.Errorf("connection error: desc = %q: %w", "error reading server preface", syscall.ECONNRESET), 1},
		{"closed before the preface", errors.New("connection error: desc = \"error reading server preface: EOF\""), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRotationRig(t)
			sc := r.sub(1)
			r.ready(sc)
			r.clk.Advance(10 * time.Millisecond)
			r.state(sc, connectivity.Idle) // killed 10 ms after READY, no call: a young death
			if y := r.watch.youth.status(); y.Strikes != 1 {
				t.Fatalf("young status %+v after a young death, want 1 strike", y)
			}
			r.clk.Advance(time.Second) // the wait is over; the channel connects again
			r.state(sc, connectivity.Connecting)
			//lint:ignore SA1019 the way grpc_gcp's SubConns report their state
			r.b.UpdateSubConnState(sc, balancer.SubConnState{ConnectivityState: connectivity.TransientFailure, ConnectionError: tc.err})
			if y := r.watch.youth.status(); y.Strikes != tc.strikes || r.watch.youth.inBackoff() != (tc.strikes > 0) {
				t.Fatalf("young status %+v after the failed attempt, want %d strikes", y, tc.strikes)
			}
		})
	}
}

// A call picked on a connection that ends before the server answered it (a GOAWAY that
// refuses the stream) does not make the connection one that carried a call: it died young,
// and its channel backs off. An answer on an earlier connection of the same SubConn, ending
// late, marks nothing either.
func TestUnansweredCallIsNotCarried(t *testing.T) {
	r := newRotationRig(t)
	r.watch.SetBackoff(backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, MaxDelay: 5 * time.Second})
	sc := r.sub(1)
	connects := func() int { c, _ := sc.counts(); return c }
	pick := func() func(balancer.DoneInfo) {
		p, _ := r.cc.lastPicker()
		res, err := p.Pick(balancer.PickInfo{FullMethodName: "/google.spanner.v1.Spanner/ExecuteSql", Ctx: context.Background()})
		if err != nil || res.SubConn != sc {
			t.Fatalf("pick: %v, %v; want sc", res.SubConn, err)
		}
		return res.Done
	}

	r.ready(sc)
	pick()(balancer.DoneInfo{Err: errors.New("stream refused by GOAWAY"), BytesSent: true})
	before := connects()
	r.state(sc, connectivity.Idle)
	if connects() != before {
		t.Fatal("a connection whose only call got no answer was replaced at once")
	}
	if y := r.watch.youth.status(); y.Strikes != 1 {
		t.Fatalf("young status %+v, want 1 strike", y)
	}

	// A call answered on the first connection, ending after the SubConn connected again.
	r.clk.Advance(time.Second)
	r.ready(sc)
	late := pick()
	r.clk.Advance(10 * time.Millisecond)
	r.state(sc, connectivity.Idle) // young again: the call has not been answered yet
	r.clk.Advance(2 * time.Second)
	r.ready(sc)
	late(balancer.DoneInfo{BytesReceived: true})
	before = connects()
	r.state(sc, connectivity.Idle)
	if connects() != before {
		t.Fatal("an answer on the SubConn's previous connection made its new one carried")
	}
}
