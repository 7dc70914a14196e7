package pool

import (
	"context"
	"time"

	"google.golang.org/grpc/connectivity"
)

// StartMonitor starts the pool's connectivity monitor on a goroutine of its own; Close stops
// it and waits for it. Call it once, after the pool is published to its owner's routing (its
// first reports must find it there). After Close it starts nothing.
func (p *Pool) StartMonitor() {
	p.monitorMu.Lock()
	defer p.monitorMu.Unlock()
	if p.stopMonitor != nil {
		return // closed, or started already
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stopMonitor = cancel
	go p.monitor(ctx)
}

// monitor follows the pool's connectivity state until ctx is done, reporting every change of
// state (Observer.StateChanged) and of availability (Observer.Availability, then the
// endpoint's transition: Up, Down, Unreachable). READY is available; CONNECTING,
// TRANSIENT_FAILURE and SHUTDOWN are not. IDLE is no failure: the channel went idle (no
// calls for its idle timeout, when the caller's dial options enable one), so the monitor asks
// it to connect and keeps the last availability until the reconnection settles; a warm
// standby thus stays connected without any call (F1). A READY pool that leaves READY for an
// instant (all its connections dropped, one back at once) is reported down and up, so that a
// flapping endpoint is seen flapping (F4). While its connections die young (young.go), a
// READY pool is reported available only once it has stayed READY for the dwell (youngLife),
// which ends the backoff. A pool that becomes ready (connected) while ejected, its ejection
// time over and no probe under way, is probed at once (health.Detector.Connected).
func (p *Pool) monitor(ctx context.Context) {
	defer close(p.monitorDone)
	report := func() {
		p.obs.Availability(p)
		if p.watch != nil {
			p.watch.availability(p.ready.Load())
		}
	}
	setReady := func(ready bool) {
		if p.ready.Load() != ready {
			p.ready.Store(ready)
			report()
			if ready && p.health != nil {
				// An ejection time that ended while the pool had no connection found none to
				// probe (its probe skipped, the next one a ProbeInterval away): probe now.
				p.health.Connected()
			}
		}
	}
	waking := false          // Connect was called on an IDLE pool and it has not settled yet
	var readySince time.Time // when the monitor saw the pool become READY; zero while not
	for {
		s := p.conn.GetState()
		if s != connectivity.Ready {
			readySince = time.Time{}
		}
		var dwell time.Duration // left before a READY pool in young-death backoff is available
		if p.state.Swap(int32(s)) != int32(s) {
			if p.watch != nil {
				p.watch.stateChanged()
			}
			p.obs.StateChanged(p)
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
			report()
		default:
			waking = false
			if s == connectivity.Ready || s == connectivity.TransientFailure {
				p.settled.Store(true)
			}
			ready := s == connectivity.Ready
			if ready && p.watch != nil && p.watch.youth.inBackoff() {
				now := p.watch.youthClock.Now()
				if readySince.IsZero() {
					readySince = now
				}
				if dwell = youngLife - now.Sub(readySince); dwell > 0 {
					ready = false
				} else {
					p.watch.youth.lived()
				}
			} else if ready && readySince.IsZero() && p.watch != nil {
				readySince = p.watch.youthClock.Now()
			}
			setReady(ready)
		}
		if !p.waitForStateChange(ctx, s, dwell) { // dwell > 0 only with a watch
			if ctx.Err() != nil {
				return
			}
			continue // the dwell is over: judge the same state again
		}
		if s == connectivity.Ready && p.conn.GetState() != connectivity.Idle {
			// It left READY, if only for an instant (every connection dropped and one came
			// back at once): report the drop, so that a flapping endpoint is seen flapping.
			setReady(false)
		}
	}
}

// waitForStateChange waits until the pool's state is no longer s, as
// grpc.ClientConn.WaitForStateChange, for at most d (on the watch's youth clock) when d > 0.
// It reports whether the state changed.
func (p *Pool) waitForStateChange(ctx context.Context, s connectivity.State, d time.Duration) bool {
	if d <= 0 {
		return p.conn.WaitForStateChange(ctx, s)
	}
	wctx, cancel := context.WithCancel(ctx)
	t := p.watch.youthClock.AfterFunc(d, cancel)
	defer t.Stop()
	defer cancel()
	return p.conn.WaitForStateChange(wctx, s)
}
