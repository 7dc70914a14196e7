package spannerme

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// HedgingSettings turns on hedged read-only streaming calls in one group (Settings.Hedging):
// a streaming query or read that may be hedged (docs/configuration.md, "Hedged reads", lists
// which requests may) and has no response message after the hedge delay is sent once more,
// unchanged, to another available endpoint of the group; the first of the two streams to
// deliver a message, or to end with a status the Spanner client does not retry, is the one
// the caller reads, and the other is cancelled. The zero value hedges after the group's
// recent p95 time to first response, at least 20ms, within a budget of 5% of the hedgeable
// calls.
type HedgingSettings struct {
	// Delay is how long a hedgeable stream waits for its first response message before it
	// is hedged. Zero means adaptive: the group's p95 time to first response message of the
	// method (ExecuteStreamingSql or StreamingRead) over the last 10 to 20 seconds of its
	// hedgeable calls, never below MinDelay; until 100 such calls have been measured, none is
	// hedged. Negative is a *ConfigError.
	Delay time.Duration
	// MinDelay is the floor of the adaptive delay. Zero means 20ms; negative is a
	// *ConfigError. Ignored with a fixed Delay.
	MinDelay time.Duration
	// Budget is the largest fraction of the group's hedgeable calls that are hedged, over
	// time: each hedgeable call earns Budget of a hedge, a hedge spends one, and at most 10
	// hedges are saved up (gRFC A6's retry throttling, in the opposite direction). When the
	// delay passes, a stream's hedge is sent only while at least 4 hedges are saved up; one
	// that still has no response asks again after 1.25, 1.5 and 1.75 times the delay, needing
	// 3, 2, then 1 saved up, so that a scarce budget goes to the streams that have waited
	// longest. A stream refused at its fourth ask is not hedged (Status counts it as refused).
	// Zero means 0.05; outside [0, 1] (or NaN) is a *ConfigError.
	Budget float64
}

// Defaults of HedgingSettings.
const (
	defaultHedgeMinDelay = 20 * time.Millisecond
	defaultHedgeBudget   = 0.05
	// hedgeBucketMilli is the budget's saved-up hedges, in thousandths of a hedge.
	hedgeBucketMilli = 10 * 1000
	// hedgeMinSamples is how many measured calls the adaptive delay needs.
	hedgeMinSamples = 100
	// hedgeWindow is how long a window of the adaptive delay's measurements lasts; the delay
	// reads the current window and the one before.
	hedgeWindow = 10 * time.Second
	// hedgeTries is how many times a stream with no response asks the budget for its hedge:
	// after 1, 1.25, 1.5 and 1.75 times the delay (every hedgeTries-th of the delay after the
	// first). The try-th ask is granted only while hedgeTries-try+1 hedges are saved up, so
	// that when more streams pass the delay than the budget allows (a delay below the usual
	// time to first response, a loaded client, a crowd of slightly slow calls), the budget
	// goes to the streams that have waited longest (the slow path's), not to the first ones
	// to pass the delay; the asks are close together so that a stream an earlier ask left
	// waiting is hedged soon after.
	hedgeTries = 4
)

// hedgeSettings is the validated Settings.Hedging with defaults; nil when no group hedges.
type hedgeSettings map[string]HedgingSettings

// parseHedging validates h and returns it with defaults (nil when empty). Entries of groups
// not configured (yet) are allowed. Errors: a *ConfigError naming the group, for the first
// invalid entry by group name.
func parseHedging(h map[string]HedgingSettings) (hedgeSettings, error) {
	if len(h) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(hedgeSettings, len(h))
	for _, name := range names {
		s := h[name]
		switch {
		case s.Delay < 0:
			return nil, configErr(name, "", -1, "Settings.Hedging: Delay %v is negative", s.Delay)
		case s.MinDelay < 0:
			return nil, configErr(name, "", -1, "Settings.Hedging: MinDelay %v is negative", s.MinDelay)
		case math.IsNaN(s.Budget) || s.Budget < 0 || s.Budget > 1:
			return nil, configErr(name, "", -1, "Settings.Hedging: Budget %v is outside [0, 1]", s.Budget)
		}
		if s.MinDelay == 0 {
			s.MinDelay = defaultHedgeMinDelay
		}
		if s.Budget == 0 {
			s.Budget = defaultHedgeBudget
		}
		out[name] = s
	}
	return out, nil
}

// hedgeGroups are the groups that hedge, by name, as the call path reads them (one atomic
// load, and one map lookup only when some group hedges).
type hedgeGroups map[string]*hedgeGroup

// hedgeGroup is one group's hedging: its settings and its state, which outlives a reload
// that keeps the group hedging.
type hedgeGroup struct {
	settings HedgingSettings
	*hedgeState
}

// hedgeState is a group's hedging budget, adaptive delay and counters. Safe for concurrent
// use; nothing in it takes a lock but the delay's recomputation.
type hedgeState struct {
	tokens                                    atomic.Int64 // budget, in thousandths of a hedge
	hedgeable, sent, won, lost, refused, none atomic.Int64
	delays                                    [2]latencyWindows // by hedgeMethodIndex
}

// hedgeMethodIndex returns the index in hedgeState.delays of method, one of the methods that
// may be hedged (ExecuteStreamingSql, StreamingRead), or -1.
func hedgeMethodIndex(method string) int {
	switch method {
	case spannerreq.MethodExecuteStreamingSQL:
		return 0
	case spannerreq.MethodStreamingRead:
		return 1
	}
	return -1
}

// setHedging makes h the hedging settings in force, from the next stream on. A group that
// hedged before keeps its counters, budget and measurements.
func (gme *GCPMultiEndpoint) setHedging(h hedgeSettings) {
	old := gme.hedging.Load()
	if len(h) == 0 {
		gme.hedging.Store(nil)
		return
	}
	next := make(hedgeGroups, len(h))
	for name, s := range h {
		st := (*hedgeState)(nil)
		if old != nil && (*old)[name] != nil {
			st = (*old)[name].hedgeState
		} else {
			st = &hedgeState{}
			st.tokens.Store(hedgeBucketMilli)
		}
		next[name] = &hedgeGroup{settings: s, hedgeState: st}
	}
	gme.hedging.Store(&next)
}

// hedgeGroupOf returns the hedging of group, nil when it does not hedge. It allocates nothing.
func (gme *GCPMultiEndpoint) hedgeGroupOf(group string) *hedgeGroup {
	h := gme.hedging.Load()
	if h == nil {
		return nil
	}
	return (*h)[group]
}

// earn credits one hedgeable call to the budget.
func (g *hedgeGroup) earn() {
	g.hedgeable.Add(1)
	add := int64(g.settings.Budget * 1000)
	for {
		t := g.tokens.Load()
		n := min(t+add, hedgeBucketMilli)
		if n == t || g.tokens.CompareAndSwap(t, n) {
			return
		}
	}
}

// spend takes one hedge from the budget for a stream asking for the try-th time (1 for the
// first, at most hedgeTries): false when fewer than hedgeTries-try+1 hedges are saved up. An
// earlier try leaves the last saved-up hedges to the streams that have waited longer
// (hedgeTries). The caller counts refusals.
func (g *hedgeGroup) spend(try int) bool {
	need := int64(hedgeTries-min(max(try, 1), hedgeTries)+1) * 1000
	for {
		t := g.tokens.Load()
		if t < need {
			return false
		}
		if g.tokens.CompareAndSwap(t, t-1000) {
			return true
		}
	}
}

// delay returns the hedge delay of method (an index of hedgeMethods) at now; false when the
// adaptive delay has too few measurements yet.
func (g *hedgeGroup) delay(method int, now time.Time) (time.Duration, bool) {
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
func (g *hedgeGroup) firstResponse(method int, now time.Time, d time.Duration) {
	if g.settings.Delay == 0 {
		g.delays[method].push(now, d)
	}
}

// latencyWindows measures times to first response in two windows of hedgeWindow (the
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
	if s := l.start.Load(); s != 0 && n-s < int64(hedgeWindow) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.start.Load()
	if s != 0 && n-s < int64(hedgeWindow) {
		return
	}
	next := 1 - l.cur.Load()
	if s != 0 && n-s >= 2*int64(hedgeWindow) { // idle for a whole window: forget both
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

// recompute sets cached to the p95 of both windows, or 0 with fewer than hedgeMinSamples.
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
	if total < hedgeMinSamples {
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
	if s := l.start.Load(); s == 0 || now.UnixNano()-s >= 2*int64(hedgeWindow) {
		return 0, false
	}
	c := l.cached.Load()
	return time.Duration(c), c > 0
}

// hedgingStatus returns group's hedging status; nil when it does not hedge.
func (gme *GCPMultiEndpoint) hedgingStatus(group string) *HedgingStatus {
	g := gme.hedgeGroupOf(group)
	if g == nil {
		return nil
	}
	return &HedgingStatus{
		Delay: g.settings.Delay, MinDelay: g.settings.MinDelay, Budget: g.settings.Budget,
		Hedgeable: g.hedgeable.Load(), Sent: g.sent.Load(), Won: g.won.Load(), Lost: g.lost.Load(),
		Refused: g.refused.Load(), NoEndpoint: g.none.Load(),
	}
}

// hedgingCounts returns the hedging status of every hedging group, by name; nil when none
// hedges.
func (gme *GCPMultiEndpoint) hedgingCounts() map[string]*HedgingStatus {
	h := gme.hedging.Load()
	if h == nil {
		return nil
	}
	out := make(map[string]*HedgingStatus, len(*h))
	for name := range *h {
		out[name] = gme.hedgingStatus(name)
	}
	return out
}
