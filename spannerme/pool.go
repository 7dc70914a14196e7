package spannerme

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// retiringBit marks a pool's ref count once the pool is retired: no new call may acquire it.
const retiringBit = int64(1) << 62

// pool is one endpoint's grpcgcp channel pool, its connectivity monitor and its in-flight
// call count. A pool belongs to one GCPMultiEndpoint; groups find it through the routing
// snapshot, and the pool's identity (its pointer) tells its notifications apart from those of
// an older pool of the same endpoint.
type pool struct {
	endpoint string
	conn     *grpc.ClientConn

	// ref counts in-flight calls; retiringBit is added once, when the pool is retired.
	ref   atomic.Int64
	state atomic.Int32 // last connectivity.State seen by the monitor
	// ready is the availability the monitor last saw; every change is followed by a publish.
	ready atomic.Bool
	// settled: a connection attempt has ended (READY or TRANSIENT_FAILURE) at least once, so
	// a pool that is not ready is known to be down rather than still connecting.
	settled atomic.Bool
	// publishMu serializes the reports of this pool's availability to the groups (the
	// monitor's and an update's), so they land in order. It is held while the state machines
	// run, and so while a switch is counted on the meter provider's switches counter (an
	// OpenTelemetry instrument's Add, which must not block); never across a gRPC call, a
	// dial, or OnSwitch, OnHealth or the Logger (switch events are queued for them).
	publishMu sync.Mutex

	drained     chan struct{} // closed when retired and no call is in flight
	drainedOnce sync.Once
	closeOnce   sync.Once

	stopMonitor context.CancelFunc
	monitorDone chan struct{}

	// Health from call outcomes (health.go); health is nil when it is disabled. Set before
	// the pool is published, never changed after.
	health            *health.Detector
	overloadIsFailure bool
	probeCtx          context.Context // cancelled by stopHealth
	cancelProbes      context.CancelFunc
	probeMu           sync.Mutex // guards probesStopped and the Add of probes
	probesStopped     bool
	probes            sync.WaitGroup // probe goroutines
	// watch records the pool's connection errors and state changes (connwatch.go); nil for
	// a pool made without one.
	watch *connWatch
	// attrs holds the metric attributes of the pool's calls per group (metrics.go), built on
	// first use; attrsMu serializes the building.
	attrs   atomic.Pointer[map[string]*callAttrs]
	attrsMu sync.Mutex
}

func newPool(endpoint string, conn *grpc.ClientConn) *pool {
	p := &pool{endpoint: endpoint, conn: conn, drained: make(chan struct{}), monitorDone: make(chan struct{})}
	p.state.Store(int32(conn.GetState()))
	return p
}

// acquire registers a call. It fails once the pool is retired; the caller then picks again
// from a newer snapshot.
func (p *pool) acquire() bool {
	if p.ref.Add(1)&retiringBit != 0 {
		p.release()
		return false
	}
	return true
}

// release ends a call registered by acquire.
func (p *pool) release() {
	if p.ref.Add(-1) == retiringBit {
		p.drainedOnce.Do(func() { close(p.drained) })
	}
}

// retire stops new calls; drained is closed when the in-flight ones have finished.
func (p *pool) retire() {
	if p.ref.Add(retiringBit) == retiringBit {
		p.drainedOnce.Do(func() { close(p.drained) })
	}
}

// inFlight returns the number of calls in flight.
func (p *pool) inFlight() int64 { return p.ref.Load() &^ retiringBit }

func (p *pool) retired() bool { return p.ref.Load()&retiringBit != 0 }

// close stops the monitor, waits for it, and closes the connection. Idempotent.
func (p *pool) close() error {
	var err error
	p.closeOnce.Do(func() {
		if p.stopMonitor != nil {
			p.stopMonitor()
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

// monitor follows the pool's connectivity state until ctx is done, calling changed whenever
// the state changes and publish whenever the pool's availability changes. READY is
// available; CONNECTING, TRANSIENT_FAILURE and SHUTDOWN are not. IDLE is no failure: the
// channel went idle (no calls for its idle timeout, when the caller's dial options enable
// one), so the monitor asks it to connect and keeps the last availability until the
// reconnection settles; a warm standby thus stays connected without any call (F1). A READY
// pool that leaves READY for an instant (all its connections dropped, one back at once) is
// reported down and up, so that a flapping endpoint is seen flapping (F4).
func (p *pool) monitor(ctx context.Context, publish func(*pool), changed func()) {
	defer close(p.monitorDone)
	setReady := func(ready bool) {
		if p.ready.Load() != ready {
			p.ready.Store(ready)
			publish(p)
		}
	}
	waking := false // Connect was called on an IDLE pool and it has not settled yet
	for {
		s := p.conn.GetState()
		if p.state.Swap(int32(s)) != int32(s) {
			changed()
		}
		switch {
		case s == connectivity.Idle:
			waking = true
			p.conn.Connect()
		case s == connectivity.Connecting && waking:
			// Reconnecting after idleness, not after a failure: availability unchanged.
		case s == connectivity.TransientFailure && !p.settled.Load():
			// The first attempt failed: groups waiting for it (RecoveryTimeout 0) must hear
			// it, though the availability was already "not ready".
			waking = false
			p.settled.Store(true)
			p.ready.Store(false)
			publish(p)
		default:
			waking = false
			if s == connectivity.Ready || s == connectivity.TransientFailure {
				p.settled.Store(true)
			}
			setReady(s == connectivity.Ready)
		}
		if !p.conn.WaitForStateChange(ctx, s) {
			return
		}
		if s == connectivity.Ready && p.conn.GetState() != connectivity.Idle {
			// It left READY, if only for an instant (every connection dropped and one came
			// back at once): report the drop, so that a flapping endpoint is seen flapping.
			setReady(false)
		}
	}
}

// drainThenClose closes a retired pool once its calls are done, after timeout at the latest,
// or at once when stop is closed. It reports whether the drain timed out.
func (p *pool) drainThenClose(timeout time.Duration, stop <-chan struct{}) (timedOut bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.drained:
	case <-t.C:
		timedOut = true
	case <-stop:
	}
	p.close()
	return timedOut
}
