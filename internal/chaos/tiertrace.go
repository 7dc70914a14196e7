package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// traceEvery is how often the tier trace samples the client's status.
const traceEvery = 250 * time.Millisecond

// tierSample is the tiered group as the client's status showed it at one instant.
type tierSample struct {
	at time.Duration // from the run's start
	// current is the index of the group's current endpoint (-1: not one of the topology's);
	// tier the index of its current tier, rampFrom the tier a switch back ramps from (-1:
	// none).
	current, tier, rampFrom int8
	// score is each endpoint's latency score (TierMemberStatus.Latency, 0: not measured),
	// inFlight its calls in flight, waiting its wait (TierMemberStatus.Waiting), available whether the group finds it Available, ready
	// whether its pool is READY.
	score     [NumEndpoints]time.Duration
	inFlight  [NumEndpoints]int32
	waiting   [NumEndpoints]time.Duration
	available [NumEndpoints]bool
	ready     [NumEndpoints]bool
}

// tierTrace samples the tiered group every traceEvery, so that the report can say where the
// longest tier way back spent its time: which member was usable, the scores the spread
// compared, the calls in flight, the ramp. Safe for concurrent use.
type tierTrace struct {
	quit, done chan struct{}

	mu      sync.Mutex // guards samples
	samples []tierSample
}

// startTierTrace samples gme's status from start until stop.
func startTierTrace(start time.Time, topo *topology, gme *spannerme.GCPMultiEndpoint) *tierTrace {
	t := &tierTrace{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(traceEvery)
		defer tick.Stop()
		for {
			select {
			case <-t.quit:
				return
			case <-tick.C:
			}
			if s, ok := sampleTiers(gme.Status(), topo.index, time.Since(start)); ok {
				t.mu.Lock()
				t.samples = append(t.samples, s)
				t.mu.Unlock()
			}
		}
	}()
	return t
}

func (t *tierTrace) stop() { close(t.quit); <-t.done }

// all returns the samples taken, in time order.
func (t *tierTrace) all() []tierSample {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]tierSample(nil), t.samples...)
}

// sampleTiers reads the tiered group out of st (index gives an address's endpoint index, -1
// for none); ok is false when st has no such group with tiers.
func sampleTiers(st spannerme.Status, index func(string) int, at time.Duration) (tierSample, bool) {
	s := tierSample{at: at, current: -1, rampFrom: -1}
	for _, p := range st.Pools {
		if i := index(p.Endpoint); i >= 0 && !p.Retired && p.Connectivity == "READY" {
			s.ready[i] = true
		}
	}
	for _, g := range st.Groups {
		if g.Name != groupNames[tieredGroup] || g.Tiers == nil {
			continue
		}
		s.current = int8(index(g.Current))
		s.tier, s.rampFrom = int8(g.Tiers.CurrentTier), int8(g.Tiers.SlowStartFrom)
		for _, e := range g.Endpoints {
			if i := index(e.Endpoint); i >= 0 {
				s.available[i] = e.State == spannerme.Available
			}
		}
		for _, m := range g.Tiers.Members {
			if i := index(m.Endpoint); i >= 0 {
				s.score[i], s.inFlight[i], s.waiting[i] = m.Latency, int32(m.InFlight), m.Waiting
			}
		}
		return s, true
	}
	return s, false
}

// traceEach is the step of the trace lines the report prints for a way back.
const traceEach = 500 * time.Millisecond

// traceOf describes the way back of tiered episode ep from its heal to end, one line per
// traceEach: the tier's successes of each member in that step (buckets, from t0), and the
// last sample taken in it (the group's current endpoint and tier, the ramp, and per member:
// available (A) or not (-), its pool READY (R) or not (-), its score, its calls in flight
// and its wait, TierMemberStatus.Waiting). Nil when no sample falls in the span.
func traceOf(ep episode, samples []tierSample, buckets [NumEndpoints][]int32, t0, end time.Time) []string {
	var out []string
	from, to := ep.heal.Sub(t0), end.Sub(t0)
	per := int(traceEach / shareBucket)
	for step := from.Truncate(traceEach); step < to; step += traceEach {
		var last *tierSample
		for i := range samples {
			if samples[i].at >= step && samples[i].at < step+traceEach {
				last = &samples[i]
			}
		}
		if last == nil {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "+%.1fs on %s tier %d", step.Seconds(), endpointOrNone(int(last.current)), last.tier)
		if last.rampFrom >= 0 {
			fmt.Fprintf(&b, " (ramp from tier %d)", last.rampFrom)
		}
		first := int(step / shareBucket)
		for e := range NumEndpoints {
			n := 0
			for i := first; i < first+per && i < len(buckets[e]); i++ {
				n += int(buckets[e][i])
			}
			flag := func(ok bool, c string) string {
				if ok {
					return c
				}
				return "-"
			}
			score := "unmeasured"
			if last.score[e] > 0 {
				score = last.score[e].Round(100 * time.Microsecond).String()
			}
			fmt.Fprintf(&b, " | %s %s%s %d ok, score %s, %d in flight", endpointName(e), flag(last.available[e], "A"), flag(last.ready[e], "R"), n, score, last.inFlight[e])
			if w := last.waiting[e]; w > 0 {
				fmt.Fprintf(&b, " (waiting %s)", w.Round(time.Millisecond))
			}
		}
		out = append(out, b.String())
	}
	return out
}

// endpointOrNone is endpointName(i), or "none" for -1.
func endpointOrNone(i int) string {
	if i < 0 {
		return "none"
	}
	return endpointName(i)
}
