package hedge

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// Settings are one group's validated hedging settings (spannerme.HedgingSettings with its
// defaults applied: MinDelay and Budget are never zero here).
type Settings struct {
	// Delay is the fixed hedge delay; zero for the adaptive one.
	Delay time.Duration
	// MinDelay is the adaptive delay's floor.
	MinDelay time.Duration
	// Budget is the largest fraction of the group's hedgeable calls that are hedged, in [0, 1].
	Budget float64
}

// Defaults of spannerme.HedgingSettings, and the budget's and the adaptive delay's constants.
const (
	DefaultMinDelay = 20 * time.Millisecond
	DefaultBudget   = 0.05
	// Bucket is how many hedges the budget saves up at most.
	Bucket = 10.0
	// MinSamples is how many measured calls the adaptive delay needs.
	MinSamples = 100
	// Window is how long a window of the adaptive delay's measurements lasts; the delay
	// reads the current window and the one before.
	Window = 10 * time.Second
	// Tries is how many times a stream with no response asks the budget for its hedge:
	// after 1, 1.25, 1.5 and 1.75 times the delay (every Tries-th of the delay after the
	// first). The try-th ask is granted only while Tries-try+1 hedges are saved up, so
	// that when more streams pass the delay than the budget allows (a delay below the usual
	// time to first response, a loaded client, a crowd of slightly slow calls), the budget
	// goes to the streams that have waited longest (the slow path's), not to the first ones
	// to pass the delay; the asks are close together so that a stream an earlier ask left
	// waiting is hedged soon after.
	Tries = 4
)

// Counts are a group's hedging counts since it began hedging (spannerme.HedgingStatus).
type Counts struct {
	Hedgeable, Sent, Won, Lost, Refused, NoEndpoint int64
}

// Group is one group's hedging: its settings and its state, which outlives a reload
// that keeps the group hedging.
type Group struct {
	settings Settings
	*state
}

// state is a group's hedging budget, adaptive delay and counters. Safe for concurrent
// use; nothing in it takes a lock but the delay's recomputation.
type state struct {
	// tokens is the budget's saved-up hedges, a float64 (math.Float64bits), so that every
	// Budget in (0, 1] is earned at its own rate (in whole thousandths, 0.0005 earned nothing
	// and 0.0019 earned as 0.001).
	tokens                                    atomic.Uint64
	hedgeable, sent, won, lost, refused, none atomic.Int64
	delays                                    [2]latencyWindows // by methodIndex
}

// methodIndex returns the index in state.delays of method, one of the methods that
// may be hedged (ExecuteStreamingSql, StreamingRead), or -1.
func methodIndex(method string) int {
	switch method {
	case spannerreq.MethodExecuteStreamingSQL:
		return 0
	case spannerreq.MethodStreamingRead:
		return 1
	}
	return -1
}

// earn credits one hedgeable call to the budget: Budget of a hedge, up to Bucket.
func (g *Group) earn() {
	g.hedgeable.Add(1)
	add := g.settings.Budget
	for {
		t := g.tokens.Load()
		n := math.Float64bits(min(math.Float64frombits(t)+add, Bucket))
		if n == t || g.tokens.CompareAndSwap(t, n) {
			return
		}
	}
}

// spend takes one hedge from the budget for a stream asking for the try-th time (1 for the
// first, at most Tries): false when fewer than Tries-try+1 hedges are saved up. An
// earlier try leaves the last saved-up hedges to the streams that have waited longer
// (Tries). The caller counts refusals.
func (g *Group) spend(try int) bool {
	need := float64(Tries - min(max(try, 1), Tries) + 1)
	for {
		t := g.tokens.Load()
		saved := math.Float64frombits(t)
		if saved < need {
			return false
		}
		if g.tokens.CompareAndSwap(t, math.Float64bits(saved-1)) {
			return true
		}
	}
}

// saved returns the hedges saved up in the budget.
func (g *Group) saved() float64 { return math.Float64frombits(g.tokens.Load()) }

// delay returns the hedge delay of method (methodIndex) at now; false when the
// adaptive delay has too few measurements yet.
func (g *Group) delay(method int, now time.Time) (time.Duration, bool) {
	if g.settings.Delay > 0 {
		return g.settings.Delay, true
	}
	p95, ok := g.delays[method].p95(now)
	if !ok {
		return 0, false
	}
	return max(p95, g.settings.MinDelay), true
}

// firstResponse adds a measured time to first response of method at now, for the adaptive delay.
func (g *Group) firstResponse(method int, now time.Time, d time.Duration) {
	if g.settings.Delay == 0 {
		g.delays[method].push(now, d)
	}
}

// latencyWindows measures times to first response in two windows of Window (the
// current one and the one before), each a histogram of latencyBuckets buckets. Adding is
// lock-free; the p95 is recomputed at most every 32 measurements, under mu.
type latencyWindows struct {
	start   atomic.Int64 // the current window's start, Unix nanoseconds
	cur     atomic.Int32 // index of the current window in w
	w       [2][latencyBuckets]atomic.Uint32
	counter atomic.Uint32 // measurements since the last recomputation
	cached  atomic.Int64  // the last p95, in nanoseconds; 0 for "too few measurements"
	mu      sync.Mutex    // serializes rotation and recomputation
}

// latencyBuckets: bucket i holds times up to 2^(i/4) ms (4 buckets per doubling, 19%
// apart), the last one everything above about 2^15.75 ms (55 s).
const latencyBuckets = 64

// latencyBucket returns the bucket of d.
func latencyBucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	i := int(math.Ceil(4 * math.Log2(ms)))
	return min(i, latencyBuckets-1)
}

// bucketBound returns the upper bound of bucket i.
func bucketBound(i int) time.Duration {
	return time.Duration(math.Exp2(float64(i)/4) * float64(time.Millisecond))
}

// push counts d, measured at now.
func (l *latencyWindows) push(now time.Time, d time.Duration) {
	l.rotate(now)
	l.w[l.cur.Load()][latencyBucket(d)].Add(1)
	if l.counter.Add(1)%32 == 0 || l.cached.Load() == 0 {
		l.recompute()
	}
}

// rotate starts a new window when the current one is over, clearing the oldest.
func (l *latencyWindows) rotate(now time.Time) {
	n := now.UnixNano()
	if s := l.start.Load(); s != 0 && n-s < int64(Window) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.start.Load()
	if s != 0 && n-s < int64(Window) {
		return
	}
	next := 1 - l.cur.Load()
	if s != 0 && n-s >= 2*int64(Window) { // idle for a whole window: forget both
		for i := range l.w[1-next] {
			l.w[1-next][i].Store(0)
		}
	}
	for i := range l.w[next] {
		l.w[next][i].Store(0)
	}
	l.cur.Store(next)
	l.start.Store(n)
}

// recompute sets cached to the p95 of both windows, or 0 with fewer than MinSamples.
func (l *latencyWindows) recompute() {
	l.mu.Lock()
	defer l.mu.Unlock()
	var counts [latencyBuckets]uint64
	var total uint64
	for w := range l.w {
		for i := range l.w[w] {
			c := uint64(l.w[w][i].Load())
			counts[i] += c
			total += c
		}
	}
	if total < MinSamples {
		l.cached.Store(0)
		return
	}
	want := total - total/20 // the 95th percentile's rank
	var seen uint64
	for i, c := range counts {
		if seen += c; seen >= want {
			l.cached.Store(int64(bucketBound(i)))
			return
		}
	}
	l.cached.Store(int64(bucketBound(latencyBuckets - 1)))
}

// p95 returns the cached p95 at now; false with too few measurements (an idle group's
// measurements expire after two windows).
func (l *latencyWindows) p95(now time.Time) (time.Duration, bool) {
	if s := l.start.Load(); s == 0 || now.UnixNano()-s >= 2*int64(Window) {
		return 0, false
	}
	c := l.cached.Load()
	return time.Duration(c), c > 0
}

// Settings returns the group's settings in force.
func (g *Group) Settings() Settings { return g.settings }

// Counts returns the group's counts.
func (g *Group) Counts() Counts {
	return Counts{Hedgeable: g.hedgeable.Load(), Sent: g.sent.Load(), Won: g.won.Load(), Lost: g.lost.Load(),
		Refused: g.refused.Load(), NoEndpoint: g.none.Load()}
}

// AddHedgeable counts n more hedgeable streams, as if n had been seen (tests of what reads
// the counts).
func (g *Group) AddHedgeable(n int64) { g.hedgeable.Add(n) }

// SetSaved sets the hedges saved up in the budget, in thousandths of a hedge (tests that
// start from a given budget).
func (g *Group) SetSaved(milli int64) { g.tokens.Store(math.Float64bits(float64(milli) / 1000)) }

// Method reports whether method is one that may be hedged: ExecuteStreamingSql or
// StreamingRead (both answer PartialResultSet messages).
func Method(method string) bool { return methodIndex(method) >= 0 }
