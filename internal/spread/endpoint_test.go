package spread

import (
	"math"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

func TestEndpoint_ScoreIsATimeDecayedAverage(t *testing.T) {
	type sample struct {
		after   time.Duration // since the previous sample
		latency time.Duration
	}
	tau := 10 * time.Second
	for _, tc := range []struct {
		name    string
		samples []sample
		want    float64 // µs
	}{
		{"no sample: the initial latency", nil, 10000},
		{"first sample is the score", []sample{{0, 4 * ms}}, 4000},
		{"a sample τ later weighs 1-1/e", []sample{{0, 4 * ms}, {tau, 14 * ms}}, 4000 + 10000*(1-1/math.E)},
		{"a sample long after replaces the score", []sample{{0, 4 * ms}, {1000 * tau, 30 * ms}}, 30000},
		{"a sample at the same instant changes nothing", []sample{{0, 4 * ms}, {0, 400 * ms}}, 4000},
		{"a sample 1 ms later weighs 1 ms/τ", []sample{{0, 4 * ms}, {ms, 10004 * ms}}, 4000 + 10000000*(1-math.Exp(-1e-4))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Time{})
			e := NewEndpoint("a", EndpointOptions{Clock: clk, DecayTime: tau})
			for _, s := range tc.samples {
				clk.Advance(s.after)
				e.Begin(0)
				e.Done(0, s.latency, false)
			}
			if got := e.latency(0); math.Abs(got-tc.want) > 1e-6*tc.want {
				t.Fatalf("score = %v µs, want %v", got, tc.want)
			}
			if got := e.cost(0); math.Abs(got-tc.want) > 1e-6*tc.want {
				t.Fatalf("cost with nothing in flight = %v, want the score %v", got, tc.want)
			}
		})
	}
}

func TestEndpoint_CostCountsCallsInFlight(t *testing.T) {
	e := NewEndpoint("a", EndpointOptions{Clock: clock.NewFake(time.Time{})})
	e.Begin(0)
	e.Done(0, 2*ms, false)
	for range 3 {
		e.Begin(0)
	}
	if got, want := e.cost(0), 2000.0*4; got != want {
		t.Fatalf("cost with 3 in flight = %v, want %v", got, want)
	}
	s := e.Stats()
	if s.InFlight != 3 || s.Started != 4 || s.Latency != 2*ms || s.Cost != 8000 {
		t.Fatalf("Stats = %+v", s)
	}
}

// A call the endpoint did not answer counts for at least ErrorPenalty: an endpoint that fails
// fast must not look fast.
func TestEndpoint_FailedCallCountsForThePenalty(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	e := NewEndpoint("a", EndpointOptions{Clock: clk, ErrorPenalty: 500 * ms})
	e.Begin(0)
	e.Done(0, 1*ms, true)
	if got := e.Stats().Latency; got != 500*ms {
		t.Fatalf("score after a fast failure = %v, want the 500ms penalty", got)
	}
	clk.Advance(time.Hour)
	e.Begin(0)
	e.Done(0, 2*time.Second, true)
	if got := e.Stats().Latency; got != 2*time.Second {
		t.Fatalf("score after a slow failure = %v, want its own 2s", got)
	}
}

// A probe measures a path's round trip, not a call: it feeds no score, but an endpoint
// without calls whose latest sample was a failed call has its scores dropped once a probe
// answers (the path answers again). Once calls are answered, the next probe is not taken.
func TestEndpoint_ProbeDropsTheFailedScoresOfAnEndpointWithoutCalls(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	e := NewEndpoint("a", EndpointOptions{Clock: clk})
	if !e.Probe(7 * ms) {
		t.Fatal("a probe of an endpoint never called was not taken")
	}
	if s := e.Stats(); s.Scores != [Kinds]time.Duration{} {
		t.Fatalf("scores after a probe = %v, want none: a probe is no call", s.Scores)
	}
	clk.Advance(time.Hour)
	e.Begin(1)
	e.Done(1, 3*ms, false)
	clk.Advance(time.Hour)
	if e.Probe(50 * ms) {
		t.Fatal("a probe right after an answered call was taken")
	}
	if !e.Probe(50 * ms) { // no call since the previous probe
		t.Fatal("the second probe without calls was not taken")
	}
	if got := e.Stats().Scores[1]; got != 3*ms {
		t.Fatalf("kind 1's score after probes = %v, want the call's 3ms: the latest sample was an answer", got)
	}
	clk.Advance(time.Hour)
	e.Begin(2)
	e.Done(2, 20*ms, true) // a failed call: 1 s at least
	clk.Advance(time.Second)
	e.Probe(1 * ms) // not taken: a call ended since the previous probe
	if got := e.Stats().Scores[2]; got != time.Second {
		t.Fatalf("kind 2's score after a failed call = %v, want the penalty (1s)", got)
	}
	clk.Advance(time.Second)
	if !e.Probe(2 * time.Second) { // a probe that reached its deadline: no answer
		t.Fatal("a probe with no call since the previous one was not taken")
	}
	e.Begin(1) // a call in flight (it may hang): no drop either
	e.Probe(1 * ms)
	if got := e.Stats().Scores[2]; got != time.Second {
		t.Fatalf("kind 2's score after a probe at its deadline and one with a call in flight = %v, want the penalty kept (1s)", got)
	}
	e.Done(1, 3*time.Second, true) // it fails
	clk.Advance(time.Second)
	e.Probe(1 * ms) // not taken: a call ended since
	if !e.Probe(1 * ms) {
		t.Fatal("a probe with no call since the previous one was not taken")
	}
	if s := e.Stats(); s.Scores != [Kinds]time.Duration{} {
		t.Fatalf("scores once a probe answered after a failed call, nothing in flight = %v, want none", s.Scores)
	}
}

// Concurrent calls: the counts return to zero and the score stays within the samples.
func TestEndpoint_ConcurrentCalls(t *testing.T) {
	e := NewEndpoint("a", EndpointOptions{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := Kind(i % 3) // three kinds, each goroutine on all of them
				e.Begin(k)
				e.Done(k, time.Duration(1+(g+i)%5)*ms, false)
			}
		})
	}
	wg.Wait()
	s := e.Stats()
	if s.InFlight != 0 || s.Started != 16000 || s.Latency < 1*ms || s.Latency > 5*ms {
		t.Fatalf("Stats = %+v", s)
	}
	for k := range Kinds {
		if n := e.kindFlight[k].Load(); n != 0 {
			t.Fatalf("kind %d: %d calls in flight once every call ended, want 0", k, n)
		}
		if sc := s.Scores[k]; k < 3 && (sc < 1*ms || sc > 5*ms) || k >= 3 && sc != 0 {
			t.Fatalf("kind %d's score = %v, want within the samples (1-5ms) for kinds 0-2, none for others", k, sc)
		}
	}
	if e.waitFrom.Load() != 0 {
		t.Fatal("a wait is left once every call ended")
	}
}

func TestRegistry_SharesEndpointsByAddress(t *testing.T) {
	r := NewRegistry(EndpointOptions{})
	a := r.Endpoint("a:1")
	if r.Endpoint("a:1") != a || r.Endpoint("b:1") == a || a.Name() != "a:1" {
		t.Fatal("Registry does not return one Endpoint per address")
	}
	r.Retain(map[string]bool{"b:1": true})
	if r.Endpoint("a:1") == a {
		t.Fatal("Retain kept an address not listed")
	}
}

// While calls are in flight and none has been answered for longer than the score and the
// usual time of the wait's first call together, the endpoint costs that excess per call:
// calls that hang count before they end, what they take as usual does not.
func TestEndpoint_CostCountsCallsWaitingLongerThanTheScore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		score    time.Duration // 0: none (InitialLatency, 10 ms)
		inFlight int
		after    time.Duration // since the calls began
		want     float64       // cost, µs
		waiting  time.Duration // Stats.Waiting
	}{
		{"nothing in flight: the score", 20 * ms, 0, time.Second, 20000, 0},
		{"waiting less than the score: the score", 20 * ms, 2, 15 * ms, 20000 * 3, 15 * ms},
		{"waiting longer than the score: the time beyond it", 20 * ms, 2, 500 * ms, 480000 * 3, 500 * ms},
		{"no score yet, waiting 2s", 0, 7, 2 * time.Second, 2e6 * 8, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Time{})
			e := NewEndpoint("a", EndpointOptions{Clock: clk})
			if tc.score != 0 {
				e.Begin(0)
				e.Done(0, tc.score, false)
			}
			clk.Advance(time.Minute)
			for range tc.inFlight {
				e.Begin(0)
			}
			clk.Advance(tc.after)
			if got := e.cost(0); math.Abs(got-tc.want) > 1e-6*tc.want {
				t.Fatalf("cost = %v µs, want %v", got, tc.want)
			}
			if s := e.Stats(); s.Waiting != tc.waiting || math.Abs(s.Cost-tc.want) > 1e-6*tc.want {
				t.Fatalf("Stats = %+v, want Waiting %v and Cost %v", s, tc.waiting, tc.want)
			}
		})
	}
}

// The wait is how long the calls begun lately have gone without one of them ending: one call
// that lasts long while others end does not count, calls held by a fault stop counting when
// the score is dropped, and calls begun before a wait neither start nor end it.
func TestEndpoint_WaitStartsWithTheFirstCallSinceAnEnd(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	e := NewEndpoint("a", EndpointOptions{Clock: clk})
	e.Begin(0)
	e.Done(0, 20*ms, false)
	clk.Advance(time.Minute)
	e.Begin(0) // a long call
	clk.Advance(300 * ms)
	if w := e.Stats().Waiting; w != 300*ms {
		t.Fatalf("Waiting = %v with one call 300ms in flight and none ended since, want 300ms", w)
	}
	for range 10 {
		e.Begin(0)
		clk.Advance(10 * ms)
		e.Done(0, 10*ms, false)
		clk.Advance(100 * ms)
	}
	if s := e.Stats(); s.Waiting != 0 || s.InFlight != 1 || math.Abs(s.Cost-2*e.latency(0)) > 1e-6*s.Cost {
		t.Fatalf("Stats = %+v: the long call in flight, others ended since; want Waiting 0 and Cost the score × 2", s)
	}
	e.Begin(0)
	clk.Advance(30 * ms)
	if w := e.Stats().Waiting; w != 30*ms {
		t.Fatalf("Waiting = %v for a call begun 30ms ago with none ended since, want 30ms", w)
	}
	e.Done(0, 30*ms, true) // a failed call ends too
	if w := e.Stats().Waiting; w != 0 {
		t.Fatalf("Waiting = %v after a call ended, want 0", w)
	}
	// Calls held by a fault: the score and the wait are dropped when the path recovers.
	e.Begin(0)
	clk.Advance(2 * time.Second)
	e.PathFailed()
	if w := e.Stats().Waiting; w != 2*time.Second {
		t.Fatalf("Waiting = %v for a call held 2s, want 2s", w)
	}
	e.PathRecovered()
	clk.Advance(time.Second)
	if s := e.Stats(); s.Waiting != 0 || s.InFlight != 2 {
		t.Fatalf("Stats = %+v after the path recovered, want Waiting 0 with the 2 held calls in flight", s)
	}
	e.Begin(0)
	clk.Advance(40 * ms)
	if w := e.Stats().Waiting; w != 40*ms {
		t.Fatalf("Waiting = %v for a call begun after the recovery, want its 40ms", w)
	}
	// Calls begun before the wait end: the held call, failed, and the long call. Neither
	// says anything of the call sent since.
	e.Done(0, 3*time.Second+40*ms, true)
	e.Done(0, time.Minute, false)
	if s := e.Stats(); s.Waiting != 40*ms || s.InFlight != 1 {
		t.Fatalf("Stats = %+v after calls older than the wait ended, want Waiting 40ms, 1 in flight", s)
	}
	clk.Advance(10 * ms)
	e.Done(0, 50*ms, false) // the wait's own call
	e.Begin(0)
	clk.Advance(5 * ms)
	if w := e.Stats().Waiting; w != 5*ms {
		t.Fatalf("Waiting = %v for a call begun after the wait ended, want its 5ms", w)
	}
}

// Under concurrent calls the wait never exceeds the age of a call in flight. Each round
// starts an hour after the previous one ended, with nothing in flight, and the clock does
// not move during the round: every call in flight is 0 s old, so a wait read during the
// round is an overestimate (a Begin's half-done state exposing the end of an hour before).
func TestEndpoint_ConcurrentWaitNeverExceedsACallsAge(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	reg := NewRegistry(EndpointOptions{Clock: clk})
	e := reg.Endpoint("a")
	p, err := New(Options{Resolve: reg.Endpoint, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	v := view("a", "b")
	for round := range 2000 {
		clk.Advance(time.Hour)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for range 5 {
					e.Begin(0)
					e.Done(0, 0, false)
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for running := true; running; {
			select {
			case <-done:
				running = false
			default:
			}
			if w := e.Stats().Waiting; w != 0 {
				<-done
				t.Fatalf("round %d: Waiting = %v on a clock that has not moved", round, w)
			}
			p.Pick(v, 0)
		}
	}
	if s := e.Stats(); s.InFlight != 0 || s.Waiting != 0 {
		t.Fatalf("Stats = %+v after every call ended", s)
	}
}

// Each kind has its own score; Stats reports every kind's and, as Latency, the commonest
// kind's; a drop forgets every kind.
func TestEndpoint_ScoresEachKindApart(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	e := NewEndpoint("a", EndpointOptions{Clock: clk})
	for range 3 {
		e.Begin(1)
		e.Done(1, 2*ms, false)
	}
	e.Begin(2)
	e.Done(2, 400*ms, false)
	clk.Advance(10 * ms)
	e.Begin(1)
	e.Done(1, 2*ms, false) // 10 ms after the query: a single score would still hold most of it
	if got := e.latency(1); got != 2000 {
		t.Fatalf("kind 1's score = %v µs, want 2000 (its own samples only)", got)
	}
	if got := e.latency(2); got != 400000 {
		t.Fatalf("kind 2's score = %v µs, want 400000", got)
	}
	if got := e.latency(3); got != 10000 {
		t.Fatalf("kind 3's score = %v µs, want InitialLatency (10000): never measured", got)
	}
	s := e.Stats()
	if s.Latency != 2*ms || s.Scores[1] != 2*ms || s.Scores[2] != 400*ms || s.Scores[3] != 0 || s.Started != 5 {
		t.Fatalf("Stats = %+v, want Latency 2ms (kind 1, the commonest), Scores[1] 2ms, [2] 400ms, [3] 0, Started 5", s)
	}
	if Kind(1+Kinds).index() != 1 {
		t.Fatal("a kind is not taken modulo Kinds")
	}
	e.PathFailed()
	e.PathRecovered()
	if s := e.Stats(); s.Scores != [Kinds]time.Duration{} {
		t.Fatalf("Scores after a path failure and its recovery = %v, want none", s.Scores)
	}
}
