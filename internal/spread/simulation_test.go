package spread

import (
	"container/heap"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// event is one step of the simulation: a call in flight that ends at `at` (e set), or a
// worker that picks again at `at` (e nil).
type event struct {
	at time.Time
	e  *Endpoint
	d  time.Duration
}

type events []event

func (q events) Len() int           { return len(q) }
func (q events) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q events) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)        { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// simulate runs workers closed-loop workers on v on the fixture's fake clock for d: each
// picks, calls (latency(endpoint, since the start)), spends think of its own once the call
// ends (the client's time between two calls, which a busy machine or -race makes
// milliseconds) and picks again. It returns the calls started per endpoint in each of the
// buckets of width bucket.
func (f *fixture) simulate(v *multiendpoint.Tier, workers int, d, bucket, think time.Duration,
	latency func(address string, since time.Duration) time.Duration) []map[string]int {
	start := f.clk.Now()
	buckets := make([]map[string]int, d/bucket)
	for i := range buckets {
		buckets[i] = map[string]int{}
	}
	var q events
	begin := func(now time.Time) {
		e := f.p.Pick(v)
		e.Begin()
		if b := int(now.Sub(start) / bucket); b < len(buckets) {
			buckets[b][e.Name()]++
		}
		l := latency(e.Name(), now.Sub(start))
		heap.Push(&q, event{at: now.Add(l), e: e, d: l})
	}
	for range workers {
		begin(start)
	}
	for q.Len() > 0 {
		ev := heap.Pop(&q).(event)
		if ev.at.Sub(start) >= d {
			if ev.e != nil {
				ev.e.Done(ev.d, false)
			}
			continue
		}
		f.clk.Set(ev.at)
		if ev.e == nil {
			begin(ev.at)
			continue
		}
		ev.e.Done(ev.d, false)
		if think == 0 {
			begin(ev.at)
		} else {
			heap.Push(&q, event{at: ev.at.Add(think)})
		}
	}
	return buckets
}

// The done-when of issue 28 at the picker: a tier [A1 A2] under 8 closed-loop workers; A1
// becomes 30 ms slower; from 2 s after the change on (over 3 s, as the end-to-end test
// TestTiersSlowerMemberLosesItsShare measures) it takes at most 15 % of the calls. The
// calls in flight react at once; the latency score within its τ (2 s by default). With the
// Spanner client's τ of 10 s the loaded rows fail (A1 at 15.7 % with a 10 ms peer and 5 ms
// of the client's own per call): its score has moved a fifth of the way to the new latency
// 2 s after the change.
func TestPick_SlowerMemberLosesItsShareWithinTwoSeconds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		base, think time.Duration
	}{
		{"2ms peer, idle client", 2 * time.Millisecond, 0},
		{"2ms peer, busy client", 2 * time.Millisecond, 5 * time.Millisecond},
		{"10ms peer, idle client", 10 * time.Millisecond, 0},
		{"10ms peer, busy client", 10 * time.Millisecond, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{})
			v := view("a1", "a2")
			// Warm up 5 s at equal latency, then A1 is 30 ms slower.
			f.simulate(v, 8, 5*time.Second, time.Second, tc.think, func(string, time.Duration) time.Duration { return tc.base })
			buckets := f.simulate(v, 8, 5*time.Second, 250*time.Millisecond, tc.think, func(a string, _ time.Duration) time.Duration {
				if a == "a1" {
					return tc.base + 30*time.Millisecond
				}
				return tc.base
			})
			var shares []float64
			a1, all := 0, 0
			for i, b := range buckets {
				shares = append(shares, float64(b["a1"])/float64(b["a1"]+b["a2"]))
				if i >= len(buckets)*2/5 { // from 2 s on
					a1 += b["a1"]
					all += b["a1"] + b["a2"]
				}
			}
			s := float64(a1) / float64(all)
			t.Logf("A1's share per 250 ms after it slowed down: %.3f; from 2 s to 5 s: %.3f", shares, s)
			if s > 0.15 {
				t.Fatalf("A1's share from 2 s to 5 s after the change = %.3f, want at most 0.15", s)
			}
		})
	}
}
