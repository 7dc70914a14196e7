package pool

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
)

// Connections that die young.
//
// A peer that accepts each connection and ends it at once (an HTTP/2 GOAWAY right after its
// SETTINGS: a proxy or load balancer being drained) makes no connection attempt fail: gRPC
// reports the connection as established and then IDLE, with no error, and resets its own
// reconnect backoff, because the connection succeeded (grpc-go v1.85.0 clientconn.go,
// createTransport). grpcgcp reconnects an IDLE channel at once (grpcgcp v1.6.0
// gcp_balancer.go, UpdateSubConnState), so such a peer got thousands of connections a
// second, and the endpoint flapped between available and not as fast.
//
// So a pool judges each of its connections when it ends: one that ends before it carried a
// call (no call or probe sent on it ended having received a byte from the server: a call
// picked on it and refused by its GOAWAY does not count, nor yet one still running when the
// server ends it) and within youngLife of becoming READY, or before it
// was READY at all, died young. Its channel is then shown to grpcgcp as TRANSIENT_FAILURE,
// and connected again only after a wait that grows with each round of young deaths as gRPC's
// reconnect backoff does (gRFC A6, with the pool's backoff.Config: BaseDelay, Multiplier,
// Jitter, MaxDelay, which Settings.ReconnectMaxDelay bounds); the connections of a pool that
// die within one wait are one round. A connection that carried a call, or lived youngLife,
// ends the backoff: it is replaced at once, as before (a server's maximum connection age, a
// GOAWAY storm of connections that serve, are no hostile peer).
//
// While a pool is in backoff (strikes > 0), its monitor does not report it available when a
// connection becomes READY until the pool has stayed READY for youngLife (the dwell), so that
// no group switches to (or back to) an endpoint whose connections die at once; the dwell's
// end resets the backoff. So does an attempt the endpoint never accepted (refused,
// unreachable, timed out): an endpoint that goes down kills connections that may be young,
// but it then refuses new ones, which gRPC's backoff paces, and once back it is available
// without a dwell.
//
// grpc-go's own implementation of the backoff is in an internal package; the formula here is
// gRFC A6's, on the caller's configuration.

// youngLife is how long a connection must live, when it carries no call, not to have died
// young; it is also the dwell of a pool in backoff.
const youngLife = 500 * time.Millisecond

// youth is the young-death backoff of one pool, kept in its Watch: the balancer reports
// deaths, the monitor asks for the dwell and reports a connection that lived. Safe for
// concurrent use; a nil *youth (a pool without a watch) never backs off.
type youth struct {
	mu      sync.Mutex // guards the fields below
	cfg     backoff.Config
	strikes int       // rounds of young deaths since a connection last lived
	until   time.Time // when the current round's wait ends
	deaths  int64     // every young death since the pool was dialed
}

// setBackoff sets the backoff's configuration; before the pool is dialed.
func (y *youth) setBackoff(cfg backoff.Config) {
	y.mu.Lock()
	y.cfg = cfg
	y.mu.Unlock()
}

// died records a connection that died young at now and returns how long to wait before
// connecting its channel again: until the end of the current round, or of a new round whose
// wait is gRPC's backoff for the next strike.
func (y *youth) died(now time.Time) time.Duration {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.deaths++
	if now.Before(y.until) {
		return y.until.Sub(now)
	}
	y.strikes++
	d := y.delayLocked(y.strikes)
	y.until = now.Add(d)
	return d
}

// delayLocked is gRFC A6's wait before the strikes-th retry: BaseDelay × Multiplier^(n-1),
// at most MaxDelay, then jittered by ±Jitter. Zero fields take backoff.DefaultConfig's.
// y.mu must be held.
func (y *youth) delayLocked(n int) time.Duration {
	c := y.cfg
	def := backoff.DefaultConfig
	if c.BaseDelay <= 0 {
		c.BaseDelay = def.BaseDelay
	}
	if c.Multiplier < 1 {
		c.Multiplier = def.Multiplier
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = def.MaxDelay
	}
	if c.Jitter < 0 || c.Jitter > 1 {
		c.Jitter = def.Jitter
	}
	d := float64(c.BaseDelay)
	for i := 1; i < n && d < float64(c.MaxDelay); i++ {
		d *= c.Multiplier
	}
	d = min(d, float64(c.MaxDelay))
	d *= 1 + c.Jitter*(2*rand.Float64()-1)
	return time.Duration(max(d, 0))
}

// lived ends the backoff: a connection carried a call or lived youngLife.
func (y *youth) lived() {
	y.mu.Lock()
	y.strikes, y.until = 0, time.Time{}
	y.mu.Unlock()
}

// refused ends the backoff as lived does, for a connection attempt the endpoint never
// accepted (neverAccepted): an endpoint that refuses connections (down, unreachable) is paced
// by gRPC's own reconnect backoff, and connections ended by its going down, young as they may
// be, are no reason for a dwell once it is back.
func (y *youth) refused() { y.lived() }

// neverAccepted reports whether err, a failed attempt's connection error, says the endpoint
// never accepted the connection: refused, unreachable, timed out or unresolved
// (ClassifyConnError). A reset, a close or a failed handshake after the accept is not: a peer
// that kills connections young may answer so too.
func neverAccepted(err error) bool {
	switch ClassifyConnError(err) {
	case KindRefused, KindUnreachable, KindTimeout, KindDNS:
		return true
	}
	return false
}

// inBackoff reports whether connections died young since one last lived: a READY pool is
// then available only after the dwell.
func (y *youth) inBackoff() bool {
	if y == nil {
		return false
	}
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.strikes > 0
}

// YoungStatus is what a pool's young-death backoff holds (youth.status, for its tests).
type YoungStatus struct {
	// Deaths counts the connections that died young since the pool was dialed.
	Deaths int64
	// Strikes counts the rounds of young deaths since a connection last lived; 0: no backoff.
	Strikes int
	// Until is when the current round's wait ends; zero without backoff.
	Until time.Time
}

func (y *youth) status() YoungStatus {
	if y == nil {
		return YoungStatus{}
	}
	y.mu.Lock()
	defer y.mu.Unlock()
	return YoungStatus{Deaths: y.deaths, Strikes: y.strikes, Until: y.until}
}

// diedYoung is the connection error recorded for a connection that died young.
func diedYoung(life time.Duration, ready bool, wait time.Duration) error {
	if !ready {
		return fmt.Errorf("a connection ended (GOAWAY, reset or close) as soon as it was established, before it carried a call: reconnecting in %v", wait.Round(time.Millisecond))
	}
	return fmt.Errorf("a connection ended (GOAWAY, reset or close) %v after it became ready, before it carried a call: reconnecting in %v", life.Round(time.Millisecond), wait.Round(time.Millisecond))
}

// endedLocked judges c, a channel's current connection that the server ended (it went IDLE;
// wasReady: from READY, else from CONNECTING), and returns the state to report to grpc_gcp:
// s, for a connection that carried a call or lived youngLife (the backoff ends; grpc_gcp
// reconnects at once), or TRANSIENT_FAILURE for one that died young, whose channel the
// backoff's timer connects again (reconnect); young reports the latter. Times are the watch's
// youth clock. b.mu must be held; a's run records the error.
func (b *poolBalancer) endedLocked(c *conn, wasReady bool, s balancer.SubConnState, a *afterUnlock) (_ balancer.SubConnState, young bool) {
	w := b.watch
	if w == nil || b.closed || c.ch.shut {
		return s, false
	}
	now := w.youthClock.Now()
	var life time.Duration
	if wasReady {
		life = now.Sub(c.bornAt)
		if c.carried() || life >= youngLife {
			w.youth.lived()
			return s, false
		}
	}
	wait := w.youth.died(now)
	stopTimer(c)
	gen := c.gen
	c.timer = w.youthClock.AfterFunc(wait, func() { b.reconnect(c, gen) })
	a.young, a.youngIn = diedYoung(life, wasReady, wait), w
	return balancer.SubConnState{ConnectivityState: connectivity.TransientFailure, ConnectionError: a.young}, true
}

// reconnect connects c again at the end of its young-death wait, if it is still its
// channel's current connection, IDLE, and the timer of generation gen. It runs on the timer's
// goroutine: SubConn.Connect may be called from any goroutine.
func (b *poolBalancer) reconnect(c *conn, gen uint64) {
	b.mu.Lock()
	ok := c.gen == gen && !b.closed && !c.ch.shut && c.role == roleCurrent && c.ch.cur.Load() == c &&
		c.state == connectivity.Idle
	if ok {
		c.timer = nil
	}
	b.mu.Unlock()
	if ok {
		c.sc.Connect()
	}
}

// latencyEndedLocked judges the latency connection lc, which went IDLE at now from prev, as
// endedLocked judges a channel's, and returns how long to wait before connecting it again (0:
// at once). A latency connection carries only probes, so only its life counts. b.mu must be
// held.
func (b *poolBalancer) latencyEndedLocked(lc *latencyConn, prev connectivity.State, now time.Time) time.Duration {
	w := b.watch
	if w == nil || b.closed || (prev != connectivity.Connecting && prev != connectivity.Ready) ||
		(prev == connectivity.Ready && now.Sub(lc.readyAt) >= youngLife) {
		return 0
	}
	return w.youth.died(now)
}

// stopLatencyTimer stops lc's reconnect timer, if any. b.mu must be held.
func stopLatencyTimer(lc *latencyConn) {
	lc.gen++
	if lc.timer != nil {
		lc.timer.Stop()
		lc.timer = nil
	}
}
