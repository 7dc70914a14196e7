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
// An endpoint's cost for a call of one kind (below) is its latency score for the kind times
// (calls of the kind in flight + 1), the cost of the Spanner
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
// have gone unanswered for longer than the first of them usually takes (Endpoint.overdue)
// costs the time beyond, per call, when that is more than its score: calls that hang count
// before they end.
//
// # Kinds of call
//
// An endpoint has one score per kind of call (Kind: the caller's choice, one per Spanner RPC
// method in internal/route), and a pick compares the two candidates on the kind of the call
// being picked for. The Spanner client keeps one score per endpoint, for the calls its
// replica choice routes, which are alike; a tier's members serve every call of the
// application, and its calls differ more than its members do: a stream counts to its first
// response, which a query needs 0.1-0.5 s for on the Cloud Spanner emulator, against 1-30 ms for
// a point read. With one score, one query on a member whose peer served none made the member
// look 50 to 100 times slower, and, with few calls of its own under light load, it stayed
// there for seconds (issue 43: a member healed from connections that die young went from a
// 1.9 ms score to 94-174 ms beside a peer at 1.4-29 ms, and took 5.2 s to get its share back).
// For the same reason the wait counts only beyond what the first call of the wait usually
// takes (the shorter of the two candidates' scores for that call's kind), only the calls of
// the picked kind in flight multiply its cost (Endpoint.busyCost), and a kind one candidate
// has not measured yet costs it what it costs its peer, at most InitialLatency (Picker.Pick).
// A failed call counts against its own kind only: one query that runs out of its deadline says
// nothing of the endpoint's reads, and a path that fails fails the calls of every kind sent to
// it (or its pool loses its connections: PathFailed, below).
//
// The score is fed by answered calls (Endpoint.Done). A latency probe measures a path's round
// trip, not a call of any kind: it feeds no score, but an endpoint with no call answered
// since the previous probe and none in flight, whose latest sample was a failed call, is
// measured again once a probe answers in less than ErrorPenalty, its scores dropped
// (Endpoint.Probe). An endpoint keeps a minimum share of the calls of each kind
// (Options.MinShare) in any case, so that it is never starved of the samples that would clear
// its scores. An endpoint whose path failed (its pool lost every
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
	// kindFlight is the calls in flight of each kind (inflight is their sum); started the
	// calls begun of each kind.
	kindFlight [Kinds]atomic.Int64
	started    [Kinds]atomic.Uint64
	// score is the latency score of each kind in microseconds, as float64 bits; 0: no score
	// yet.
	score [Kinds]atomic.Uint64
	// sampled is when each kind's latest sample was taken, as last counts time (0: none since
	// the score was dropped). A sample claims the interval since its kind's previous one by
	// moving sampled forward (compare-and-swap), so concurrent samples weigh the time between
	// them once, not twice.
	sampled [Kinds]atomic.Int64
	// last is when the latest sample of any kind was taken, in nanoseconds since base plus 1
	// (0: never, or dropped since).
	last    atomic.Int64
	probeOK atomic.Bool // no call answered since the last probe: a probe may drop a failed score
	// failedLast says the latest sample was a failed call (Done with failed true); forgot is
	// when the score was last dropped (forget, drop), as last counts time (0: never).
	failedLast atomic.Bool
	forgot     atomic.Int64
	// pathFailed is when PathFailed was last called, or when a join dropped the score since
	// (forgetBefore), as last counts time; 0 when PathRecovered came after it (or none).
	pathFailed atomic.Int64
	// waitFrom is when the wait began (Endpoint.waiting), as last counts time, shifted left by
	// kindBits, with the kind (an index) of the call that began it in the low bits: one
	// compare-and-swap sets both (waitOf); 0: no wait. The first Begin with no wait starts
	// one; it ends when a call begun at or after it ends, when nothing is left in flight, and
	// when the score is dropped.
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

// Kind names the calls an Endpoint scores together: a member is compared with its peer on
// calls of the same kind (the package comment says why). The caller chooses what a kind is
// (internal/route: one per Spanner RPC method); a value is taken modulo Kinds, and 0 suits
// calls of no particular kind.
type Kind uint8

// Kinds is the number of kinds an Endpoint scores apart.
const Kinds = 1 << kindBits

// kindBits is the bits of a kind's index (Kind.index, waitFrom).
const kindBits = 3

// index is k's slot in an Endpoint's arrays.
func (k Kind) index() int { return int(k & (Kinds - 1)) }

// waitOf splits a waitFrom value into the wait's start (as last counts time; 0: no wait) and
// the kind (an index) of the call that began it.
func waitOf(w int64) (start int64, k int) { return w >> kindBits, int(w & (Kinds - 1)) }

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

// Begin counts a call of kind k started on the endpoint; Done must follow, with the same k.
func (e *Endpoint) Begin(k Kind) {
	if e.waitFrom.Load() == 0 { // no wait: this call starts one, and the clock is read
		e.waitFrom.CompareAndSwap(0, e.now()<<kindBits|int64(k.index()))
	}
	e.inflight.Add(1)
	e.kindFlight[k.index()].Add(1)
	e.started[k.index()].Add(1)
}

// Done ends a call of kind k counted by Begin. latency is how long it took; failed says the endpoint
// did not answer it (a transport error, a timeout): it then counts for at least
// ErrorPenalty. A call the endpoint answered with an error of the application's (NOT_FOUND,
// ABORTED...) is answered: failed false. A call that started before the score was last
// dropped (forgetBefore, PathRecovered) is not counted: held by the fault, it measured the
// fault. (A call that passed this check as the score was dropped may still set the new
// score alone: a window of nanoseconds, left open rather than locking every call.)
func (e *Endpoint) Done(k Kind, latency time.Duration, failed bool) {
	now := e.now()
	// A call of the wait ended: the next Begin starts one. Cleared before the call leaves the
	// count, so that a Begin that finds the wait still set has this call in flight beside it
	// (its age bounds the wait) and, once cleared, starts its own.
	if w := e.waitFrom.Load(); w != 0 {
		if start, _ := waitOf(w); now-int64(latency) >= start {
			e.waitFrom.CompareAndSwap(w, 0)
		}
	}
	e.kindFlight[k.index()].Add(-1)
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
	e.observe(k.index(), latency, now)
	e.probeOK.Store(false)
}

// Probe tells the endpoint of a latency probe's round trip rtt, which no score takes: a probe
// is no call of any kind, and a 1 ms round trip taken as a query's score would draw a tier's
// queries to an endpoint whose queries take 300 ms like its peer's. When no call has been
// answered since the previous Probe, none is in flight, the latest sample was a failed call
// and rtt is shorter than ErrorPenalty (a probe that reached its deadline is no answer), the
// scores are dropped: they measured a failure, and the path answers again; the endpoint then
// costs what its peer costs until its calls measure it. It reports whether the probe was
// taken (no call answered since the previous one): calls measure an endpoint that has some,
// probes one that has none.
func (e *Endpoint) Probe(rtt time.Duration) bool {
	if !e.probeOK.Swap(true) {
		return false
	}
	if rtt < e.penalty && e.inflight.Load() == 0 && e.failedLast.Load() {
		if last := e.last.Load(); last != 0 {
			e.forget(last) // last 0 from then on: forgetBefore and Probe drop nothing more
		}
	}
	return true
}

// now is the time on the Endpoint's clock as last counts it: nanoseconds since base, plus 1.
func (e *Endpoint) now() int64 { return int64(e.clock.Now().Sub(e.base)) + 1 }

// observe folds one latency sample of kind k (an index), taken at now (Endpoint.now), into
// the kind's score.
func (e *Endpoint) observe(k int, latency time.Duration, now int64) {
	if latency < 0 {
		latency = 0
	}
	sample := max(float64(latency)/float64(time.Microsecond), math.SmallestNonzeroFloat64) // 0 bits mean "no score"
	for {
		last := e.last.Load()
		if now <= last || e.last.CompareAndSwap(last, now) {
			break
		}
	}
	var dt int64 // the time this sample claims since the kind's previous one; 0 for a sample out of order
	first := false
	for {
		last := e.sampled[k].Load()
		if now <= last {
			break
		}
		if e.sampled[k].CompareAndSwap(last, now) {
			dt, first = now-last, last == 0
			break
		}
	}
	alpha := 1 - math.Exp(-float64(dt)/e.tau)
	for {
		old := e.score[k].Load()
		next := sample
		if old != 0 && !first {
			next = alpha*sample + (1-alpha)*math.Float64frombits(old)
		}
		if e.score[k].CompareAndSwap(old, math.Float64bits(next)) {
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

// forget drops the score of every kind, unless a sample taken since last moved it on.
func (e *Endpoint) forget(last int64) {
	if e.last.CompareAndSwap(last, 0) {
		e.forgot.Store(e.now())
		e.clearScores()
		e.waitFrom.Store(0)
	}
}

// drop drops the score of every kind whatever was sampled last: the calls that end from now
// on and started before now are not counted (Done), forgot being stored first.
func (e *Endpoint) drop() {
	e.forgot.Store(e.now())
	e.last.Store(0)
	e.clearScores()
	e.waitFrom.Store(0) // the calls held by the fault do not count as waiting either
}

// clearScores drops every kind's score and its latest sample's time.
func (e *Endpoint) clearScores() {
	for k := range Kinds {
		e.sampled[k].Store(0)
		e.score[k].Store(0)
	}
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

// latency returns the score of kind k (an index) in microseconds, or InitialLatency's when
// there is none.
func (e *Endpoint) latency(k int) float64 {
	s := e.score[k].Load()
	if s == 0 {
		return e.initial
	}
	return math.Float64frombits(s)
}

// latencies returns a's and b's latencies for a call of kind k (an index), in microseconds:
// each one's score, or, for one that has none, its peer's, at most its InitialLatency (an
// endpoint not measured at a kind is taken to be as fast as its peer, not slower: each kind
// is measured apart, and a member back from a fault with every score dropped would otherwise
// cost InitialLatency at each kind until a call of the kind is answered), or InitialLatency
// when neither has one.
func latencies(a, b *Endpoint, k int) (float64, float64) {
	la, lb := math.Float64frombits(a.score[k].Load()), math.Float64frombits(b.score[k].Load())
	switch {
	case la == 0 && lb == 0:
		return a.initial, b.initial
	case la == 0:
		return min(lb, a.initial), lb
	case lb == 0:
		return la, min(la, b.initial)
	}
	return la, lb
}

// cost is the cost of a call of kind k (an index): latency × (calls of kind k in flight +
// 1), where latency is the kind's score, or, when calls are in flight and the wait is overdue
// by more than that score (Endpoint.overdue, with no peer), the time overdue.
func (e *Endpoint) cost(k int) float64 {
	if e.inflight.Load() <= 0 {
		return e.latency(k)
	}
	return e.busyCost(k, e.latency(k), e.clock.Now(), nil)
}

// busyCost is cost when calls are in flight, at now, a reading of the Endpoint's clock (a
// pick reads it once for both candidates: Options.Clock), with l the kind's latency (the
// score, or what stands for it: Picker.Pick); peer is the other candidate, nil for none
// (Endpoint.overdue). Calls of other kinds do not multiply it: a 300 ms query in flight says
// nothing of when a 2 ms read will be answered (gRPC multiplexes an endpoint's calls over its
// connections, up to their limit of concurrent streams); the count is there to spread each
// kind's calls, as the Spanner client spreads its own. An endpoint saturated by calls of
// another kind shows it in the scores of every kind it answers late, and in its wait.
func (e *Endpoint) busyCost(k int, l float64, now time.Time, peer *Endpoint) float64 {
	return max(l, e.overdue(now, peer)) * float64(e.kindFlight[k].Load()+1)
}

// overdue returns, in microseconds, how much longer the wait has lasted at now than the
// first call of the wait usually takes: the shorter of the endpoint's score and peer's (nil:
// none) for that call's kind, either when only one has a score, or nothing when neither has
// (the whole wait is overdue). The shorter: a member whose own score for the kind measured a
// failure (ErrorPenalty, 1 s) is not given that second to hang. Zero when there is no wait or
// it is not overdue. A query that takes 300 ms on either member costs nothing while it runs
// its usual time; one hung for 2 s costs 1.7 s per call.
func (e *Endpoint) overdue(now time.Time, peer *Endpoint) float64 {
	w := e.waitFrom.Load()
	if w == 0 {
		return 0
	}
	start, k := waitOf(w)
	wait := max(float64(int64(now.Sub(e.base))+1-start)/float64(time.Microsecond), 0)
	usual := math.Float64frombits(e.score[k].Load())
	if peer != nil {
		if p := math.Float64frombits(peer.score[k].Load()); p != 0 && (usual == 0 || p < usual) {
			usual = p
		}
	}
	return max(wait-usual, 0)
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
	start, _ := waitOf(w)
	return max(time.Duration(int64(now.Sub(e.base))+1-start), 0)
}

// Stats is a point-in-time view of an Endpoint, for Status and metrics.
type Stats struct {
	// Latency is the score of the endpoint's commonest kind of call (the most begun since
	// NewEndpoint; kind 0 before any), zero when that kind is not measured yet; Scores is every
	// kind's score (zero: not measured). InFlight is the calls begun and not done; Waiting the
	// endpoint's wait (Endpoint.waiting; zero when none); Started the calls begun since
	// NewEndpoint, of every kind (a share over an interval is the difference of two
	// readings); Cost is a call of the commonest kind's cost (Endpoint.cost), in microseconds.
	Latency  time.Duration
	Scores   [Kinds]time.Duration
	InFlight int64
	Waiting  time.Duration
	Started  uint64
	Cost     float64
}

// Stats returns the endpoint's current figures.
func (e *Endpoint) Stats() Stats {
	s := Stats{InFlight: e.inflight.Load()}
	common, most := 0, uint64(0)
	for k := range Kinds {
		n := e.started[k].Load()
		s.Started += n
		if n > most {
			common, most = k, n
		}
		if sc := e.score[k].Load(); sc != 0 {
			s.Scores[k] = time.Duration(math.Float64frombits(sc) * float64(time.Microsecond))
		}
	}
	s.Latency, s.Cost = s.Scores[common], e.cost(common)
	if s.InFlight > 0 {
		s.Waiting = e.waiting(e.clock.Now())
	}
	return s
}
