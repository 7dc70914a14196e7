package pool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// LatencyOptions turns on a pool's latency probes: the same probe RPC, sent on every
// endpoint every Interval, so that the latencies of a group's endpoints compare like for like
// (brownout detection, docs/health.md, "Brownout").
type LatencyOptions struct {
	// Interval is the time from the start of one latency probe to the start of the next (a
	// probe that took longer than Interval is followed by the next at once); it must be
	// positive.
	Interval time.Duration
	// Timeout is the deadline of one latency probe; it must be positive. A probe that
	// reaches it counts as a sample of Timeout: the endpoint is at least that slow.
	Timeout time.Duration
	// Probe sends one probe through conn; required. It is HealthOptions.Probe in practice.
	Probe func(ctx context.Context, conn grpc.ClientConnInterface) error
}

// latencySamples is how many successful latency probes a pool's latency is the median of.
const latencySamples = 3

// latencyProber sends a pool's latency probes from its own timer, one at a time. A latency
// probe is not a call and not a health probe: its outcome is counted nowhere but in the
// latency, so that an endpoint's failure is never counted twice (the health detector has
// its own probes and its own calls).
type latencyProber struct {
	// Set by startLatency before the pool is shared, never changed after.
	interval, timeout time.Duration
	probe             func(ctx context.Context, conn grpc.ClientConnInterface) error
	// conn is what every latency probe is given: the pool's latency connection while it
	// is READY, its channels otherwise (latencyconn.go).
	conn *sentConn

	mu      sync.Mutex // guards the fields below and the Add of the prober's wg for a tick
	stopped bool
	timer   clock.Timer
	samples []time.Duration // the last successful probes' latencies, oldest first
}

// startLatency arms p's first latency probe, one Interval from now. p.probes must be
// set up (startHealth): the latency probes share its context and its goroutine count.
func (p *Pool) startLatency(o LatencyOptions) {
	l := &latencyProber{interval: o.Interval, timeout: o.Timeout, probe: o.Probe,
		conn: &sentConn{cc: latencyRoute{w: p.watch, calls: bareConn{p.conn}}}}
	p.latency = l
	l.timer = p.clock.AfterFunc(l.interval, p.latencyTick)
}

// latencyTick sends one latency probe on the timer's goroutine, records its latency, reports
// it (Observer.Latency) and arms the next one. A pool without a ready connection is not
// probed and forgets its samples: the latency of a path that went away says nothing about
// the next one.
func (p *Pool) latencyTick() {
	l := p.latency
	// The tick counts as a probe goroutine, so that stopHealth waits for it.
	p.probes.mu.Lock()
	if p.probes.stopped {
		p.probes.mu.Unlock()
		return
	}
	p.probes.wg.Add(1)
	p.probes.mu.Unlock()
	defer p.probes.wg.Done()

	start := p.clock.Now()
	changed := false
	if p.State() != connectivity.Ready {
		l.mu.Lock()
		changed = len(l.samples) > 0
		l.samples = nil
		l.mu.Unlock()
	} else if d, ok := p.measureLatency(); ok {
		l.mu.Lock()
		l.samples = append(l.samples, d)
		if len(l.samples) > latencySamples {
			l.samples = l.samples[len(l.samples)-latencySamples:]
		}
		l.mu.Unlock()
		changed = true
	}
	if p.probes.ctx.Err() != nil {
		return // stopped
	}
	if changed {
		p.obs.Latency(p)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.timer = p.clock.AfterFunc(max(0, l.interval-p.clock.Now().Sub(start)), p.latencyTick)
	}
}

// measureLatency sends one latency probe and returns its latency; false when it says
// nothing of the endpoint's latency: it failed (an outcome for the health detector's own
// calls and probes, not for this one), or the pool is stopping.
func (p *Pool) measureLatency() (time.Duration, bool) {
	l := p.latency
	ctx, cancel := context.WithTimeout(p.probes.ctx, l.timeout)
	defer cancel()
	ctx, sent := withSentFlag(ctx, p.clock)
	start := p.clock.Now()
	err := l.probe(ctx, l.conn)
	end := p.clock.Now()
	// The latency runs from when the request left: the time it waited behind the pool's
	// calls for a free stream is the calls', not the endpoint's.
	at, wasSent := sent.at(start)
	wait := at.Sub(start)
	switch {
	case p.probes.ctx.Err() != nil:
		return 0, false
	case err == nil:
		return end.Sub(at), true
	case !wasSent, wait > l.timeout/2:
		return 0, false // it waited (most of its timeout) for a free stream: no latency of the endpoint
	case reachedDeadline(ctx, err, l.timeout):
		return max(end.Sub(at), l.timeout-wait), true // at least that slow
	}
	return 0, false
}

// reachedDeadline reports whether err, the error of a probe sent with ctx, ended it at ctx's
// deadline: ctx ended with it, or the answer is DEADLINE_EXCEEDED with at most a tenth of
// timeout left. The second case is the server's own answer at that deadline, which gRPC
// sends it (grpc-timeout) and which it may enforce an instant before ctx's timer fires on
// this side; gRPC also reads a server's RST_STREAM CANCEL as DEADLINE_EXCEEDED once the
// deadline has passed (grpc-go internal/transport/http2_client.go, handleRSTStream). A DEADLINE_EXCEEDED with more time left is a deadline of the server's
// own: a failure, no sample. Deadlines are real time, as context's are.
func reachedDeadline(ctx context.Context, err error, timeout time.Duration) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && status.Code(err) == codes.DeadlineExceeded && time.Until(d) <= timeout/10
}

// stopLatency stops the latency probes' timer; a tick already running finishes (stopHealth
// waits for it). Idempotent.
func (p *Pool) stopLatency() {
	l := p.latency
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.timer.Stop()
}

// Latency returns the median latency of the pool's last three successful latency probes
// (the mean of the two, or the one, before there are three); known is false when latency
// probes are off, before the first success, and after the pool lost its ready connection.
func (p *Pool) Latency() (d time.Duration, known bool) {
	l := p.latency
	if l == nil {
		return 0, false
	}
	l.mu.Lock()
	s := slices.Clone(l.samples)
	l.mu.Unlock()
	return median(s)
}

// median returns the median of s (the mean of the middle two for an even count), sorting s.
func median(s []time.Duration) (time.Duration, bool) {
	if len(s) == 0 {
		return 0, false
	}
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return s[n/2-1] + (s[n/2]-s[n/2-1])/2, true
	}
	return s[len(s)/2], true
}
