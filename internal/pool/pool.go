// Package pool is one endpoint's channel pool: a grpcgcp ClientConn and everything kept per
// pool: its connectivity monitor, the watch of its connection errors (through a
// load-balancing policy wrapped around grpcgcp's and a DNS resolver wrapper), the rotation of
// its connections before a server that ends them at a fixed age does (rotate.go, in the same
// policy), its in-flight calls and streams, the outcomes of those calls and the probes of its
// endpoint's health.
//
// A pool reports what it sees through the Observer it is created with. It knows nothing of
// groups, routing, logs or metrics: the GCPMultiEndpoint (package spannerme) owns the pools,
// turns their reports into availability for its groups, log lines and metrics, and converts
// their status into its public types.
package pool

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// retiringBit marks a pool's ref count once the pool is retired: no new call may acquire it.
const retiringBit = int64(1) << 62

// Observer receives what one pool sees. Its methods are called on gRPC's goroutines, the
// pool's monitor, the health detector's timers and probes, and the goroutines of the calls
// themselves (CallEnd; Health when a call's failure ejects the endpoint), with no lock of the
// pool held. They must not block.
type Observer interface {
	// Availability is called after each change of the pool's availability (Available), and
	// after its first connection attempt failed.
	Availability(p *Pool)
	// StateChanged is called after each change of the pool's connectivity state.
	StateChanged(p *Pool)
	// Unreachable reports a connection error while the endpoint is not available, once per
	// kind of error until the endpoint is available again (a standby that keeps being
	// refused is reported once, not once per retry). It may come before the pool exists
	// (from the dial), so it names no pool: an Observer serves one pool.
	Unreachable(e ConnError, how Unreachability)
	// Up reports that the endpoint became available at at, after being down for downFor
	// (negative when it had never been up).
	Up(at time.Time, downFor time.Duration)
	// Down reports that the endpoint, which was available, is not since at: reason is the
	// connection error that explains it (Kind KindUnknown when none was recorded since it
	// came up).
	Down(at time.Time, reason ConnError)
	// Health reports an ejection or readmission of the endpoint by its health detector.
	Health(p *Pool, ev health.Event)
	// Latency reports that the pool's latency (Pool.Latency) may have changed: a latency
	// probe ended with a sample, or the samples were dropped when the pool lost its ready
	// connection. Called on the latency probes' timer goroutine, once per probe at most.
	Latency(p *Pool)
	// CallEnd reports the end of a call that the caller measured (CallInfo.Start not zero),
	// with its error (nil: OK).
	CallEnd(ctx context.Context, group string, start time.Time, err error)
}

// Unreachability says which way an endpoint is unreachable, in Observer.Unreachable.
type Unreachability int

const (
	// NeverConnected: the endpoint has never been available.
	NeverConnected Unreachability = iota + 1
	// AttemptFailed: a connection attempt failed after the endpoint had been available.
	AttemptFailed
	// FirstAttemptFailed: the first connection attempt failed and no error was recorded (a
	// caller's dial options replaced the pool's load-balancing policy).
	FirstAttemptFailed
)

// Options configures a pool.
type Options struct {
	// Observer receives the pool's reports; it must be the one its Watch reports to.
	// Required.
	Observer Observer
	// Clock is the time source of the health detector and of the reports' times. Nil means
	// the real clock.
	Clock clock.Clock
	// Watch is the watch created for this pool before its dial (NewWatch), whose id its dial
	// options carry; nil for none. The pool releases it when it is closed.
	Watch *Watch
	// Health, if not nil, turns on health from call outcomes.
	Health *HealthOptions
	// LazyStreams: the pool's dial options include grpcgcp's stream interceptor, which
	// creates the gRPC stream at the first SendMsg, so a stream's context is watched from
	// its start (gRPC does not report the end of a stream it never created).
	LazyStreams bool
	// DecorateError, if not nil, is applied to a stream's errors when its CallInfo.Tag is
	// not empty (the Spanner client's request ID).
	DecorateError func(err error, tag string) error
	// CallEnded, if not nil, is called once at the end of each stream with its CallInfo
	// (Tag and Class), its method and its error (nil for a stream that ended well; the
	// context's status for one the caller abandoned), on the goroutine that ends it. It must
	// not block.
	CallEnded func(p *Pool, call CallInfo, method string, err error)
}

// HealthOptions configures health from call outcomes of a pool.
type HealthOptions struct {
	// Config holds the detector's thresholds (zero fields take health.Defaults).
	Config health.Config
	// ProbeTimeout is the deadline of one probe; it must be positive.
	ProbeTimeout time.Duration
	// Probe sends one probe through conn; nil means "no probe" (an ejected endpoint is then
	// never readmitted by a probe).
	Probe func(ctx context.Context, conn grpc.ClientConnInterface) error
	// OverloadIsFailure makes RESOURCE_EXHAUSTED a failure.
	OverloadIsFailure bool
	// Latency, if not nil, turns on latency probes (latency.go); they stop with the
	// health detector.
	Latency *LatencyOptions
}

// Pool is one endpoint's grpcgcp channel pool, its connectivity monitor and its in-flight
// call count. Its identity (the pointer) tells its reports apart from those of an older pool
// of the same endpoint. All methods are safe for concurrent use.
type Pool struct {
	endpoint      string
	conn          *grpc.ClientConn
	obs           Observer
	clock         clock.Clock
	watch         *Watch
	lazyStreams   bool
	decorateError func(error, string) error
	callEnded     func(*Pool, CallInfo, string, error)

	// ref counts in-flight calls; retiringBit is added once, when the pool is retired.
	ref   atomic.Int64
	state atomic.Int32 // last connectivity.State seen by the monitor
	// ready is the availability the monitor last saw; every change is followed by a report.
	ready atomic.Bool
	// settled: a connection attempt has ended (READY or TRANSIENT_FAILURE) at least once, so
	// a pool that is not ready is known to be down rather than still connecting.
	settled atomic.Bool

	drained     chan struct{} // closed when retired and no call is in flight
	drainedOnce sync.Once
	closeOnce   sync.Once

	monitorMu   sync.Mutex // guards stopMonitor
	stopMonitor context.CancelFunc
	monitorDone chan struct{}

	// Health from call outcomes (outcome.go, probe.go); health is nil when it is disabled.
	// Set by New, never changed after.
	health            *health.Detector
	overloadIsFailure bool // HealthOptions.OverloadIsFailure
	probes            prober
	latency           *latencyProber // nil: latency probes are off
}

// New returns the pool of endpoint over conn, with its health detector started (when
// o.Health is set). Its monitor starts with StartMonitor.
func New(endpoint string, conn *grpc.ClientConn, o Options) *Pool {
	p := &Pool{endpoint: endpoint, conn: conn, obs: o.Observer, clock: o.Clock, watch: o.Watch,
		lazyStreams: o.LazyStreams, decorateError: o.DecorateError, callEnded: o.CallEnded,
		drained: make(chan struct{}), monitorDone: make(chan struct{})}
	if p.clock == nil {
		p.clock = clock.Real
	}
	p.state.Store(int32(conn.GetState()))
	if o.Health != nil {
		p.startHealth(*o.Health)
	}
	return p
}

// Endpoint returns the pool's endpoint.
func (p *Pool) Endpoint() string { return p.endpoint }

// Observer returns the Observer the pool was created with.
func (p *Pool) Observer() Observer { return p.obs }

// Conn returns the pool's connection.
func (p *Pool) Conn() *grpc.ClientConn { return p.conn }

// State returns the pool's connectivity state as the monitor last saw it.
func (p *Pool) State() connectivity.State { return connectivity.State(p.state.Load()) }

// Settled reports whether a connection attempt has ended at least once: a pool that is not
// ready is then known to be down rather than still connecting.
func (p *Pool) Settled() bool { return p.settled.Load() }

// DownCause returns why the pool has no ready connection: its last connection error, when
// the pool is not ready, a connection attempt has ended (Settled), and the error was
// recorded after the pool was last ready. Otherwise (ready, still in its first attempt, no
// error recorded since it was last ready, or no watch) ok is false. It does not allocate;
// it takes the watch's lock briefly, so callers use it off the fast path (a pool that is
// not ready).
func (p *Pool) DownCause() (e ConnError, ok bool) {
	if p.watch == nil || p.ready.Load() || !p.settled.Load() {
		return ConnError{}, false
	}
	return p.watch.errorSinceUp()
}

// Available reports whether groups may use the pool: it has a ready connection and is not
// ejected by health from call outcomes.
func (p *Pool) Available() bool {
	return p.ready.Load() && (p.health == nil || !p.health.Ejected())
}

// Connected reports whether the pool has a ready connection.
func (p *Pool) Connected() bool { return p.ready.Load() }

// Ejected reports whether health from call outcomes has ejected the endpoint; false without
// health.
func (p *Pool) Ejected() bool { return p.health != nil && p.health.Ejected() }

// Confirm probes the endpoint's calls of class c at once, because another endpoint of a group
// that lists it was ejected for them (health.Detector.Confirm); nothing without health.
func (p *Pool) Confirm(c health.Class) {
	if p.health != nil {
		p.health.Confirm(c)
	}
}

// Acquire registers a call. It fails once the pool is retired; the caller then picks again
// from a newer routing.
func (p *Pool) Acquire() bool {
	if p.ref.Add(1)&retiringBit != 0 {
		p.Release()
		return false
	}
	return true
}

// Release ends a call registered by Acquire.
func (p *Pool) Release() {
	if p.ref.Add(-1) == retiringBit {
		p.drainedOnce.Do(func() { close(p.drained) })
	}
}

// Retire stops new calls and the health detector (its probes are cancelled, not waited
// for); the pool is drained when the in-flight calls have finished (DrainThenClose).
func (p *Pool) Retire() {
	if p.ref.Add(retiringBit) == retiringBit {
		p.drainedOnce.Do(func() { close(p.drained) })
	}
	p.haltHealth()
}

// InFlight returns the number of calls in flight.
func (p *Pool) InFlight() int64 { return p.ref.Load() &^ retiringBit }

// Retired reports whether Retire was called.
func (p *Pool) Retired() bool { return p.ref.Load()&retiringBit != 0 }

// Close stops the monitor and waits for it, stops the health detector and waits for its
// probes, and closes the connection (its calls in flight end with CANCELED). Idempotent; it
// returns the connection's Close error.
func (p *Pool) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.monitorMu.Lock()
		stop := p.stopMonitor
		p.stopMonitor = func() {} // a later StartMonitor starts nothing
		p.monitorMu.Unlock()
		if stop != nil {
			stop()
			<-p.monitorDone
		}
		p.stopHealth()
		err = p.conn.Close()
		if p.watch != nil {
			p.watch.release()
		}
	})
	return err
}

// DrainThenClose closes a retired pool once its calls are done, after timeout at the latest,
// or at once when stop is closed. It reports whether the drain timed out.
func (p *Pool) DrainThenClose(timeout time.Duration, stop <-chan struct{}) (timedOut bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.drained:
	case <-t.C:
		timedOut = true
	case <-stop:
	}
	p.Close()
	return timedOut
}

// Status is a point-in-time view of a pool.
type Status struct {
	Endpoint     string
	Connectivity connectivity.State
	// Since is when the connectivity state last changed (zero without a watch).
	Since time.Time
	// LastError is the last recorded connection error; nil if none.
	LastError *ConnError
	InFlight  int64
	Retired   bool
	// HealthOn reports that health from call outcomes is on and the pool is not retired;
	// Health is then the detector's status.
	HealthOn bool
	Health   health.Status
}

// Status returns the pool's status.
func (p *Pool) Status() Status {
	s := Status{Endpoint: p.endpoint, Connectivity: p.State(), InFlight: p.InFlight(), Retired: p.Retired()}
	if w := p.watch; w != nil {
		s.Since, s.LastError = w.since(), w.lastError()
	}
	if p.health != nil && !s.Retired {
		s.HealthOn, s.Health = true, p.health.Status()
	}
	return s
}
