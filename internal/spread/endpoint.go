// Package spread spreads a MultiEndpoint's calls over the members of its current tier
// (issue 28): power of two choices over a per-endpoint cost, a minimum share per member, and
// slow start, with a pick that takes no lock and allocates nothing.
//
// # Two choices, compared softly
//
// Of the two members drawn, each wins with a probability proportional to its weight,
// 1/(cost + 1 ms)^3: equal costs are an even draw, near-equal costs nearly so, and a member
// whose cost is several times the other's almost never wins (3 times: 1 in 28; 5 times: 1 in
// 126). A hard comparison (the cheaper always wins, issue 28) made any difference decide:
// with nothing in flight (calls arriving at a steady rate) the costs are the latency scores
// alone, a member 0.1 ms faster took 95 % of the calls, its peer's score, fed by its minimum
// share only, went stale, and a member whose score had recovered waited for its peer's to
// drift above its own (issue 40: shares of 7 to 79 % between equal members, 11 s and more
// for a healed member to get back to 30 %). The millisecond added to both costs makes
// differences far below it count for little whatever their ratio (0.3 ms between two 1 ms
// scores is noise); the power 3 keeps a member made 30-40 ms slower near its minimum
// share. docs/tiers.md compares this with Envoy's and Finagle's choices.
//
// # Cost
//
// An endpoint's cost is its latency score times (calls in flight + 1), the cost of the Spanner
// client's own replica choice (cloud.google.com/go/spanner v1.96.1,
// endpoint_latency_registry.go selectionCost, and power_of_two_replica_selector.go). The
// latency score is an exponentially weighted moving average whose weight decays with the time
// since the previous sample, alpha = 1 - exp(-Δt/τ), as that client's ewma_latency_tracker.go.
// τ is EndpointOptions.DecayTime, 2 s by default where that client takes 10 s: a score then
// moves 63 % of the way to a new latency in 2 s (18 % with 10 s), which is the time in which a
// member made slower must lose its share (issue 28), and it regains its share as fast once it
// is fast again; with hundreds of calls a second the average still spans hundreds of samples.
// An endpoint with no score yet costs Options.InitialLatency (10 ms, that client's
// endpointLatencyDefaultRTT) per call. Ours adds one term: an endpoint whose calls sent lately
// have waited longer than its score with none of them ending costs that wait per call instead
// (Endpoint.waiting): calls that hang count before they end.
//
// The score is fed by answered calls (Endpoint.Done) and, for an endpoint without calls, by
// latency probes (Endpoint.Probe): an endpoint penalised once is measured again, and keeps a
// minimum share of the calls (Options.MinShare) in any case, so that it is never starved of
// the samples that would clear it. An endpoint whose path failed (its pool lost every
// connection or health ejected it: Endpoint.PathFailed) starts again with no score when the
// path recovers (a connection again, or a readmission: Endpoint.PathRecovered) or when it
// comes back to its tier, whichever comes first; so does a member whose latest sample was a
// failed call, taken before it became available again (multiendpoint.Tier.Joined). The calls
// that were in flight then (held by the fault) are not counted: the score measured its fault (its
// calls that failed as it went count ErrorPenalty, 1 s), and its minimum share alone would
// take seconds to clear it (a member back with a 400 ms score beside a 20 ms peer got under
// 10 % of its tier for 4 to 14 s in the chaos soak).
//
// # Slow start
//
// A member that joined its tier recently, and the tier a group has just switched back to,
// ramp their share over a window, as Envoy's slow start mode
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/slow_start):
// weight = max(MinWeight, TimeFactor^(1/Aggression)), TimeFactor = max(seconds since the
// join, 1) / window seconds. Inside a tier, a member that wins the power of two choices
// while it ramps more than the other candidate is taken with the ratio of their weights, else
// the other is: its share grows with its weight, and members that joined together (a tier at
// startup) are not held back at all. A tier switched back to takes that weight's
// share of the calls; the tier switched away from keeps the rest while it has an Available
// member (multiendpoint.Tier.Previous), and the ramp ends at once when it has none.
package spread

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// Endpoint is one endpoint's load and latency score, shared by every group and Picker that
// lists the endpoint. Create it with NewEndpoint. All methods are safe for concurrent use,
// take no lock and do not allocate.
type Endpoint struct {
	name     string
	inflight atomic.Int64
	started  atomic.Uint64
	// score is the latency score in microseconds, as float64 bits; 0: no score yet.
	score atomic.Uint64
	// last is when the latest sample was taken, in nanoseconds since base plus 1 (0: never).
	// A sample claims the interval since last by moving last forward (compare-and-swap), so
	// concurrent samples weigh the time between them once, not twice.
	last    atomic.Int64
	probeOK atomic.Bool // no call answered since the last probe: a probe may feed the score
	// failedLast says the latest sample was a failed call (Done with failed true); forgot is
	// when the score was last dropped (forget, drop), as last counts time (0: never).
	failedLast atomic.Bool
	forgot     atomic.Int64
	// pathFailed is when PathFailed was last called, or when a join dropped the score since
	// (forgetBefore), as last counts time; 0 when PathRecovered came after it (or none).
	pathFailed atomic.Int64
	// waitFrom is when the wait began (Endpoint.waiting), as last counts time; 0: no wait.
	// The first Begin with no wait starts one; it ends when a call begun at or after it ends,
	// when nothing is left in flight, and when the score is dropped.
	waitFrom atomic.Int64
	base     time.Time
	clock    clock.Clock
	tau      float64 // DecayTime in nanoseconds
	initial  float64 // InitialLatency in microseconds
	penalty  time.Duration
}

// EndpointOptions configures an Endpoint's score.
type EndpointOptions struct {
	// DecayTime is τ of the score's moving average: a sample Δt after the previous one
	// weighs 1 - exp(-Δt/τ). Zero means 2 s (the Spanner client's defaultEWMADecayTime is
	// 10 s, ewma_latency_tracker.go, v1.96.1: see the package comment for why ours is
	// shorter); negative is treated as zero.
	DecayTime time.Duration
	// InitialLatency is the score of an endpoint not measured yet. Zero means 10 ms.
	InitialLatency time.Duration
	// ErrorPenalty is the latency a failed call counts for at least (Done with failed
	// true), so that an endpoint that fails fast does not look fast. Zero means 1 s.
	ErrorPenalty time.Duration
	// Clock is the time source of the score, read by Done and by a Begin that starts a
	// wait (Endpoint.waiting). Nil means the real clock. A Picker's Options.Clock must be the same.
	Clock clock.Clock
}

// NewEndpoint returns the Endpoint named name (an address, for Status) with no score yet.
func NewEndpoint(name string, opts EndpointOptions) *Endpoint {
	if opts.DecayTime <= 0 {
		opts.DecayTime = 2 * time.Second
	}
	if opts.InitialLatency <= 0 {
		opts.InitialLatency = 10 * time.Millisecond
	}
	if opts.ErrorPenalty <= 0 {
		opts.ErrorPenalty = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	e := &Endpoint{name: name, clock: opts.Clock, base: opts.Clock.Now(),
		tau:     float64(opts.DecayTime),
		initial: float64(opts.InitialLatency) / float64(time.Microsecond),
		penalty: opts.ErrorPenalty}
	e.probeOK.Store(true)
	return e
}

// Name returns the name given to NewEndpoint.
func (e *Endpoint) Name() string { return e.name }

// Begin counts a call started on the endpoint; Done must follow.
func (e *Endpoint) Begin() {
	if e.waitFrom.Load() == 0 { // no wait: this call starts one, and the clock is read
		e.waitFrom.CompareAndSwap(0, e.now())
	}
	e.inflight.Add(1)
	e.started.Add(1)
}

// Done ends a call counted by Begin. latency is how long it took; failed says the endpoint
// did not answer it (a transport error, a timeout): it then counts for at least
// ErrorPenalty. A call the endpoint answered with an error of the application's (NOT_FOUND,
// ABORTED...) is answered: failed false. A call that started before the score was last
// dropped (forgetBefore, PathRecovered) is not counted: held by the fault, it measured the
// fault. (A call that passed this check as the score was dropped may still set the new
// score alone: a window of nanoseconds, left open rather than locking every call.)
func (e *Endpoint) Done(latency time.Duration, failed bool) {
	now := e.now()
	// A call of the wait ended: the next Begin starts one. Cleared before the call leaves the
	// count, so that a Begin that finds the wait still set has this call in flight beside it
	// (its age bounds the wait) and, once cleared, starts its own.
	if w := e.waitFrom.Load(); w != 0 && now-int64(latency) >= w {
		e.waitFrom.CompareAndSwap(w, 0)
	}
	if e.inflight.Add(-1) <= 0 {
		if w := e.waitFrom.Load(); w != 0 { // nothing in flight: no wait, whatever latency said
			e.waitFrom.CompareAndSwap(w, 0)
		}
	}
	if f := e.forgot.Load(); f != 0 && now-int64(latency) < f {
		return // it started before the score was forgotten: held by the fault, it measured the fault
	}
	if failed {
		latency = max(latency, e.penalty)
	}
	if e.failedLast.Load() != failed {
		e.failedLast.Store(failed) // stored on a change only: the line is shared by every caller
	}
	e.observe(latency, now)
	e.probeOK.Store(false)
}

// Probe feeds a latency probe's round trip to the score, unless a call has been answered
// since the previous Probe: calls measure an endpoint that has some, probes one that has
// none. It reports whether the sample was used.
func (e *Endpoint) Probe(rtt time.Duration) bool {
	if !e.probeOK.Swap(true) {
		return false
	}
	e.failedLast.Store(false)
	e.observe(rtt, e.now())
	return true
}

// now is the time on the Endpoint's clock as last counts it: nanoseconds since base, plus 1.
func (e *Endpoint) now() int64 { return int64(e.clock.Now().Sub(e.base)) + 1 }

// observe folds one latency sample, taken at now (Endpoint.now), into the score.
func (e *Endpoint) observe(latency time.Duration, now int64) {
	if latency < 0 {
		latency = 0
	}
	sample := max(float64(latency)/float64(time.Microsecond), math.SmallestNonzeroFloat64) // 0 bits mean "no score"
	var dt int64                                                                           // the time this sample claims since the previous one; 0 for a sample out of order
	first := false
	for {
		last := e.last.Load()
		if now <= last {
			break
		}
		if e.last.CompareAndSwap(last, now) {
			dt, first = now-last, last == 0
			break
		}
	}
	alpha := 1 - math.Exp(-float64(dt)/e.tau)
	for {
		old := e.score.Load()
		next := sample
		if old != 0 && !first {
			next = alpha*sample + (1-alpha)*math.Float64frombits(old)
		}
		if e.score.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// forgetBefore drops the score when the path failed before joined and has not been seen to
// work since (PathFailed, PathRecovered), or when its latest sample was a failed call taken
// before joined (on the Endpoint's clock): the member left its tier after it and has just
// come back, and the score measured the fault (failed calls count ErrorPenalty) or a path
// that is gone. The next sample sets the score alone; until then the member costs
// InitialLatency. A call that started before the forgetting and ends after it (one held by
// the fault), answered or not, is not counted either. A path failure stays marked until
// PathRecovered: a member that joins while its path still fails drops its score again when
// the path works. Otherwise a score whose latest sample was answered, or was taken at or
// after joined, is kept: a member that joins for another reason (a group created or
// reconfigured, a change of tier) keeps what the other groups measured.
func (e *Endpoint) forgetBefore(joined time.Time) {
	j := int64(joined.Sub(e.base)) + 1
	if pf := e.pathFailed.Load(); pf != 0 && pf < j && e.pathFailed.CompareAndSwap(pf, e.now()) {
		// Dropped now, and again when the path is seen to work (PathRecovered): a join
		// during the fault (every endpoint of a group ejected, so every one available again)
		// is followed by more of the fault's failed calls.
		e.drop()
		return
	}
	last := e.last.Load()
	if last == 0 || !e.failedLast.Load() || last >= j {
		return
	}
	e.forget(last)
}

// forget drops the score, unless a sample taken since last moved it on.
func (e *Endpoint) forget(last int64) {
	if e.last.CompareAndSwap(last, 0) {
		e.forgot.Store(e.now())
		e.score.Store(0)
		e.waitFrom.Store(0)
	}
}

// drop drops the score whatever was sampled last: the calls that end from now on and
// started before now are not counted (Done), forgot being stored first.
func (e *Endpoint) drop() {
	e.forgot.Store(e.now())
	e.last.Store(0)
	e.score.Store(0)
	e.waitFrom.Store(0) // the calls held by the fault do not count as waiting either
}

// PathFailed says that the path to the endpoint failed now: its pool lost every connection,
// or health ejected it. The score is dropped when the path works again (PathRecovered), and
// when the member comes back to its tier before that (forgetBefore with a later join),
// whatever its latest sample: what the score holds measured the fault (failed calls
// count ErrorPenalty, and a call held by a blackhole is answered, seconds late, when the
// blackhole ends) or a path that is gone. Without this, an answer after the fault made the
// latest sample an answer, forgetBefore kept the score, and a member back from a blackhole
// with a 1-3 s score beside a 5 ms peer took its minimum share for the seconds the moving
// average needs to forget it.
func (e *Endpoint) PathFailed() {
	e.pathFailed.Store(e.now())
}

// PathRecovered says that the path to the endpoint works again: its pool is connected and
// not ejected, after PathFailed. If PathFailed was called and no PathRecovered since, the
// score is dropped now, and the calls in flight (held by the fault) will not be counted: a
// member that stayed in its tier through the fault (every endpoint of its group ejected, so
// every one kept available) would otherwise keep its fault's score, and one that left it
// would lose, at some later join, a score measured correctly since. Otherwise it does
// nothing.
func (e *Endpoint) PathRecovered() {
	if pf := e.pathFailed.Load(); pf != 0 && e.pathFailed.CompareAndSwap(pf, 0) {
		e.drop()
	}
}

// latency returns the score in microseconds, or InitialLatency's when there is none.
func (e *Endpoint) latency() float64 {
	s := e.score.Load()
	if s == 0 {
		return e.initial
	}
	return math.Float64frombits(s)
}

// cost is latency × (calls in flight + 1), where latency is the score, or, when calls are in
// flight and one has waited longer than the score with no call ending on the endpoint
// meanwhile, that wait (Endpoint.waiting).
func (e *Endpoint) cost() float64 {
	n := e.inflight.Load()
	if n <= 0 {
		return e.latency()
	}
	return e.busyCost(n, e.clock.Now())
}

// busyCost is cost with n (> 0) calls in flight at now, a reading of the Endpoint's clock (a
// pick reads it once for both candidates: Options.Clock).
func (e *Endpoint) busyCost(n int64, now time.Time) float64 {
	return max(e.latency(), float64(e.waiting(now))/float64(time.Microsecond)) * float64(n+1)
}

// waiting returns the endpoint's wait at now: how long the calls begun on it lately have gone
// without one of them ending. A wait starts with the first call begun when there is none, and
// ends when a call begun at or after its start ends, when nothing is left in flight, or when
// the score is dropped; zero when there is none. Its first call is in flight while it lasts,
// so it is at most the age of a call in flight. Calls begun before a wait do not end it: a
// call that lasts long while others end (a heavy query) counts only until the first of them
// ends, and calls held by a fault that end after the drop do not restart the wait of the
// calls sent since. A score measures calls that ended; this counts those that have not: an
// endpoint whose calls hang (a backend answering in seconds after an outage, a path gone
// silent) costs what they have waited so far, not the score of earlier calls, or
// InitialLatency when it has none yet (in the third emulator hour of issue 43, one with no
// score took a tier's calls, 2 to 7 of them unanswered for 2 s, beside a peer scored 594 ms;
// its calls were then answered in about 1 s each). Peak EWMA (Finagle's PeakEwma, Linkerd's)
// also multiplies its score by the calls in flight + 1, and moves the score at once to a
// slow sample, but only when the slow call ends.
func (e *Endpoint) waiting(now time.Time) time.Duration {
	w := e.waitFrom.Load()
	if w == 0 {
		return 0
	}
	return max(time.Duration(int64(now.Sub(e.base))+1-w), 0)
}

// Stats is a point-in-time view of an Endpoint, for Status and metrics.
type Stats struct {
	// Latency is the score (zero: not measured yet); InFlight the calls begun and not done;
	// Waiting the endpoint's wait (Endpoint.waiting; zero when none); Started the calls
	// begun since NewEndpoint (a share over an interval is the difference of two
	// readings); Cost is the larger of Latency (or InitialLatency) and
	// Waiting, × (InFlight + 1), in microseconds.
	Latency  time.Duration
	InFlight int64
	Waiting  time.Duration
	Started  uint64
	Cost     float64
}

// Stats returns the endpoint's current figures.
func (e *Endpoint) Stats() Stats {
	s := Stats{InFlight: e.inflight.Load(), Started: e.started.Load(), Cost: e.cost()}
	if s.InFlight > 0 {
		s.Waiting = e.waiting(e.clock.Now())
	}
	if sc := e.score.Load(); sc != 0 {
		s.Latency = time.Duration(math.Float64frombits(sc) * float64(time.Microsecond))
	}
	return s
}
