package pool

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

func TestLifetimesAge(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		want    time.Duration
	}{
		{"none", nil, 0},
		{"one: itself", []time.Duration{ms(50)}, ms(50)},
		{"two agreeing: the shorter", []time.Duration{ms(50), ms(46)}, ms(46)},
		{"agreeing: the shortest", []time.Duration{ms(50), ms(46), ms(54)}, ms(46)},
		{"at the spread's limit", []time.Duration{ms(40), ms(50), ms(45)}, ms(40)},
		{"a reset among them: the samples after it", []time.Duration{ms(50), ms(7), ms(50)}, ms(50)},
		{"only the last ones count", []time.Duration{ms(51), ms(50), ms(52), ms(49)}, ms(49)},
		{"a disagreeing sample replaces the others", []time.Duration{ms(50), ms(52), ms(49), ms(500)}, ms(500)},
		{"then agreeing ones join it", []time.Duration{ms(50), ms(500), ms(450)}, ms(450)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l lifetimes
			for _, d := range tc.samples {
				l.add(d)
			}
			if got := l.age(); got != tc.want {
				t.Errorf("age after %v = %v, want %v", tc.samples, got, tc.want)
			}
			l.forget()
			if got := l.age(); got != 0 {
				t.Errorf("age after forget = %v, want 0", got)
			}
		})
	}
}

// fakeSubConn is a gRPC SubConn that records what the balancer asks of it.
type fakeSubConn struct {
	balancer.SubConn
	name     string
	listener func(balancer.SubConnState) // NewSubConnOptions.StateListener; nil if none
	mu       sync.Mutex
	connects int
	shut     bool
}

func (s *fakeSubConn) Connect()                                           { s.mu.Lock(); s.connects++; s.mu.Unlock() }
func (s *fakeSubConn) Shutdown()                                          { s.mu.Lock(); s.shut = true; s.mu.Unlock() }
func (s *fakeSubConn) UpdateAddresses([]resolver.Address)                 {}
func (s *fakeSubConn) RegisterHealthListener(func(balancer.SubConnState)) {}
func (s *fakeSubConn) String() string                                     { return s.name }

func (s *fakeSubConn) counts() (connects int, shut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects, s.shut
}

// fakeClientConn is gRPC's side of a pool's balancer: it creates fakeSubConns and keeps the
// pickers it is handed.
type fakeClientConn struct {
	balancer.ClientConn
	mu      sync.Mutex
	subs    []*fakeSubConn
	pickers []balancer.Picker
}

func (c *fakeClientConn) NewSubConn(_ []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &fakeSubConn{name: fmt.Sprintf("sc%d", len(c.subs)+1), listener: opts.StateListener}
	c.subs = append(c.subs, s)
	return s, nil
}

func (c *fakeClientConn) UpdateState(s balancer.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pickers = append(c.pickers, s.Picker)
}

func (c *fakeClientConn) subConns() []*fakeSubConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*fakeSubConn(nil), c.subs...)
}

func (c *fakeClientConn) lastPicker() (balancer.Picker, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pickers[len(c.pickers)-1], len(c.pickers)
}

// rotationRig is a pool's balancer (spannerme_pool over grpc_gcp, one channel) on a fake
// gRPC ClientConn and a fake clock.
type rotationRig struct {
	t     *testing.T
	clk   *clock.Fake
	cc    *fakeClientConn
	b     balancer.Balancer
	watch *Watch
}

func newRotationRig(t *testing.T) *rotationRig {
	t.Helper()
	return newRotationRigN(t, 1)
}

// newRotationRigN is newRotationRig with n channels.
func newRotationRigN(t *testing.T, n int) *rotationRig {
	t.Helper()
	r := &rotationRig{t: t, clk: clock.NewFake(time.Time{}), cc: &fakeClientConn{}}
	r.watch = NewWatch("e1:443", r.clk, &recordingObserver{})
	r.watch.youthClock = r.clk
	t.Cleanup(r.watch.Release)
	r.b = poolBalancerBuilder{}.Build(r.cc, balancer.BuildOptions{})
	t.Cleanup(r.b.Close)
	cfg, err := poolBalancerBuilder{}.ParseConfig([]byte(fmt.Sprintf(
		`{"watch":"%d","child":{"channelPool":{"minSize":%d,"maxSize":%d}}}`, r.watch.id, n, n)))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.b.UpdateClientConnState(balancer.ClientConnState{
		ResolverState:  resolver.State{Addresses: []resolver.Address{{Addr: "127.0.0.1:1"}}},
		BalancerConfig: cfg,
	}); err != nil {
		t.Fatal(err)
	}
	if got := len(r.cc.subConns()); got != n {
		t.Fatalf("%d SubConns after the first addresses, want %d (minSize)", got, n)
	}
	return r
}

// sub returns the i-th SubConn created (1-based), failing if there are fewer.
func (r *rotationRig) sub(i int) *fakeSubConn {
	r.t.Helper()
	subs := r.cc.subConns()
	if len(subs) < i {
		r.t.Fatalf("%d SubConns created, want at least %d", len(subs), i)
	}
	return subs[i-1]
}

// state reports a state of sc as gRPC does: to its StateListener, or to the balancer's
// UpdateSubConnState for a SubConn created without one (grpc_gcp's).
func (r *rotationRig) state(sc *fakeSubConn, s connectivity.State) {
	if sc.listener != nil {
		sc.listener(balancer.SubConnState{ConnectivityState: s})
		return
	}
	//lint:ignore SA1019 the way grpc_gcp's SubConns report their state
	r.b.UpdateSubConnState(sc, balancer.SubConnState{ConnectivityState: s})
}

func (r *rotationRig) ready(sc *fakeSubConn) {
	r.state(sc, connectivity.Connecting)
	r.state(sc, connectivity.Ready)
}

// picked returns the gRPC SubConn the last picker hands gRPC.
func (r *rotationRig) picked() balancer.SubConn {
	r.t.Helper()
	p, _ := r.cc.lastPicker()
	res, err := p.Pick(balancer.PickInfo{FullMethodName: "/google.spanner.v1.Spanner/ExecuteSql", Ctx: context.Background()})
	if err != nil {
		r.t.Fatalf("pick: %v", err)
	}
	if res.Done != nil {
		res.Done(balancer.DoneInfo{BytesReceived: true}) // the server answered
	}
	return res.SubConn
}

// learn has the server end the first SubConn three times after the given lifetimes, each
// connection having carried a call; grpc_gcp reconnects it each time (a connection that
// carried a call is replaced at once: young.go).
func (r *rotationRig) learn(lifetimes ...time.Duration) {
	sc := r.sub(1)
	for _, d := range lifetimes {
		r.ready(sc)
		if got := r.picked(); got != sc {
			r.t.Fatalf("a call went to %v, want %v", got, sc)
		}
		r.clk.Advance(d)
		before, _ := sc.counts()
		r.state(sc, connectivity.Idle) // the server's GOAWAY
		if after, _ := sc.counts(); after != before+1 {
			r.t.Fatalf("grpc_gcp did not reconnect the channel after the server ended it")
		}
	}
}

// Connections the server ends together (a restart ending every channel dialed at the same
// moment) are one sample, whose lifetime is taken as the age (the first retired connection's
// expiry disproves it if it was the pool's uptime); ends apart in time count each.
func TestConnectionsEndedTogetherAreOneSample(t *testing.T) {
	r := newRotationRigN(t, 3)
	b := r.b.(*poolBalancer)
	samples := func() (int, time.Duration) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.lives.n, b.lives.age()
	}
	subs := r.cc.subConns()
	for _, sc := range subs {
		r.ready(sc)
		r.picked() // each carries a call: ended, it is replaced at once (young.go)
	}
	r.clk.Advance(time.Second)
	for _, sc := range subs {
		r.state(sc, connectivity.Idle) // one restart ends all three at once
	}
	if n, age := samples(); n != 1 || age != time.Second {
		t.Fatalf("%d samples, age %v after one event ended three connections, want 1 sample, 1s", n, age)
	}
	// Ends a whole lifetime apart are samples each.
	for range 2 {
		r.ready(subs[0])
		r.picked()
		r.clk.Advance(time.Second)
		r.state(subs[0], connectivity.Idle)
	}
	if n, age := samples(); n != 3 || age != time.Second {
		t.Fatalf("%d samples, age %v after two more separate ends, want 3, 1s", n, age)
	}
}

// Once the server has ended a connection (its lifetime is the age), each new connection gets a
// replacement at half of it; calls go to the replacement once it is READY,
// without grpc_gcp seeing the channel change state; the replaced connection takes no call and
// is shut down when the server ends it, which confirms the age.
func TestConnectionReplacedAtHalfTheServersAge(t *testing.T) {
	r := newRotationRig(t)
	sc1 := r.sub(1)
	r.learn(48 * time.Millisecond) // age: 48 ms
	r.ready(sc1)
	if got := r.picked(); got != sc1 {
		t.Fatalf("picked %v, want sc1", got)
	}

	sc2 := r.sub(2) // created idle when sc1's rotation was timed
	r.clk.Advance(23 * time.Millisecond)
	if c, _ := sc2.counts(); c != 0 {
		t.Fatalf("the replacement connected 23 ms after READY; it connects at 24 ms, half the age")
	}
	r.clk.Advance(time.Millisecond)
	if c, _ := sc2.counts(); c != 1 {
		t.Fatalf("the replacement was asked to connect %d times, want 1", c)
	}
	if got := r.picked(); got != sc1 {
		t.Fatalf("picked %v while the replacement connects, want sc1", got)
	}

	grpcgcpPicker, published := r.cc.lastPicker()
	r.ready(sc2)
	p, n := r.cc.lastPicker()
	if n != published+1 {
		t.Fatalf("%d pickers published when the replacement became READY, want 1 (the calls waiting on sc1 pick again)", n-published)
	}
	if p.(*poolPicker).child != grpcgcpPicker.(*poolPicker).child {
		t.Fatal("grpc_gcp built a new picker: it saw the channel change state")
	}
	for range 3 {
		if got := r.picked(); got != sc2 {
			t.Fatalf("picked %v after the swap, want sc2", got)
		}
	}
	if _, shut := sc1.counts(); shut {
		t.Fatal("the replaced connection was shut down at once; it is left to the server")
	}

	connects, _ := sc1.counts()
	lastErr := r.watch.last.Load()
	r.clk.Advance(23 * time.Millisecond) // sc1 is 47 ms old
	r.state(sc1, connectivity.Idle)      // the server's GOAWAY
	if c, shut := sc1.counts(); !shut || c != connects {
		t.Fatalf("replaced connection after the server ended it: shut %v, reconnected %d times; want shut, not reconnected", shut, c-connects)
	}
	if e := r.watch.last.Load(); e != lastErr {
		t.Fatalf("the server's end of a replaced connection was recorded as the pool's error %+v; it is the routine end of a rotation", *e)
	}
	if got := r.picked(); got != sc2 {
		t.Fatalf("picked %v after the replaced connection ended, want sc2", got)
	}
	// sc2 is replaced in its turn, 24 ms after it became READY.
	sc3 := r.sub(3)
	if c, _ := sc3.counts(); c != 0 {
		t.Fatalf("sc2's replacement connected 23 ms after sc2 became READY")
	}
	r.clk.Advance(time.Millisecond)
	if c, _ := sc3.counts(); c != 1 {
		t.Fatalf("sc2's replacement was asked to connect %d times 24 ms after sc2 became READY, want 1", c)
	}
}

// Rotation creates its SubConns only while gRPC calls the balancer (on gRPC's serializer), with
// a StateListener of their own: the rotation timer, on a goroutine of its own, creates none and
// only asks the replacement to connect.
func TestRotationCreatesSubConnsOnlyOnGRPCsCalls(t *testing.T) {
	r := newRotationRig(t)
	r.learn(40 * time.Millisecond)
	r.ready(r.sub(1))
	created := len(r.cc.subConns())
	r.clk.Advance(20 * time.Millisecond) // the rotation timer fires
	if n := len(r.cc.subConns()); n != created {
		t.Fatalf("the rotation timer created %d SubConns; it may only connect one created before", n-created)
	}
	sc2 := r.sub(2)
	if c, _ := sc2.counts(); c != 1 {
		t.Fatalf("the replacement was asked to connect %d times at the rotation, want 1", c)
	}
	if sc2.listener == nil {
		t.Fatal("the replacement has no StateListener: its states would come through the deprecated UpdateSubConnState")
	}
}

// Without three agreeing lifetimes (none, or one cut short by a reset) nothing is replaced:
// the connections are grpc_gcp's.
func TestNoReplacementWithoutALifetime(t *testing.T) {
	r := newRotationRig(t)
	r.ready(r.sub(1))
	r.clk.Advance(time.Hour)
	if n := len(r.cc.subConns()); n != 1 {
		t.Fatalf("%d SubConns after an hour, want 1", n)
	}
	if got := r.picked(); got != r.sub(1) {
		t.Fatalf("picked %v, want sc1", got)
	}
}

// The first connection the server ends teaches the age: the next one is replaced at half of
// it, so a GOAWAY storm cuts calls of its first connections only.
func TestFirstLifetimeRotates(t *testing.T) {
	r := newRotationRig(t)
	r.learn(40 * time.Millisecond)
	sc1 := r.sub(1)
	r.ready(sc1)
	sc2 := r.sub(2) // created idle when sc1's rotation was timed
	r.clk.Advance(20 * time.Millisecond)
	if c, _ := sc2.counts(); c != 1 {
		t.Fatalf("the replacement was asked to connect %d times at half the first lifetime, want 1", c)
	}
}

// A replaced connection that the server has not ended at 1.5 times the age disproves it: the
// pool forgets the age, and shuts the connection down at the next state change of its SubConns
// (on gRPC's serializer, not on the expiry timer); the next replacement to become READY
// retires its connection at once (no age left to confirm) and is not replaced itself.
func TestUnconfirmedAgeIsForgotten(t *testing.T) {
	r := newRotationRig(t)
	sc1 := r.sub(1)
	r.learn(40 * time.Millisecond)
	r.ready(sc1)
	r.clk.Advance(20 * time.Millisecond)
	sc2 := r.sub(2)
	r.ready(sc2)
	r.clk.Advance(20 * time.Millisecond) // sc2's replacement, at half the age
	sc3 := r.sub(3)
	r.clk.Advance(19 * time.Millisecond) // sc1 is 59 ms old
	if _, shut := sc1.counts(); shut {
		t.Fatal("sc1 shut down before its expiry (60 ms, 1.5 times the age)")
	}
	r.clk.Advance(time.Millisecond)
	if _, shut := sc1.counts(); shut {
		t.Fatal("sc1 shut down by the expiry timer; it is shut down on gRPC's serializer")
	}
	r.ready(sc3)
	if _, shut := sc1.counts(); !shut {
		t.Fatal("sc1 not shut down at the first state change after its expiry")
	}
	if _, shut := sc2.counts(); !shut {
		t.Fatal("sc2 not shut down when sc3 replaced it without an age to confirm")
	}
	r.clk.Advance(time.Hour)
	if n := len(r.cc.subConns()); n != 3 {
		t.Fatalf("%d SubConns an hour after the age was disproved, want 3 (sc3 not replaced)", n)
	}
	if got := r.picked(); got != sc3 {
		t.Fatalf("picked %v, want sc3", got)
	}
}

// A connection that leaves READY before its replacement is ready keeps the channel: grpc_gcp
// reconnects it, and the replacement is shut down; a replacement that fails to connect is shut
// down, the channel keeps its connection, and a new replacement is tried a tenth of the age
// later.
func TestReplacementAbandoned(t *testing.T) {
	t.Run("the connection ended first", func(t *testing.T) {
		r := newRotationRig(t)
		sc1 := r.sub(1)
		r.learn(40 * time.Millisecond)
		r.ready(sc1)
		r.picked() // it carries a call: ended, it is replaced at once (young.go)
		r.clk.Advance(20 * time.Millisecond)
		sc2 := r.sub(2)
		before, _ := sc1.counts()
		r.state(sc1, connectivity.Idle)
		if _, shut := sc2.counts(); !shut {
			t.Fatal("the replacement was not shut down when the connection it was to replace ended")
		}
		if c, _ := sc1.counts(); c != before+1 {
			t.Fatal("grpc_gcp did not reconnect the channel")
		}
		r.ready(sc2) // a late report of the abandoned replacement changes nothing
		r.ready(sc1)
		if got := r.picked(); got != sc1 {
			t.Fatalf("picked %v, want sc1", got)
		}
	})
	t.Run("the replacement failed", func(t *testing.T) {
		r := newRotationRig(t)
		sc1 := r.sub(1)
		r.learn(40 * time.Millisecond)
		r.ready(sc1)
		r.clk.Advance(20 * time.Millisecond)
		sc2 := r.sub(2)
		r.state(sc2, connectivity.Connecting)
		r.state(sc2, connectivity.TransientFailure)
		if _, shut := sc2.counts(); !shut {
			t.Fatal("the failed replacement was not shut down")
		}
		if got := r.picked(); got != sc1 {
			t.Fatalf("picked %v, want sc1", got)
		}
		// The replacement is tried again a tenth of the age later, while sc1 is READY.
		sc3 := r.sub(3) // created idle when the retry was timed
		r.clk.Advance(3 * time.Millisecond)
		if c, _ := sc3.counts(); c != 0 {
			t.Fatal("the retry connected 3ms after the failure; it waits a tenth of the age (4ms)")
		}
		r.clk.Advance(time.Millisecond)
		if c, _ := sc3.counts(); c != 1 {
			t.Fatalf("the retry was asked to connect %d times a tenth of the age after the failure, want 1", c)
		}
		r.ready(sc3)
		if got := r.picked(); got != sc3 {
			t.Fatalf("picked %v, want the retried replacement sc3", got)
		}
	})
}

// An endpoint that goes down ends its connections and then refuses new ones: the lifetimes of
// the connections it ended (every sample since a connection was last READY) are the outage's,
// not the server's age, and are undone, so nothing is replaced once the endpoint is back (an
// endpoint down 0.57 s had 12 connections for 4 channels when such a lifetime rotated them). A
// refused attempt after a connection became READY again drops nothing: the lifetimes before
// it were the server's.
func TestOutageIsNoAge(t *testing.T) {
	refused := balancer.SubConnState{ConnectivityState: connectivity.TransientFailure,
		ConnectionError: fmt.Errorf("connection error: desc = %q: %w", "transport: Error while dialing", syscall.ECONNREFUSED)}
	report := func(r *rotationRig, sc *fakeSubConn, s balancer.SubConnState) {
		if sc.listener != nil {
			sc.listener(s)
			return
		}
		//lint:ignore SA1019 the way grpc_gcp's SubConns report their state
		r.b.UpdateSubConnState(sc, s)
	}
	r := newRotationRigN(t, 2)
	b := r.b.(*poolBalancer)
	age := func() time.Duration {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.lives.age()
	}
	subs := r.cc.subConns()
	for _, sc := range subs {
		r.ready(sc)
		r.picked() // each carries a call: its end is a lifetime (young.go)
		r.clk.Advance(100 * time.Millisecond)
	}
	r.clk.Advance(400 * time.Millisecond)
	// The endpoint goes down; its connections end 100 ms apart (keepalives, say), each at
	// 600 ms of age (past the 500 ms of a young death, whether or not it carried a call): two
	// samples that agree.
	for _, sc := range subs {
		r.state(sc, connectivity.Idle)
		r.clk.Advance(100 * time.Millisecond)
	}
	b.mu.Lock()
	n := b.lives.n
	b.mu.Unlock()
	if got := age(); got != 600*time.Millisecond || n != 2 {
		t.Fatalf("age %v from %d samples after the connections ended, want 600ms from 2", got, n)
	}
	r.state(subs[0], connectivity.Connecting)
	report(r, subs[0], refused)
	if got := age(); got != 0 {
		t.Fatalf("age %v after the endpoint refused a connection, want none", got)
	}
	r.clk.Advance(570 * time.Millisecond) // back up
	created := len(r.cc.subConns())
	for _, sc := range subs {
		r.ready(sc)
		r.picked()
	}
	r.clk.Advance(time.Hour)
	// The second channel was still READY when the first end was taken for an age: it got a
	// replacement then, shut down when its own connection ended. Once the endpoint is back,
	// none.
	if n := len(r.cc.subConns()); n != created {
		t.Fatalf("%d SubConns created in the hour after the outage, want 0", n-created)
	}
	for _, sc := range r.cc.subConns()[2:] {
		if _, shut := sc.counts(); !shut {
			t.Fatalf("a replacement from the outage still open an hour later")
		}
	}

	// A connection that stayed READY through the outage: its rotation, timed by the outage's
	// lifetime, is called off (its idle replacement shut down, never connected).
	r = newRotationRigN(t, 2)
	b = r.b.(*poolBalancer)
	subs = r.cc.subConns()
	r.ready(subs[0])
	r.picked()
	r.clk.Advance(100 * time.Millisecond)
	r.ready(subs[1])
	r.clk.Advance(600 * time.Millisecond)
	r.state(subs[1], connectivity.Idle) // 600 ms: taken for an age; subs[0] is timed at 300 ms
	if n := len(r.cc.subConns()); n != 3 {
		t.Fatalf("%d SubConns after the lifetime, want 3 (subs[0]'s replacement, idle)", n)
	}
	r.state(subs[1], connectivity.Connecting)
	report(r, subs[1], refused)
	r.clk.Advance(time.Hour)
	if connects, shut := r.sub(3).counts(); connects != 0 || !shut {
		t.Fatalf("subs[0]'s replacement after the outage was undone: asked to connect %d times, shut down %v; want 0, true", connects, shut)
	}

	// A server's age; a refused attempt after a connection was READY again drops nothing; an
	// outage's lifetime that disagrees with the age is undone, and the age is back.
	r = newRotationRigN(t, 2)
	b = r.b.(*poolBalancer)
	r.learn(40 * time.Millisecond)
	sc1, sc2 := r.sub(1), r.sub(2)
	r.clk.Advance(time.Millisecond)
	r.ready(sc1)
	r.clk.Advance(time.Millisecond)
	r.state(sc2, connectivity.Connecting)
	report(r, sc2, refused)
	if got := age(); got != 40*time.Millisecond {
		t.Fatalf("age %v after a refused attempt that followed a READY connection, want 40ms", got)
	}
	r.picked()
	r.clk.Advance(9 * time.Millisecond)
	r.state(sc1, connectivity.Idle) // the endpoint goes down 10 ms into sc1's life
	if got := age(); got != 10*time.Millisecond {
		t.Fatalf("age %v after a lifetime of 10ms that disagrees with 40ms, want 10ms (it replaces them)", got)
	}
	r.state(sc1, connectivity.Connecting)
	report(r, sc1, refused)
	if got := age(); got != 40*time.Millisecond {
		t.Fatalf("age %v after the endpoint refused a connection, want 40ms again", got)
	}
}
