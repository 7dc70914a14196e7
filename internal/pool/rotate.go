package pool

import (
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// Connection rotation: a pool whose server ends its connections at a fixed age (a maximum
// connection age: an HTTP/2 GOAWAY, then a grace for the calls in flight) replaces each
// connection at half that age, before the server ends it, so that no call starts on a
// connection about to be ended.
//
// Why: grpcgcp reconnects a channel the moment the server's GOAWAY makes it IDLE and sends each
// call to its least busy channel, so calls start on connections of every age, and a call
// started shortly before the GOAWAY may outlive the grace and be cut. A grpc-go server does not
// reset a connection it ends after the grace: it stops serving it and waits up to 1 s for the
// client to close it (grpc-go internal/transport/http2_server.go, grpc/grpc-go#5358), so the
// cut call waits that second for its response header before the Spanner client retries it
// (docs/channels.md, "Connection churn").
//
// How: grpcgcp's channels are channel values, each standing for one gRPC SubConn at a time
// (its current connection); the pool's picker hands gRPC the current connection of the channel
// grpcgcp picked. Each connection that the server ends while it is READY (READY to IDLE; a
// connection this package shuts down ends in SHUTDOWN and does not count) gives a lifetime
// sample. The samples held agree (the longest at most rotationSpread times the shortest: gRPC
// servers add ±10% of jitter to the age; a sample that disagrees replaces them, and up to
// rotationSamples are kept), and their shortest is the server's age from the first sample on,
// so that the first connections of a GOAWAY storm are the only ones it can cut; every current
// connection that reaches half of it gets a replacement: a new
// SubConn with the same addresses and options and a StateListener of its own, created idle on
// gRPC's serializer when the connection's rotation is timed (gRPC calls a balancer there), and
// asked to connect by the rotation timer (Connect may be called from any goroutine). Once the replacement is READY it becomes the
// channel's current connection (grpcgcp sees no change: the channel stays READY), the picker
// is republished (a pick that raced the swap and found the old connection closing waits for a
// new picker), and the old connection is retired: it takes no new call, its calls in flight
// finish on it, and it is left to the server, whose GOAWAY ends it and confirms the age (a
// sample). A retired connection still open at rotationExpiry times the age disproves it: the
// samples are forgotten and the connection is shut down at the pool's next SubConn state
// change, on gRPC's serializer (it takes no call meanwhile). A replacement that fails, or a
// current connection that leaves READY first, ends the attempt; the next READY connection of
// the channel is timed again. Without an agreed age nothing rotates: connections are then
// exactly grpcgcp's.
//
// One event that ends several connections at once (a frontend restart, a network blip, an idle
// timeout of channels that connected together) is one sample, not one per connection: a sample
// within rotationTogether of its lifetime after the previous one is dropped. Such a sample
// (the pool's uptime, not an age) costs up to two replacements per channel (a replacement that
// becomes current is timed again before the first retired connection reaches its expiry): the
// first retired connection that the server does not end by its expiry disproves it. A
// replacement that fails to connect is tried again rotationRetry of the age later while its
// connection is still READY. An end followed by an attempt the endpoint never
// accepted (refused, unreachable, timed out), with no connection READY in between, was an
// outage: the samples taken since the last READY are undone (lifetimes.retract) and the
// rotations timed again (retimeLocked), and an endpoint that was down and came back keeps its
// MinSize connections, with no replacement beside them.
const (
	rotationSamples  = 3
	rotationSpread   = 1.25
	rotationExpiry   = 1.5
	rotationTogether = 0.1
	rotationRetry    = 0.1
)

// connRole is what one gRPC SubConn is to its channel.
type connRole int

const (
	roleCurrent connRole = iota // takes the channel's calls
	roleNext                    // the replacement being connected
	roleRetired                 // replaced: takes no new call, left to the server
)

// conn is one gRPC SubConn of a channel. Its fields other than sc and ch are guarded by the
// poolBalancer's mu.
type conn struct {
	sc      balancer.SubConn
	ch      *channel
	role    connRole
	state   connectivity.State
	readyAt time.Time   // when it last became READY; zero while it has not
	timer   clock.Timer // roleCurrent: its rotation; roleRetired: its expiry; nil if none
	gen     uint64      // counts the timers set and stopped: a callback of an older one does nothing
	// connecting: roleNext, asked to connect (rotate); a replacement is created idle, on
	// gRPC's serializer, when its connection's rotation is timed (prepare).
	connecting bool
	// expired: roleRetired, outlived its expiry (expire); shut down at the next state change.
	expired bool
	// epoch counts the times it became READY (under b.mu); answeredIn is the epoch in which
	// a call picked on it ended having received bytes from the server (its Done, without
	// b.mu). The connection carried a call (young.go) when the two are equal: one atomic
	// value each, so that a call of an earlier connection of the same SubConn, ending late,
	// marks nothing. Known when a call ends: a call still running when the server ends the
	// connection does not count yet. bornAt: when it last became READY, on the watch's youth
	// clock.
	epoch      atomic.Uint64
	answeredIn atomic.Uint64
	bornAt     time.Time
}

// carried reports whether a call on c's current connection was answered (epoch above). Only
// meaningful once c has been READY (epochs start at 1).
func (c *conn) carried() bool { return c.answeredIn.Load() == c.epoch.Load() }

// answered returns done (grpc_gcp's; nil if none) wrapped to record that the call received
// bytes from the server on the connection c has now. The picker wraps the calls of a
// connection only until one was answered, so a connection that serves costs the closure
// once, not per call.
func (c *conn) answered(done func(balancer.DoneInfo)) func(balancer.DoneInfo) {
	e := c.epoch.Load()
	return func(di balancer.DoneInfo) {
		if di.BytesReceived {
			c.answeredIn.Store(e)
		}
		if done != nil {
			done(di)
		}
	}
}

// channel is the SubConn grpcgcp sees: one of its channels, standing for the gRPC SubConn it
// currently sends calls to (cur). All of its methods are safe for concurrent use; they act on
// the current connection, and Shutdown also on a replacement being connected.
type channel struct {
	// SubConn is nil: it satisfies the interface's embedding requirement; every method is
	// channel's own.
	balancer.SubConn
	b   *poolBalancer
	cur atomic.Pointer[conn] // read by every pick; written under b.mu

	// Guarded by b.mu.
	addrs []resolver.Address
	opts  balancer.NewSubConnOptions
	next  *conn // the replacement, created idle, then connected at the rotation; nil if none
	shut  bool  // Shutdown was called: nothing is replaced any more
}

// current returns the gRPC SubConn that calls picked on the channel go to.
func (c *channel) current() balancer.SubConn { return c.cur.Load().sc }

// UpdateAddresses updates the addresses of the current connection and of a replacement being
// connected, and those of later replacements.
func (c *channel) UpdateAddresses(addrs []resolver.Address) {
	c.b.mu.Lock()
	c.addrs = addrs
	cur, next := c.cur.Load(), c.next
	c.b.mu.Unlock()
	//lint:ignore SA1019 grpc_gcp v1.6.0 updates its SubConns' addresses; a channel passes it on
	cur.sc.UpdateAddresses(addrs)
	if next != nil {
		//lint:ignore SA1019 as above
		next.sc.UpdateAddresses(addrs)
	}
}

// Connect starts connecting the current connection, if it is IDLE.
func (c *channel) Connect() { c.current().Connect() }

// GetOrBuildProducer is the current connection's.
func (c *channel) GetOrBuildProducer(pb balancer.ProducerBuilder) (balancer.Producer, func()) {
	return c.current().GetOrBuildProducer(pb)
}

// RegisterHealthListener registers l on the current connection.
func (c *channel) RegisterHealthListener(l func(balancer.SubConnState)) {
	c.current().RegisterHealthListener(l)
}

// Shutdown shuts down the current connection and a replacement being connected; retired
// connections are shut down at their expiry or when the server ends them.
func (c *channel) Shutdown() {
	c.b.mu.Lock()
	c.shut = true
	cur, next := c.cur.Load(), c.next
	c.next = nil
	stopTimer(cur)
	c.b.mu.Unlock()
	cur.sc.Shutdown()
	if next != nil {
		next.sc.Shutdown()
	}
}

// stopTimer stops c's timer, if any; a callback already started finds the generation moved.
// b.mu must be held.
func stopTimer(c *conn) {
	c.gen++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// setTimer sets c's timer to call f with the timer's generation after d. b.mu must be held.
func (b *poolBalancer) setTimer(c *conn, d time.Duration, f func(c *conn, gen uint64)) {
	stopTimer(c)
	gen := c.gen
	c.timer = b.clock.AfterFunc(d, func() { f(c, gen) })
}

// lifetimes are the last rotationSamples lifetimes of connections the server ended. Guarded
// by the poolBalancer's mu.
type lifetimes struct {
	samples [rotationSamples]time.Duration
	n       int       // samples held, up to rotationSamples
	next    int       // where the next sample goes
	lastAt  time.Time // when the last sample was taken; zero if none
	// fresh: samples were added since a connection of the pool last became READY (ready);
	// undo holds the samples from before the first of them (a sample that disagrees replaces
	// those held), which retract restores.
	fresh bool
	undo  struct {
		samples [rotationSamples]time.Duration
		n, next int
	}
}

// ready records that a connection of the pool became READY: the samples held are no
// outage's any more (retract).
func (l *lifetimes) ready() { l.fresh = false }

// add records a lifetime. One that does not agree with the samples held (see age) replaces
// them: the server's age changed, or the sample was no age (a reset); a wrong age is
// disproved by the first retired connection's expiry (expire), at the cost of up to two
// replacements per channel, or undone when the endpoint then refuses a connection (retract).
func (l *lifetimes) add(d time.Duration) {
	if !l.fresh {
		l.fresh = true
		l.undo.samples, l.undo.n, l.undo.next = l.samples, l.n, l.next
	}
	if l.n > 0 {
		lo, hi := d, d
		for _, s := range l.samples[:l.n] {
			lo, hi = min(lo, s), max(hi, s)
		}
		if float64(hi) > rotationSpread*float64(lo) {
			l.n, l.next = 0, 0
		}
	}
	l.samples[l.next] = d
	l.next = (l.next + 1) % rotationSamples
	l.n = min(l.n+1, rotationSamples)
}

// retract undoes the samples added since a connection of the pool last became READY (an
// endpoint that then refused a connection was down, and the connections it ended went with
// it) and reports whether there were any. lastAt stays, so that the outage's later ends are
// still one event with it (learnLocked) and are dropped too.
func (l *lifetimes) retract() bool {
	if !l.fresh {
		return false
	}
	l.fresh = false
	l.samples, l.n, l.next = l.undo.samples, l.undo.n, l.undo.next
	return true
}

// forget drops every sample.
func (l *lifetimes) forget() { *l = lifetimes{} }

// age returns the server's maximum connection age that the samples agree on: the shortest of
// the (up to rotationSamples) samples held, whose longest is at most rotationSpread times it
// (add keeps them so); 0 without a sample.
func (l *lifetimes) age() time.Duration {
	if l.n == 0 {
		return 0
	}
	lo, hi := l.samples[0], l.samples[0]
	for _, d := range l.samples[1:l.n] {
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo <= 0 || float64(hi) > rotationSpread*float64(lo) {
		return 0
	}
	return lo
}

// poolPicker hands gRPC the current connection of the channel grpcgcp's picker chose. It
// adds no lock to a pick, and no allocation once a call on the connection was answered
// (before that, its Done is wrapped to learn it: answered).
type poolPicker struct{ child balancer.Picker }

func (p *poolPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	r, err := p.child.Pick(info)
	if ch, ok := r.SubConn.(*channel); ok {
		c := ch.cur.Load()
		if !c.carried() {
			r.Done = c.answered(r.Done)
		}
		r.SubConn = c.sc
	}
	return r, err
}

// afterUnlock is what a state change leaves to do once mu is released: SubConns to shut
// down, current connections whose replacement is to be created (prepare), and whether to
// republish the picker. It runs on gRPC's serializer, where the change came from.
type afterUnlock struct {
	shutdown  []balancer.SubConn
	prepare   []*conn
	republish bool
	// young: the error of a connection that died young, to record in youngIn, its pool's
	// watch (young.go); nil if none.
	young   error
	youngIn *Watch
}

func (a *afterUnlock) shut(sc balancer.SubConn) { a.shutdown = append(a.shutdown, sc) }

func (a afterUnlock) run(b *poolBalancer) {
	for _, sc := range a.shutdown {
		sc.Shutdown()
	}
	for _, c := range a.prepare {
		b.prepare(c)
	}
	if a.young != nil {
		a.youngIn.record(KindClosed, a.young)
	}
	if a.republish {
		b.republish()
	}
}

// route applies a gRPC SubConn's state change to its channel and returns the SubConn to
// report the change to grpc_gcp as: the channel when sc is its current connection, nil when
// grpc_gcp must not see it (a replacement or a retired connection), sc itself when it is no
// channel's; and the state to report, s unless the connection died young (young.go).
func (b *poolBalancer) route(sc balancer.SubConn, s balancer.SubConnState) (balancer.SubConn, balancer.SubConnState, afterUnlock) {
	var a afterUnlock
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shutExpiredLocked(&a)
	c := b.conns[sc]
	if c == nil {
		return sc, s, a
	}
	now := b.clock.Now()
	prev, st := c.state, s.ConnectivityState
	c.state = st
	if st == connectivity.Shutdown {
		delete(b.conns, sc)
		stopTimer(c)
	}
	if c.expired && st != connectivity.Ready { // ended before its shutdown
		c.expired = false
		b.expired--
	}
	ch := c.ch
	switch c.role {
	case roleCurrent:
		switch {
		case st == connectivity.Ready:
			c.readyAt = now
			b.lives.ready()
			c.epoch.Add(1) // carried no longer: a new connection
			if b.watch != nil {
				c.bornAt = b.watch.youthClock.Now()
			}
			b.scheduleRotationLocked(c, now, &a)
		case prev == connectivity.Ready:
			stopTimer(c)
			if st == connectivity.Idle { // the server ended it (GOAWAY, or closed it)
				var young bool
				// A connection that died young tells nothing of the server's age: its
				// lifetime is the peer's refusal, and rotating on it would connect
				// replacements outside the young-death backoff.
				if s, young = b.endedLocked(c, true, s, &a); !young {
					b.learnLocked(now.Sub(c.readyAt), now, &a)
				}
			}
			if n := ch.next; n != nil { // too late: grpc_gcp reconnects the channel
				ch.next = nil
				a.shut(n.sc)
			}
		case prev == connectivity.Connecting && st == connectivity.Idle:
			// Established and ended before gRPC reported it READY.
			s, _ = b.endedLocked(c, false, s, &a)
		case st == connectivity.TransientFailure && neverAccepted(s.ConnectionError):
			// An attempt the endpoint never accepted (refused, unreachable, timed out,
			// unresolved): the endpoint is down. The connections it ended just before went
			// with it: their lifetime is the outage's, not the server's age.
			if before := b.lives.age(); b.lives.retract() && b.lives.age() != before {
				b.retimeLocked(now, &a)
			}
			// It refuses connections rather than ending them young, and gRPC's own
			// backoff paces it (young.go). A handshake that failed, a reset or a close
			// after the accept is what a peer that kills connections young may do too,
			// and ends nothing.
			if b.watch != nil {
				b.watch.youth.refused()
			}
		}
		return ch, s, a
	case roleNext:
		switch st {
		case connectivity.Ready:
			c.readyAt = now
			b.lives.ready()
			b.swapLocked(c, now, &a)
		case connectivity.TransientFailure, connectivity.Idle, connectivity.Shutdown:
			if ch.next == c {
				ch.next = nil
				// The connection it was to replace would meet the server's end as if
				// nothing rotated: try again soon while it is still READY.
				if cur := ch.cur.Load(); cur.state == connectivity.Ready && !ch.shut && !b.closed {
					if age := b.lives.age(); age > 0 {
						b.setTimer(cur, time.Duration(rotationRetry*float64(age)), b.rotate)
						a.prepare = append(a.prepare, cur)
					}
				}
			}
			if st != connectivity.Shutdown {
				a.shut(c.sc)
			}
		}
		return nil, s, a
	default: // roleRetired
		if prev == connectivity.Ready && st != connectivity.Ready {
			stopTimer(c)
			if st == connectivity.Idle { // the server ended it: the age is confirmed
				b.learnLocked(now.Sub(c.readyAt), now, &a)
			}
			if st != connectivity.Shutdown {
				a.shut(c.sc)
			}
		}
		return nil, s, a
	}
}

// swapLocked makes the replacement n, now READY, its channel's current connection and
// retires the connection it replaces. b.mu must be held.
func (b *poolBalancer) swapLocked(n *conn, now time.Time, a *afterUnlock) {
	ch := n.ch
	old := ch.cur.Load()
	if ch.next != n || ch.shut || old.state != connectivity.Ready {
		a.shut(n.sc) // no longer wanted
		return
	}
	ch.next = nil
	n.role = roleCurrent
	ch.cur.Store(n)
	b.scheduleRotationLocked(n, now, a)
	old.role = roleRetired
	stopTimer(old)
	a.republish = true
	age := b.lives.age()
	if age <= 0 || b.closed {
		a.shut(old.sc) // no age to confirm any more: its calls in flight finish, then it closes
		return
	}
	b.setTimer(old, old.readyAt.Add(time.Duration(rotationExpiry*float64(age))).Sub(now), b.expire)
}

// scheduleRotationLocked times the rotation of c, a current connection that is READY, at half
// the server's age, and leaves a's run to create its replacement (prepare); nothing when no
// age is agreed. b.mu must be held; a is the caller's, run once mu is released.
func (b *poolBalancer) scheduleRotationLocked(c *conn, now time.Time, a *afterUnlock) {
	stopTimer(c)
	age := b.lives.age()
	if age <= 0 || b.closed || c.ch.shut || c.ch.next != nil {
		return
	}
	b.setTimer(c, c.readyAt.Add(age/2).Sub(now), b.rotate)
	a.prepare = append(a.prepare, c)
}

// retimeLocked times the rotations again after the age changed other than by a new sample
// (an outage's undone: retract): each READY current connection's timer is stopped, a
// replacement created for it and not yet asked to connect is shut down, and the connection is
// timed at half the age now agreed (none without one). b.mu must be held; a is the caller's.
func (b *poolBalancer) retimeLocked(now time.Time, a *afterUnlock) {
	for _, c := range b.conns {
		if c.role != roleCurrent || c.state != connectivity.Ready {
			continue
		}
		stopTimer(c)
		if n := c.ch.next; n != nil && !n.connecting {
			c.ch.next = nil
			a.shut(n.sc)
		}
		b.scheduleRotationLocked(c, now, a)
	}
}

// prepare creates the replacement of c, idle, if c is still its channel's current connection,
// READY, with its rotation timed and no replacement yet: a SubConn with the channel's
// addresses and options and a StateListener of its own (subConnState). It runs on gRPC's
// serializer (afterUnlock, from a call of gRPC's into the balancer), where gRPC expects a
// balancer to create SubConns; the rotation timer only connects it (rotate).
func (b *poolBalancer) prepare(c *conn) {
	b.mu.Lock()
	ch := c.ch
	wanted := func() bool {
		return !b.closed && !ch.shut && ch.cur.Load() == c && c.state == connectivity.Ready && c.timer != nil && ch.next == nil
	}
	if !wanted() {
		b.mu.Unlock()
		return
	}
	addrs, opts := ch.addrs, ch.opts
	b.mu.Unlock()
	n := &conn{ch: ch, role: roleNext, state: connectivity.Idle}
	opts.StateListener = func(s balancer.SubConnState) { b.subConnState(n.sc, s) }
	//lint:ignore SA1019 grpc_gcp's channel addresses and options, as its own channels are created
	sc, err := b.cc.NewSubConn(addrs, opts)
	if err != nil {
		return // gRPC is closing the balancer
	}
	b.mu.Lock()
	n.sc = sc
	if !wanted() {
		b.mu.Unlock() // c changed meanwhile: no longer wanted
		sc.Shutdown()
		return
	}
	b.conns[sc] = n
	ch.next = n
	b.mu.Unlock()
}

// rotate starts connecting the replacement of c, if c is still its channel's current
// connection, READY, its timer is of generation gen, an age is still agreed, and the
// replacement was created (prepare) and not yet asked to connect. It runs on the rotation
// timer's goroutine and creates and shuts down nothing: SubConn.Connect may be called from
// any goroutine (gRPC's pick_first calls it from its picker).
func (b *poolBalancer) rotate(c *conn, gen uint64) {
	b.mu.Lock()
	ch := c.ch
	n := ch.next
	if c.gen == gen {
		c.timer = nil // this timer has fired: a later age may time c again (learnLocked)
	}
	if c.gen != gen || b.closed || ch.shut || ch.cur.Load() != c || c.state != connectivity.Ready ||
		n == nil || n.connecting || b.lives.age() <= 0 {
		b.mu.Unlock()
		return
	}
	n.connecting = true
	b.mu.Unlock()
	n.sc.Connect() // gRPC reports no state before this, so n is registered first
}

// expire marks a retired connection that the server has not ended by its expiry: the age it
// was retired by is disproved, and forgotten. The connection is shut down at the next state
// change of any of the pool's SubConns (route, on gRPC's serializer), or when the pool
// closes; it takes no call meanwhile. It runs on the expiry timer's goroutine; gen is the
// timer's generation.
func (b *poolBalancer) expire(c *conn, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.gen != gen || c.role != roleRetired || c.state != connectivity.Ready {
		return
	}
	c.timer = nil
	c.expired = true
	b.expired++
	b.lives.forget()
}

// shutExpiredLocked leaves a's run to shut down the retired connections that expired.
// b.mu must be held.
func (b *poolBalancer) shutExpiredLocked(a *afterUnlock) {
	if b.expired == 0 {
		return
	}
	for _, c := range b.conns {
		if c.expired {
			c.expired = false
			a.shut(c.sc)
		}
	}
	b.expired = 0
}

// learnLocked records the lifetime d of a connection the server ended at now, unless the
// previous sample was taken within rotationTogether of d before (the same event); when that
// makes an age agreed, the READY current connections are timed (a: scheduleRotationLocked).
// b.mu must be held.
func (b *poolBalancer) learnLocked(d time.Duration, now time.Time, a *afterUnlock) {
	if d <= 0 {
		return
	}
	if last := b.lives.lastAt; !last.IsZero() && now.Sub(last) < time.Duration(rotationTogether*float64(d)) {
		return
	}
	b.lives.lastAt = now
	had := b.lives.age() > 0
	b.lives.add(d)
	if had || b.lives.age() <= 0 {
		return
	}
	for _, c := range b.conns {
		if c.role == roleCurrent && c.state == connectivity.Ready && c.timer == nil {
			b.scheduleRotationLocked(c, now, a)
		}
	}
}
