package spread

import (
	"container/heap"
	"math/rand/v2"
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
		e := f.p.Pick(v, 0)
		e.Begin(0)
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
				ev.e.Done(0, ev.d, false)
			}
			continue
		}
		f.clk.Set(ev.at)
		if ev.e == nil {
			begin(ev.at)
			continue
		}
		ev.e.Done(0, ev.d, false)
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

// simulateSteady runs an open-loop load on v on the fixture's fake clock for d: a call
// arrives every 1/rate whatever the calls in flight, picks, and ends after latency(endpoint,
// since the start). It returns the calls started per endpoint in each bucket of width bucket.
func (f *fixture) simulateSteady(v *multiendpoint.Tier, rate float64, d, bucket time.Duration,
	latency func(address string, since time.Duration) time.Duration) []map[string]int {
	start := f.clk.Now()
	buckets := make([]map[string]int, d/bucket)
	for i := range buckets {
		buckets[i] = map[string]int{}
	}
	every := time.Duration(float64(time.Second) / rate)
	q := events{{at: start}}
	for q.Len() > 0 {
		ev := heap.Pop(&q).(event)
		if ev.at.Sub(start) >= d {
			if ev.e != nil {
				ev.e.Done(0, ev.d, false)
			}
			continue
		}
		f.clk.Set(ev.at)
		if ev.e != nil {
			ev.e.Done(0, ev.d, false)
			continue
		}
		e := f.p.Pick(v, 0)
		e.Begin(0)
		since := ev.at.Sub(start)
		buckets[since/bucket][e.Name()]++
		l := latency(e.Name(), since)
		heap.Push(&q, event{at: ev.at.Add(l), e: e, d: l})
		heap.Push(&q, event{at: ev.at.Add(every)})
	}
	return buckets
}

// shareOf returns a's share of the calls of buckets[from:to] ({a, b} the tier).
func shareOf(buckets []map[string]int, a, b string, from, to int) float64 {
	na, all := 0, 0
	for _, bk := range buckets[from:to] {
		na += bk[a]
		all += bk[a] + bk[b]
	}
	return float64(na) / float64(all)
}

// The done-when of issue 40 (3) at the picker: a tier [A B], 150 calls a second arriving
// at a steady rate (open loop: with 2 ms calls, mostly none in flight, so the costs compare
// latency scores alone), each call's latency jittered around its member's. Equally fast, each
// member's share in every 5 s window of 20 s is 35-65 %; A made 40 ms slower falls to at
// most 20 % within 2 s (and stays there); healed, it is back to 30 % within 10 s. The jitter
// matters: with exactly equal scores any pick is even, and the hard comparison of issue 28
// (the cheaper always wins) gave a difference of a few tenths of a millisecond 95 % of the
// calls.
func TestPick_SteadyRateEqualMembersShare(t *testing.T) {

	for _, tc := range []struct {
		name string
		base time.Duration
		seed uint64
	}{
		{"1ms", time.Millisecond, 1},
		{"2ms", 2 * time.Millisecond, 2},
		{"5ms", 5 * time.Millisecond, 3},
		{"2ms, another seed", 2 * time.Millisecond, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{Rand: rand.New(rand.NewPCG(tc.seed, 7)).Uint64})
			v := view("a", "b")
			jitter := rand.New(rand.NewPCG(tc.seed, 11))
			var slower time.Duration // A's extra latency
			latency := func(a string, _ time.Duration) time.Duration {
				l := time.Duration(float64(tc.base) * (0.5 + jitter.Float64())) // base ± 50 %
				if a == "a" {
					l += slower
				}
				return l
			}
			const rate = 150
			sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
			f.simulateSteady(v, rate, sec(5), time.Second, latency) // warm up
			even := f.simulateSteady(v, rate, sec(20), 5*time.Second, latency)
			var shares []float64
			for w := range even {
				shares = append(shares, shareOf(even, "a", "b", w, w+1))
			}
			slower = 40 * time.Millisecond
			slow := f.simulateSteady(v, rate, sec(8), 250*time.Millisecond, latency)
			slower = 0
			healed := f.simulateSteady(v, rate, sec(15), 250*time.Millisecond, latency)
			// Shares over 1 s windows, every 250 ms: window k ends at (k+4) × 250 ms.
			windows := func(b []map[string]int) []float64 {
				var s []float64
				for k := 0; k+4 <= len(b); k++ {
					s = append(s, shareOf(b, "a", "b", k, k+4))
				}
				return s
			}
			ws, wh := windows(slow), windows(healed)
			down := -1 // the first 1 s window from which on A's share stays at most 20 %
			for k := len(ws) - 1; k >= 0 && ws[k] <= 0.20; k-- {
				down = k
			}
			up := -1 // the first 1 s window with A's share at least 30 %
			for k, s := range wh {
				if s >= 0.30 {
					up = k
					break
				}
			}
			end := func(k int) time.Duration { return time.Duration(k+4) * 250 * time.Millisecond }
			t.Logf("A's share per 5 s window, equally fast: %.3f; 40 ms slower: at most 20 %% from the 1 s window ending %v on; "+
				"healed: 30 %% in the 1 s window ending %v (then %.3f over the last 5 s)",
				shares, end(down), end(up), shareOf(healed, "a", "b", len(healed)-20, len(healed)))
			for w, s := range shares {
				if s < 0.35 || s > 0.65 {
					t.Errorf("equally fast: A's share in 5 s window %d = %.3f, want 35-65 %% (all: %.3f)", w, s, shares)
				}
			}
			if down < 0 || end(down) > 2*time.Second {
				t.Errorf("40 ms slower: A's share per 1 s window %.3f, want at most 20 %% from a window ending within 2 s", ws)
			}
			if up < 0 || end(up) > 10*time.Second {
				t.Errorf("healed: A's share per 1 s window %.3f, want at least 30 %% in a window ending within 10 s", wh)
			}
			if s := shareOf(healed, "a", "b", len(healed)-20, len(healed)); s < 0.35 {
				t.Errorf("healed: A's share over the last 5 s = %.3f, want at least 35 %%", s)
			}
		})
	}
}

// simulateMixed is simulateSteady with two kinds of call: point reads (kind read) arrive at
// rate a second, and one query (kind q) every queryEvery; latency(query) gives each call's
// latency. It returns each bucket's point reads started per endpoint.
func (f *fixture) simulateMixed(v *multiendpoint.Tier, rate float64, queryEvery, d, bucket time.Duration, read, q Kind,
	latency func(query bool) time.Duration) []map[string]int {
	start := f.clk.Now()
	buckets := make([]map[string]int, d/bucket)
	for i := range buckets {
		buckets[i] = map[string]int{}
	}
	type step struct {
		at    time.Time
		e     *Endpoint // a call that ends at at; nil: a call of the kind query says arrives
		k     Kind
		d     time.Duration
		query bool
	}
	every := time.Duration(float64(time.Second) / rate)
	pending := []step{{at: start}, {at: start.Add(queryEvery / 2), query: true}}
	for len(pending) > 0 {
		i := 0
		for j := range pending {
			if pending[j].at.Before(pending[i].at) {
				i = j
			}
		}
		ev := pending[i]
		pending = append(pending[:i], pending[i+1:]...)
		if ev.at.Sub(start) >= d {
			if ev.e != nil {
				ev.e.Done(ev.k, ev.d, false)
			}
			continue
		}
		f.clk.Set(ev.at)
		if ev.e != nil {
			ev.e.Done(ev.k, ev.d, false)
			continue
		}
		k, next := read, every
		if ev.query {
			k, next = q, queryEvery
		}
		e := f.p.Pick(v, k)
		e.Begin(k)
		if !ev.query {
			buckets[ev.at.Sub(start)/bucket][e.Name()]++
		}
		l := latency(ev.query)
		pending = append(pending, step{at: ev.at.Add(l), e: e, k: k, d: l}, step{at: ev.at.Add(next), query: ev.query})
	}
	return buckets
}

// Two equally fast members under light load, serving 20 point reads a second (2 ms ± 50 %)
// and a query a second (300 ms ± 50 % to its first response, as on the Cloud Spanner
// emulator): the point reads stay split, each member's share in every 5 s window 35-65 %. On
// one score per member (every call of one kind) each query made its member look tens of
// times slower for its next point reads (issue 43's way back after die-young, 5.2 s against a
// bound of 4.8 s), and this split failed (shares of 14-78 % per window on the first seed).
func TestPick_LightLoadOfMixedKindsSplitsEvenly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		read, q Kind
		seed    uint64
	}{
		{"seed 5", 2, 1, 5},
		{"seed 1", 2, 1, 1},
		{"seed 4", 2, 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{Rand: rand.New(rand.NewPCG(tc.seed, 7)).Uint64})
			jitter := rand.New(rand.NewPCG(tc.seed, 11))
			latency := func(query bool) time.Duration {
				base := 2 * time.Millisecond
				if query {
					base = 300 * time.Millisecond
				}
				return time.Duration(float64(base) * (0.5 + jitter.Float64()))
			}
			b := f.simulateMixed(view("a", "b"), 20, time.Second, 40*time.Second, 5*time.Second, tc.read, tc.q, latency)
			var shares []float64
			for w := range b {
				shares = append(shares, shareOf(b, "a", "b", w, w+1))
			}
			t.Logf("a's share of point reads per 5 s window: %.3f", shares)
			for w, s := range shares {
				if s < 0.35 || s > 0.65 {
					t.Fatalf("a's share of point reads in 5 s window %d = %.3f, want 35-65 %% (all: %.3f)", w, s, shares)
				}
			}
		})
	}
}
