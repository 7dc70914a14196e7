package pool

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/backoff"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// Where a pool's connection errors come from.
//
// gRPC reports why a connection attempt failed (refused, timeout, TLS, ...) only to the
// channel's load balancer, as SubConnState.ConnectionError, and a name resolution error only
// to the resolver's ClientConn: a call sees neither (grpcgcp's picker fails calls with a
// generic "all SubConns are in TransientFailure"), and a standby gets no calls anyway. So
// each pool is dialed with this package's load-balancing policy, spannerme_pool, a thin
// wrapper around grpcgcp's grpc_gcp that records every channel's connection errors and
// every ready connection that closes (and guards grpc_gcp against an empty address list,
// balancer.go, and rotates its connections, rotate.go), and, when the pool is dialed by its
// owner, with a DNS resolver wrapper that
// records resolution errors (resolver.go). Both feed the pool's Watch. This works whatever
// the credentials (TLS errors included), dialer or DialFunc, as long as the dial options are
// applied; a caller's dial option that replaces the default service config
// (grpc.WithDefaultServiceConfig) turns the recording off for that pool.

// Watch records one pool's connection errors and connectivity changes, and keeps what is
// needed to report each transition of the endpoint once. The pool's load balancer and name
// resolver feed it on gRPC's goroutines; the pool's monitor feeds it too. Safe for
// concurrent use.
type Watch struct {
	id       uint64
	endpoint string
	clock    clock.Clock
	obs      Observer

	last    atomic.Pointer[ConnError]
	changed atomic.Pointer[time.Time] // when the pool's connectivity state last changed
	// latency is the pool's latency connection while it is READY (latencyconn.go); nil
	// otherwise.
	latency atomic.Pointer[latencyConnRef]
	// youth is the backoff of connections that die young (young.go); youthClock times it:
	// the real clock (tests set it), like gRPC's own reconnect backoff, whatever clk is:
	// connections live in real time.
	youth      youth
	youthClock clock.Clock

	mu sync.Mutex // guards the fields below: the endpoint's transitions as reported
	// up: the pool was last reported available.
	up bool
	// reported: the kinds of connection error already reported since the endpoint was last
	// up, so that retries failing the same ways (by turns, too) report nothing more.
	reported map[ConnErrorKind]bool
	// upAt, downAt: when the pool last became available, and unavailable.
	upAt, downAt time.Time
}

// watches maps a Watch's id to it, for the pools' load balancers: gRPC builds a balancer
// from a service config (JSON), which can carry only the id.
var (
	watches  sync.Map // uint64 -> *Watch
	watchIDs atomic.Uint64
)

// NewWatch registers a watch for endpoint's next pool, reporting to obs (required) on
// clk (nil: the real clock). The pool created with it releases it when closed; release it
// with Release if the dial fails.
func NewWatch(endpoint string, clk clock.Clock, obs Observer) *Watch {
	if clk == nil {
		clk = clock.Real
	}
	w := &Watch{id: watchIDs.Add(1), endpoint: endpoint, clock: clk, obs: obs, youthClock: clock.Real}
	t := clk.Now()
	w.changed.Store(&t)
	watches.Store(w.id, w)
	return w
}

// SetBackoff sets the reconnect backoff of the pool's connections that die young (young.go):
// gRPC's, as given to the pool's dial (grpc.ConnectParams.Backoff); zero fields take
// backoff.DefaultConfig's. Call it before the pool is dialed.
func (w *Watch) SetBackoff(cfg backoff.Config) { w.youth.setBackoff(cfg) }

// Release forgets the watch: a balancer built later for its id records nothing. Idempotent.
func (w *Watch) Release() { w.release() }

func (w *Watch) release() { watches.Delete(w.id) }

// record keeps err as the pool's last connection error and, while the endpoint is not
// available, reports it once per kind. A nil w is a no-op.
func (w *Watch) record(kind ConnErrorKind, err error) {
	if w == nil || err == nil {
		return
	}
	e := &ConnError{Kind: kind, Message: bounded.Text(err.Error(), bounded.ServerText), At: w.clock.Now()}
	w.last.Store(e)
	w.mu.Lock()
	report := !w.up && !w.reported[kind]
	if report {
		w.noteReportedLocked(kind)
	}
	how := AttemptFailed
	if w.upAt.IsZero() {
		how = NeverConnected
	}
	w.mu.Unlock()
	if report && w.obs != nil {
		w.obs.Unreachable(*e, how)
	}
}

// noteReportedLocked records that a connection error of kind was reported. w.mu must be
// held.
func (w *Watch) noteReportedLocked(kind ConnErrorKind) {
	if w.reported == nil {
		w.reported = make(map[ConnErrorKind]bool)
	}
	w.reported[kind] = true
}

// availability reports the endpoint's transition after the pool's monitor saw a change of
// its connection (ready or not), or its first failed connection attempt.
func (w *Watch) availability(ready bool) {
	now := w.clock.Now()
	w.mu.Lock()
	switch {
	case ready && !w.up:
		w.up, w.upAt, w.reported = true, now, nil
		downFor := time.Duration(-1)
		if !w.downAt.IsZero() {
			downFor = now.Sub(w.downAt)
		}
		w.mu.Unlock()
		w.obs.Up(now, downFor)
	case !ready && w.up:
		w.up, w.downAt = false, now
		reason := w.last.Load()
		if reason != nil && reason.At.Before(w.upAt) {
			reason = nil // older than the last connection: not why it went down
		}
		r := ConnError{Kind: KindUnknown, Message: "no connection error was reported", At: now}
		if reason != nil {
			r = *reason
		}
		w.reported = nil
		w.noteReportedLocked(r.Kind)
		w.mu.Unlock()
		w.obs.Down(now, r)
	case !ready && len(w.reported) == 0:
		// Its first connection attempt failed and no error was recorded.
		w.noteReportedLocked(KindUnknown)
		w.mu.Unlock()
		w.obs.Unreachable(ConnError{Kind: KindUnknown, Message: "no connection error was reported", At: now}, FirstAttemptFailed)
	default:
		w.mu.Unlock()
	}
}

// lastError returns a copy of the last recorded error, nil if none.
func (w *Watch) lastError() *ConnError {
	if e := w.last.Load(); e != nil {
		c := *e
		return &c
	}
	return nil
}

// errorSinceUp returns the last recorded error if it was recorded after the pool was last
// available (or it never was); ok is false otherwise.
func (w *Watch) errorSinceUp() (e ConnError, ok bool) {
	last := w.last.Load()
	if last == nil {
		return ConnError{}, false
	}
	w.mu.Lock()
	upAt := w.upAt
	w.mu.Unlock()
	if last.At.Before(upAt) {
		return ConnError{}, false
	}
	return *last, true
}

// stateChanged notes that the pool's connectivity state changed now.
func (w *Watch) stateChanged() {
	t := w.clock.Now()
	w.changed.Store(&t)
}

// since returns when the pool's connectivity state last changed.
func (w *Watch) since() time.Time { return *w.changed.Load() }
