package spread

import (
	"container/heap"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// completion is one call in flight in the simulation: it ends at `at`.
type completion struct {
	at time.Time
	e  *Endpoint
	d  time.Duration
}

type completions []completion

func (c completions) Len() int           { return len(c) }
func (c completions) Less(i, j int) bool { return c[i].at.Before(c[j].at) }
func (c completions) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)        { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// simulate runs workers closed-loop workers on v on the fixture's fake clock for d: each
// picks, calls (latency(endpoint, now)) and picks again when the call ends. It returns the
// calls started per endpoint in each of the buckets of width bucket.
func (f *fixture) simulate(v *multiendpoint.Tier, workers int, d, bucket time.Duration,
	latency func(address string, since time.Duration) time.Duration) []map[string]int {
	start := f.clk.Now()
	buckets := make([]map[string]int, d/bucket)
	for i := range buckets {
		buckets[i] = map[string]int{}
	}
	var q completions
	begin := func(now time.Time) {
		e := f.p.Pick(v)
		e.Begin()
		if b := int(now.Sub(start) / bucket); b < len(buckets) {
			buckets[b][e.Name()]++
		}
		l := latency(e.Name(), now.Sub(start))
		heap.Push(&q, completion{at: now.Add(l), e: e, d: l})
	}
	for range workers {
		begin(start)
	}
	for q.Len() > 0 {
		c := heap.Pop(&q).(completion)
		if c.at.Sub(start) >= d {
			c.e.Done(c.d, false)
			continue
		}
		f.clk.Set(c.at)
		c.e.Done(c.d, false)
		begin(c.at)
	}
	return buckets
}

// The done-when of issue 28 at the picker: a tier [A1 A2] under 8 closed-loop workers; A1
// becomes 30 ms slower; within 2 s it takes at most 15 % of the calls (in the second second
// after the change, the share the test reports per 250 ms).
func TestPick_SlowerMemberLosesItsShareWithinTwoSeconds(t *testing.T) {
	f := newFixture(t, Options{})
	v := view("a1", "a2")
	base := 2 * time.Millisecond
	// Warm up 5 s at equal latency, then A1 is 30 ms slower.
	f.simulate(v, 8, 5*time.Second, time.Second, func(string, time.Duration) time.Duration { return base })
	buckets := f.simulate(v, 8, 2*time.Second, 250*time.Millisecond, func(a string, _ time.Duration) time.Duration {
		if a == "a1" {
			return base + 30*time.Millisecond
		}
		return base
	})
	var shares []float64
	a1, all := 0, 0
	for i, b := range buckets {
		s := float64(b["a1"]) / float64(b["a1"]+b["a2"])
		shares = append(shares, s)
		if i >= len(buckets)/2 {
			a1 += b["a1"]
			all += b["a1"] + b["a2"]
		}
	}
	t.Logf("A1's share per 250 ms after it slowed down: %.3f", shares)
	if s := float64(a1) / float64(all); s > 0.15 {
		t.Fatalf("A1's share in the second second = %.3f, want at most 0.15", s)
	}
	if shares[len(shares)-1] > 0.15 {
		t.Fatalf("A1's share in the last 250 ms = %.3f, want at most 0.15", shares[len(shares)-1])
	}
}
