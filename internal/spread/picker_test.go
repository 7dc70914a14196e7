package spread

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// fixture is a Registry on a fake clock and a Picker over it with a seeded random source.
type fixture struct {
	clk *clock.Fake
	reg *Registry
	p   *Picker
}

func newFixture(t interface{ Fatal(...any) }, opts Options) *fixture {
	f := &fixture{clk: clock.NewFake(time.Time{})}
	f.reg = NewRegistry(EndpointOptions{Clock: f.clk})
	opts.Resolve, opts.Clock = f.reg.Endpoint, f.clk
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(1, 2)).Uint64
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// countingClock counts the reads of its clock.
type countingClock struct {
	clock.Clock
	n atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.n.Add(1)
	return c.Clock.Now()
}

// score gives address a latency score by one answered call.
func (f *fixture) score(address string, latency time.Duration) {
	e := f.reg.Endpoint(address)
	e.Begin(0)
	e.Done(0, latency, false)
}

// shares picks n times from v and returns each address's share.
func (f *fixture) shares(v *multiendpoint.Tier, n int) map[string]float64 {
	counts := map[string]int{}
	for range n {
		counts[f.p.Pick(v, 0).Name()]++
	}
	out := map[string]float64{}
	for a, c := range counts {
		out[a] = float64(c) / float64(n)
	}
	return out
}

// shareOf picks n times from v for calls of kind k and returns e's share.
func (f *fixture) shareOf(v *multiendpoint.Tier, e *Endpoint, k Kind, n int) float64 {
	won := 0
	for range n {
		if f.p.Pick(v, k) == e {
			won++
		}
	}
	return float64(won) / float64(n)
}

func view(members ...string) *multiendpoint.Tier {
	return &multiendpoint.Tier{Members: members, Joined: make([]time.Time, len(members))}
}

func TestPick_ShareFollowsCost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		members  []string
		latency  map[string]time.Duration
		inflight map[string]int
		minShare float64
		want     map[string][2]float64 // share bounds
	}{
		{name: "equal costs: an even split", members: []string{"a", "b"},
			latency: map[string]time.Duration{"a": 5 * ms, "b": 5 * ms},
			want:    map[string][2]float64{"a": {0.45, 0.55}, "b": {0.45, 0.55}}},
		{name: "one 30ms slower: its minimum share only", members: []string{"a", "b"},
			latency: map[string]time.Duration{"a": 35 * ms, "b": 5 * ms},
			want:    map[string][2]float64{"a": {0.04, 0.06}, "b": {0.94, 0.96}}},
		{name: "0.1ms apart: nearly an even split", members: []string{"a", "b"}, // 52.2 %, 47.8 %
			latency: map[string]time.Duration{"a": 2 * ms, "b": 2100 * time.Microsecond},
			want:    map[string][2]float64{"a": {0.51, 0.535}, "b": {0.465, 0.49}}},
		{name: "calls in flight raise the cost", members: []string{"a", "b"}, // 7.0 %: 21 ms against 6 ms
			latency:  map[string]time.Duration{"a": 5 * ms, "b": 5 * ms},
			inflight: map[string]int{"a": 3},
			want:     map[string][2]float64{"a": {0.06, 0.08}, "b": {0.92, 0.94}}},
		{name: "four members, one slow: the three others share", members: []string{"a", "b", "c", "d"},
			latency: map[string]time.Duration{"a": 5 * ms, "b": 5 * ms, "c": 5 * ms, "d": 500 * ms},
			want:    map[string][2]float64{"a": {0.29, 0.35}, "b": {0.29, 0.35}, "c": {0.29, 0.35}, "d": {0.04, 0.06}}},
		{name: "a larger minimum share", members: []string{"a", "b"}, minShare: 0.2,
			latency: map[string]time.Duration{"a": 500 * ms, "b": 5 * ms},
			want:    map[string][2]float64{"a": {0.19, 0.21}, "b": {0.79, 0.81}}},
		{name: "minimum share x members over 1: uniform", members: []string{"a", "b", "c"}, minShare: 0.5,
			latency: map[string]time.Duration{"a": 500 * ms, "b": 5 * ms, "c": 5 * ms},
			want:    map[string][2]float64{"a": {0.31, 0.35}, "b": {0.31, 0.35}, "c": {0.31, 0.35}}},
		{name: "not measured yet: the initial 10ms", members: []string{"a", "b"}, // 83.7 %: 11 ms against 21 ms
			latency: map[string]time.Duration{"b": 20 * ms},
			want:    map[string][2]float64{"a": {0.825, 0.85}, "b": {0.15, 0.175}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{MinShare: tc.minShare})
			for a, l := range tc.latency {
				f.score(a, l)
			}
			for a, n := range tc.inflight {
				for range n {
					f.reg.Endpoint(a).Begin(0)
				}
			}
			got := f.shares(view(tc.members...), 100000)
			for a, b := range tc.want {
				if got[a] < b[0] || got[a] > b[1] {
					t.Errorf("share of %s = %.4f, want in [%v, %v] (all: %v)", a, got[a], b[0], b[1], got)
				}
			}
		})
	}
}

// Every pair of candidates a draw can give, for tiers of 2 to 5 members: the first drawn, i,
// wins with probability w_i / (w_i + w_j), w = 1 / (cost + tolerance)^3, and the other
// otherwise; on a tie each wins half. The draws are built bit by bit (choose's layout), so
// each (i, j) pair, j on either side of i, is tried with 1,000 draws whose top 24 bits are
// evenly spread over the values that are not a uniform pick: the count of i's wins is the
// probability to within one draw (and rounding).
func TestPick_TwoChoicesWeighByInverseCostCubed(t *testing.T) {
	weight := func(c float64) float64 { return 1 / math.Pow(c+tolerance, 3) }
	for n := 2; n <= 5; n++ {
		for _, tie := range []bool{false, true} {
			members := make([]string, n)
			for k := range members {
				members[k] = string(rune('a' + k))
			}
			var r uint64
			f := newFixture(t, Options{Rand: func() uint64 { return r }})
			uniform := uint64(0.05 * float64(n) * (1 << 24)) // MinShare × n of 2^24
			// Distinct latencies in an order unrelated to the members' positions.
			for k, a := range members {
				l := time.Duration([]int{3, 1, 4, 2, 5}[k]) * ms
				if tie {
					l = 4 * ms
				}
				f.score(a, l)
			}
			v := view(members...)
			ceilDiv := func(a, b uint64) uint64 { return (a + b - 1) / b }
			for i := range uint64(n) {
				for jj := range uint64(n - 1) {
					j := jj
					if j >= i {
						j++
					}
					ei, ej := f.reg.Endpoint(members[i]), f.reg.Endpoint(members[j])
					want := weight(ei.cost(0)) / (weight(ei.cost(0)) + weight(ej.cost(0)))
					const picks = 1000
					wins := 0
					for k := range picks {
						// Top 24 bits: the k-th of picks steps from uniform to 2^24 (not a
						// uniform pick); then i's 20 bits, then j's.
						top := uniform + uint64(k)*(1<<24-uniform)/picks
						r = top<<40 | ceilDiv(i<<20, uint64(n))<<20 | ceilDiv(jj<<20, uint64(n-1))
						switch got := f.p.Pick(v, 0); got {
						case ei:
							wins++
						case ej:
						default:
							t.Fatalf("n=%d, candidates %s and %s: picked %s", n, ei.Name(), ej.Name(), got.Name())
						}
					}
					if got := float64(wins) / picks; math.Abs(got-want) > 1.5/picks {
						t.Errorf("n=%d tie=%v, candidates %s (cost %v) and %s (cost %v): %s won %.3f of the draws, want %.3f",
							n, tie, ei.Name(), ei.cost(0), ej.Name(), ej.cost(0), ei.Name(), got, want)
					}
				}
			}
		}
	}
}

// A tier of one member is that member, without a random number.
func TestPick_OneMemberDrawsNothing(t *testing.T) {
	draws := 0
	f := newFixture(t, Options{Rand: func() uint64 { draws++; return 0 }})
	v := view("a")
	for range 100 {
		if got := f.p.Pick(v, 0).Name(); got != "a" {
			t.Fatalf("Pick = %q", got)
		}
	}
	if draws != 0 {
		t.Fatalf("%d random numbers drawn for a tier of one", draws)
	}
}

// The picker follows the state machine's view: a member down leaves the pick at once, with no
// group switch.
func TestPick_FollowsTheTierView(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	switches := 0
	m, err := multiendpoint.New(multiendpoint.Options{Tiers: [][]string{{"a1", "a2"}, {"b"}}, Clock: clk,
		RecoveryTimeout: time.Second, SwitchingDelay: time.Second,
		InitialState: func(string) multiendpoint.State { return multiendpoint.Available },
		OnSwitch:     func(multiendpoint.Event) { switches++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f := newFixture(t, Options{})
	if got := f.shares(m.Tier(), 10000); got["a1"] < 0.4 || got["a2"] < 0.4 || got["b"] != 0 {
		t.Fatalf("shares with both members up: %v", got)
	}
	m.SetEndpointAvailability("a2", false)
	if got := f.shares(m.Tier(), 10000); got["a1"] != 1 {
		t.Fatalf("shares with a2 down: %v, want all on a1", got)
	}
	if switches != 0 {
		t.Fatalf("%d group switches, want none", switches)
	}
}

// The done-when of issue 28 on the pick: a switch back to a tier with a 20 s slow start, the
// tier's share over four 5 s windows rises monotonically and is at most 40 % in the first.
func TestPick_SwitchBackRampsTheTierShare(t *testing.T) {
	const window = 20 * time.Second
	clk := clock.NewFake(time.Time{})
	m, err := multiendpoint.New(multiendpoint.Options{Tiers: [][]string{{"a1", "a2"}, {"b"}}, Clock: clk, SlowStart: window,
		InitialState: func(e string) multiendpoint.State {
			if e == "b" {
				return multiendpoint.Available
			}
			return multiendpoint.Unavailable
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f := newFixture(t, Options{SlowStart: window})
	f.clk = clk
	reads := &countingClock{Clock: clk}
	f.p.clock = reads
	m.SetEndpointAvailability("a1", true)
	m.SetEndpointAvailability("a2", true)
	var shares []float64
	for w := range 4 {
		tier := 0
		const picks = 5000
		for i := range picks {
			clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(w)*5*time.Second + time.Duration(i)*5*time.Second/picks))
			if a := f.p.Pick(m.Tier(), 0).Name(); a != "b" {
				tier++
			}
		}
		shares = append(shares, float64(tier)/picks)
	}
	t.Logf("the tier's share by 5s window: %.3f", shares)
	if shares[0] > 0.40 {
		t.Errorf("share in the first 5s = %.3f, want at most 0.40 (all: %v)", shares[0], shares)
	}
	for i := 1; i < len(shares); i++ {
		if shares[i] <= shares[i-1] {
			t.Errorf("share does not rise: %v", shares)
		}
	}
	clk.Set(time.Date(2026, 1, 1, 0, 0, 20, 0, time.UTC))
	if got := f.shares(m.Tier(), 1000); got["b"] != 0 {
		t.Errorf("after the window: b still has %v", got["b"])
	}
	// Once the ramp is over a pick reads the clock no more.
	before := reads.n.Load()
	f.shares(m.Tier(), 1000)
	if n := reads.n.Load() - before; n != 0 {
		t.Errorf("%d picks read the clock after the ramp", n)
	}
}

// The old tier fails during the ramp: every call goes to the new tier at once.
func TestPick_RampEndsWhenTheOldTierFails(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	m, err := multiendpoint.New(multiendpoint.Options{Tiers: [][]string{{"a"}, {"b"}}, Clock: clk, SlowStart: time.Minute,
		InitialState: func(e string) multiendpoint.State {
			if e == "b" {
				return multiendpoint.Available
			}
			return multiendpoint.Unavailable
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f := newFixture(t, Options{SlowStart: time.Minute})
	f.p.clock = clk
	m.SetEndpointAvailability("a", true)
	clk.Advance(time.Second)
	if got := f.shares(m.Tier(), 10000); got["b"] < 0.85 {
		t.Fatalf("right after the switch back b has %v, want about 0.9", got["b"])
	}
	m.SetEndpointAvailability("b", false)
	if got := f.shares(m.Tier(), 10000); got["a"] != 1 {
		t.Fatalf("after b failed: %v, want all on a", got)
	}
}

// A member that joins a tier ramps from the minimum weight while its peers keep their cost.
func TestPick_JoiningMemberRamps(t *testing.T) {
	const window = 20 * time.Second
	f := newFixture(t, Options{SlowStart: window})
	start := f.clk.Now()
	f.clk.Advance(time.Minute)
	f.score("a", 5*ms)
	f.score("b", 5*ms)
	joined := f.clk.Now()
	var shares []float64
	for w := range 4 {
		f.clk.Set(joined.Add(time.Duration(w)*5*time.Second + 2500*ms))
		v := &multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{start, joined}}
		// Keep three calls in flight on a: b wins nearly every comparison (97.7 %), and is
		// taken with its weight.
		for range 3 {
			f.reg.Endpoint("a").Begin(0)
		}
		shares = append(shares, f.shares(v, 20000)["b"])
		for range 3 {
			f.reg.Endpoint("a").Done(0, 5*ms, false)
		}
	}
	t.Logf("the joining member's share by 5s window: %.3f", shares)
	if !slices.IsSorted(shares) || shares[0] > 0.2 || shares[3] < 0.75 {
		t.Fatalf("the joining member's shares by window: %v, want rising from the minimum share", shares)
	}
}

func TestWeight_EnvoySlowStart(t *testing.T) {
	w := 20 * time.Second
	for _, tc := range []struct {
		elapsed time.Duration
		aggr    float64
		want    float64
	}{
		{0, 1, 0.1}, // max(0, 1s)/20s = 0.05 < the floor
		{2 * time.Second, 1, 0.1},
		{5 * time.Second, 1, 0.25},
		{10 * time.Second, 1, 0.5},
		{5 * time.Second, 2, 0.5}, // sqrt(0.25)
		{10 * time.Second, 0.5, 0.25},
		{20 * time.Second, 1, 1},
		{time.Hour, 1, 1},
	} {
		if got := Weight(tc.elapsed, w, 1/tc.aggr, 0.1); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Weight(%v, aggression %v) = %v, want %v", tc.elapsed, tc.aggr, got, tc.want)
		}
	}
	if got := Weight(time.Second, 0, 1, 0.1); got != 1 {
		t.Errorf("Weight without a window = %v, want 1", got)
	}
}

func TestNew_InvalidOptions(t *testing.T) {
	resolve := func(string) *Endpoint { return nil }
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, "Resolve is nil"},
		{Options{Resolve: resolve, MinShare: -0.1}, "MinShare -0.1 is outside [0, 1]"},
		{Options{Resolve: resolve, MinShare: math.NaN()}, "MinShare NaN is outside [0, 1]"},
		{Options{Resolve: resolve, SlowStart: -1}, "negative SlowStart -1ns"},
		{Options{Resolve: resolve, Aggression: -1}, "Aggression -1 is not a positive number"},
		{Options{Resolve: resolve, Aggression: math.Inf(1)}, "Aggression +Inf is not a positive number"},
		{Options{Resolve: resolve, MinWeight: 2}, "MinWeight 2 is outside [0, 1]"},
	} {
		_, err := New(tc.opts)
		if !errors.Is(err, ErrInvalidOptions) || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions ending %q", tc.opts, err, tc.want)
		}
	}
}

// Property: whatever the view, the costs and the time, a pick is a member of the tier, or,
// during a ramp only, of the previous tier.
func TestProperty_PickIsInTheView(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := newFixture(t, Options{SlowStart: time.Duration(rapid.IntRange(0, 30).Draw(t, "window")) * time.Second,
			MinShare: rapid.Float64Range(0, 1).Draw(t, "minShare"),
			Rand:     rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0)).Uint64})
		start := f.clk.Now()
		addrs := []string{"a", "b", "c", "d", "e", "f"}
		for _, a := range addrs {
			if rapid.Bool().Draw(t, "scored") {
				f.score(a, time.Duration(rapid.IntRange(0, 1000).Draw(t, "latency"))*ms)
			}
			for range rapid.IntRange(0, 3).Draw(t, "inflight") {
				f.reg.Endpoint(a).Begin(0)
			}
		}
		for range rapid.IntRange(1, 20).Draw(t, "views") {
			perm := rapid.Permutation(addrs).Draw(t, "perm")
			n := rapid.IntRange(1, 4).Draw(t, "members")
			v := &multiendpoint.Tier{Members: perm[:n]}
			for range n {
				v.Joined = append(v.Joined, start.Add(time.Duration(rapid.IntRange(0, 60).Draw(t, "joined"))*time.Second))
			}
			if k := rapid.IntRange(0, 2).Draw(t, "previous"); k > 0 {
				v.Previous = perm[n : n+k]
				v.RampStart = start.Add(time.Duration(rapid.IntRange(0, 60).Draw(t, "ramp")) * time.Second)
			}
			f.clk.Set(start.Add(time.Duration(rapid.IntRange(0, 120).Draw(t, "now")) * time.Second))
			ramping := v.Previous != nil && f.p.window > 0 && f.clk.Now().Before(v.RampStart.Add(f.p.window))
			for range 50 {
				got := f.p.Pick(v, 0).Name()
				if !slices.Contains(v.Members, got) && !(ramping && slices.Contains(v.Previous, got)) {
					t.Fatalf("Pick = %q, view %+v at %v (ramping %v)", got, v, f.clk.Now().Sub(start), ramping)
				}
			}
		}
	})
}

// Picks race with the state machine's view changes (a view rebuilt by one picker while
// another reads it): every pick is one of the group's endpoints, and -race finds nothing.
func TestPick_ConcurrentWithViewChanges(t *testing.T) {
	m, err := multiendpoint.New(multiendpoint.Options{Tiers: [][]string{{"a", "b", "c"}, {"d"}},
		InitialState: func(string) multiendpoint.State { return multiendpoint.Available }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	reg := NewRegistry(EndpointOptions{})
	p, err := New(Options{Resolve: reg.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var toggler, pickers sync.WaitGroup
	toggler.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			m.SetEndpointAvailability([]string{"a", "b", "c"}[i%3], i%2 == 0)
		}
	})
	for range 2 {
		pickers.Go(func() {
			for range 20000 {
				e := p.Pick(m.Tier(), 0)
				e.Begin(0)
				if n := e.Name(); n != "a" && n != "b" && n != "c" && n != "d" {
					t.Errorf("Pick = %q", n)
				}
				e.Done(0, time.Millisecond, false)
			}
		})
	}
	pickers.Wait()
	close(stop)
	toggler.Wait()
}

// A member back in its tier after a fault starts with no score: the failed calls that
// measured its fault (ErrorPenalty each) no longer hold it at its minimum share, nor does a
// call held by the fault that ends after its return, failed or answered; a score fed after
// its return, or one whose latest sample was answered (a member that joins again for another
// reason), is kept.
func TestPick_MemberBackForgetsItsFault(t *testing.T) {
	f := newFixture(t, Options{})
	start := f.clk.Now()
	f.clk.Advance(time.Second)
	f.score("a", 5*ms)
	b := f.reg.Endpoint("b")
	b.Begin(0)
	b.Done(0, 0, true) // its path went: a failed call counts ErrorPenalty
	before := f.shares(&multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{start, start}}, 20000)["b"]
	f.clk.Advance(5 * time.Second)
	back := f.clk.Now()
	v := &multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{start, back}}
	after := f.shares(v, 20000)["b"]
	t.Logf("b's share with its fault's score: %.3f; back in the tier, before a sample: %.3f", before, after)
	if b.Stats().Latency != 0 || f.reg.Endpoint("a").Stats().Latency != 5*ms {
		t.Fatalf("scores after b came back: a %v, b %v; want a's 5ms kept, b's forgotten", f.reg.Endpoint("a").Stats().Latency, b.Stats().Latency)
	}
	if before > 0.07 || after < 0.12 {
		t.Fatalf("b's share: %.3f with its fault's score, %.3f back in the tier; want the minimum share (0.05), then at least 0.12 (10 ms unmeasured against a's 5 ms)", before, after)
	}
	// A call held by the fault that fails now, after b came back, counts nothing.
	b.Begin(0)
	b.Done(0, 6*time.Second, true)
	if b.Stats().Latency != 0 {
		t.Fatalf("a call that started before b came back and failed after set its score to %v", b.Stats().Latency)
	}
	// Nor does one held by the fault that is answered now, seconds late.
	b.Begin(0)
	b.Done(0, 6*time.Second, false)
	if b.Stats().Latency != 0 {
		t.Fatalf("a call that started before b came back and was answered after set its score to %v", b.Stats().Latency)
	}
	f.clk.Advance(10 * ms)
	f.score("b", 5*ms) // started after b came back: counted
	f.clk.Advance(time.Second)
	// a joins again (say a group was reconfigured): its latest sample was answered, kept.
	v2 := &multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{f.clk.Now(), back}}
	if got := f.shares(v2, 20000)["b"]; got < 0.45 || got > 0.55 || b.Stats().Latency != 5*ms {
		t.Fatalf("b measured at 5 ms after it came back: share %.3f, score %v; want an even split and the score kept", got, b.Stats().Latency)
	}
	if a := f.reg.Endpoint("a").Stats().Latency; a != 5*ms {
		t.Fatalf("a joined again with an answered latest sample: score %v, want 5ms kept", a)
	}
}

// A member whose path failed (its pool lost every connection, or health ejected it:
// PathFailed) comes back to its tier with no score, even when its latest sample was an
// answer: a call held by a blackhole is answered, seconds late, when the blackhole ends, and
// a probe after the fault is an answer too. A member that did not leave the tier after the
// failure (every endpoint ejected: they all stay available) keeps its score.
func TestPick_MemberBackAfterItsPathFailedForgetsItsScore(t *testing.T) {
	f := newFixture(t, Options{})
	start := f.clk.Now()
	f.clk.Advance(time.Second)
	f.score("a", 5*ms)
	f.score("b", 5*ms)
	a, b := f.reg.Endpoint("a"), f.reg.Endpoint("b")
	b.PathFailed()
	a.PathFailed()
	// The calls the fault held are answered as it ends.
	f.clk.Advance(4 * time.Second)
	b.Begin(0)
	b.Done(0, 3*time.Second, false)
	if got := b.Stats().Latency; got <= time.Second {
		t.Fatalf("b's score after a 3s answer: %v (the test's premise: the answer is counted while b is out)", got)
	}
	f.clk.Advance(2 * time.Second)
	back := f.clk.Now()
	// b left its tier and came back after the failure; a never left (its join is before it).
	v := &multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{start, back}}
	f.shares(v, 100)
	if got := b.Stats().Latency; got != 0 {
		t.Fatalf("b back in its tier after its path failed, its latest sample an answer: score %v, want none", got)
	}
	if got := a.Stats().Latency; got != 5*ms {
		t.Fatalf("a, which did not leave its tier: score %v, want its 5ms kept", got)
	}
	// Dropped once: a sample after the return is kept at the next view of the same join.
	f.clk.Advance(10 * ms)
	f.score("b", 5*ms)
	v2 := &multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{start, back}}
	if got := f.shares(v2, 20000)["b"]; got < 0.4 || b.Stats().Latency != 5*ms {
		t.Fatalf("b measured at 5ms after its return: share %.3f, score %v; want about half and the score kept", got, b.Stats().Latency)
	}
	// a leaves and comes back later: its path failure is now before its join, so it is
	// dropped then.
	f.clk.Advance(time.Second)
	v3 := &multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{f.clk.Now(), back}}
	f.shares(v3, 100)
	if got := a.Stats().Latency; got != 0 {
		t.Fatalf("a back in its tier after its path failed: score %v, want none", got)
	}
}

// A path that failed and works again drops the score at its recovery (PathRecovered), not
// only at a later join: a member that never left its tier (every member of the group
// ejected, so every one stays available) is back at its share at once, and the calls the
// fault held are not counted. A member that joined during the fault drops the score its
// failed calls gave it after the join at its recovery too. A recovery with no failure
// before it drops nothing, and a later join keeps the score measured since the recovery.
func TestPick_PathRecoveredDropsTheFaultsScore(t *testing.T) {
	f := newFixture(t, Options{})
	start := f.clk.Now()
	f.clk.Advance(time.Second)
	f.score("a", 5*ms)
	f.score("b", 5*ms)
	a, b := f.reg.Endpoint("a"), f.reg.Endpoint("b")
	v := &multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{start, start}}
	f.shares(v, 100)
	// Every member ejected: both stay in the view (every one kept available), b's calls fail
	// meanwhile, one is held.
	a.PathFailed()
	b.PathFailed()
	b.Begin(0)
	for range 3 {
		f.clk.Advance(time.Second)
		b.Begin(0)
		b.Done(0, 0, true)
	}
	if got := b.Stats().Latency; got < 500*ms {
		t.Fatalf("b's score after 3 failed calls: %v (the test's premise: the failures count ErrorPenalty)", got)
	}
	if got := f.shares(v, 20000)["b"]; got > 0.07 {
		t.Fatalf("b's share with its fault's score: %.3f, want its minimum (0.05) (the test's premise)", got)
	}
	f.clk.Advance(time.Second)
	b.PathRecovered()
	if got := b.Stats().Latency; got != 0 {
		t.Fatalf("b's score after its path recovered: %v, want none", got)
	}
	b.Done(0, 2*time.Second, false) // the held call, answered late
	if got := b.Stats().Latency; got != 0 {
		t.Fatalf("a call held by the fault and answered after the recovery set b's score to %v", got)
	}
	if got := f.shares(v, 20000)["b"]; got < 0.12 {
		t.Fatalf("b's share after its recovery: %.3f, want at least 0.12 (10 ms unmeasured against a's 5 ms)", got)
	}
	f.clk.Advance(10 * ms)
	f.score("b", 6*ms)
	b.PathRecovered() // no failure since the last drop
	if got := b.Stats().Latency; got != 6*ms {
		t.Fatalf("b's score after a recovery with no failure before it: %v, want its 6ms kept", got)
	}
	// a leaves its tier during the fault and joins it again while the fault lasts (ejected
	// first, then available again when b is ejected too): its score is dropped at the join,
	// and its calls fail after it.
	f.shares(&multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{f.clk.Now(), start}}, 100)
	if got := a.Stats().Latency; got != 0 {
		t.Fatalf("a back in its tier during the fault: score %v, want none", got)
	}
	f.clk.Advance(time.Second)
	a.Begin(0)
	a.Done(0, 0, true)
	f.clk.Advance(time.Second)
	a.PathRecovered()
	if got := a.Stats().Latency; got != 0 {
		t.Fatalf("a, joined during the fault, then failed: score %v after its recovery, want none", got)
	}
	// a is measured, and later leaves and rejoins its tier: the score measured since its
	// recovery is kept (the failure before it was dealt with at the recovery).
	f.clk.Advance(10 * ms)
	f.score("a", 4*ms)
	f.clk.Advance(time.Second)
	f.shares(&multiendpoint.Tier{Members: []string{"a", "b"}, Joined: []time.Time{f.clk.Now(), start}}, 100)
	if got := a.Stats().Latency; got != 4*ms {
		t.Fatalf("a's score measured after its recovery, at a later join: %v, want its 4ms kept", got)
	}
}

// A member whose calls hang loses the tier's calls before they end, even with no score yet:
// the chaos hour of issue 43 saw a member with no score take a tier's calls while 2 to 7 of
// them went unanswered for 2 s, beside a peer scored 594 ms.
func TestPick_MemberWhoseCallsHangLosesItsShare(t *testing.T) {
	f := newFixture(t, Options{})
	f.score("b", 594*ms)
	f.clk.Advance(time.Minute)
	a := f.reg.Endpoint("a")
	a.Begin(0) // two calls held by a fault of a's path
	a.Begin(0)
	a.PathFailed()
	f.clk.Advance(time.Second)
	a.PathRecovered() // a's path is back: no score, and the held calls do not wait
	for range 3 {
		a.Begin(0)
	}
	v := view("a", "b")
	f.clk.Advance(5 * ms) // within InitialLatency: a's calls weigh 10 ms each
	if got := f.shares(v, 20000)["a"]; got < 0.9 {
		t.Fatalf("a's share with 5 calls in flight, 3 of them 5ms old (cost 60ms against b's 594ms) = %.3f, want at least 0.9", got)
	}
	f.clk.Advance(995 * ms)
	a.Done(0, 2*time.Second, true) // a held call ends: it says nothing of the calls sent since
	f.clk.Advance(time.Second)     // 2s unanswered: 2s × 5 against 594 ms
	if got := f.shares(v, 20000)["a"]; got > 0.07 {
		t.Fatalf("a's share with 3 calls unanswered for 2s = %.3f, want about the minimum share (0.05)", got)
	}
	a.Done(0, 3*time.Second, true)  // the other held call
	a.Done(0, 2*time.Second, false) // one is answered: a waits no longer, its score is 2s
	a.Done(0, 2*time.Second, false)
	a.Done(0, 2*time.Second, false)
	if got := f.shares(v, 20000)["a"]; got > 0.09 {
		t.Fatalf("a's share with a 2s score = %.3f, want at most 0.09 (the minimum share and 1 in 40 of the rest)", got)
	}
}

// A misbehaving member that fails its calls at once (a peer that closes each connection as
// it opens, or answers UNAVAILABLE) must not look fast: each failed call counts ErrorPenalty
// (1 s), so it keeps only its minimum share. Its path failing and coming back drops its
// scores (it splits evenly again, TestPick_MemberBackAfterItsPathFailedForgetsItsScore), and
// one more failed call of a kind puts that kind back at the minimum: a cycle of the path
// costs one call of each kind it is picked for, not a share.
func TestPick_MemberThatFailsAtOnceKeepsOnlyItsMinimumShare(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.reg.Endpoint("a"), f.reg.Endpoint("b")
	for _, e := range []*Endpoint{a, b} {
		e.Begin(pointRead)
		e.Done(pointRead, 2*ms, false)
	}
	f.clk.Advance(time.Second)
	v := view("a", "b")
	share := func(k Kind) float64 { return f.shareOf(v, a, k, 20000) }
	if got := share(pointRead); got < 0.45 || got > 0.55 {
		t.Fatalf("a's share, both reading in 2ms = %.3f, want an even split", got)
	}
	for range 3 { // a fails its point reads in 100µs each, 10ms apart
		f.clk.Advance(10 * ms)
		a.Begin(pointRead)
		a.Done(pointRead, 100*time.Microsecond, true)
	}
	if got := share(pointRead); got > 0.07 {
		t.Fatalf("a's share of point reads after 3 failed in 100µs = %.3f, want about the minimum share (0.05)", got)
	}
	for cycle := range 3 { // the connection closes at once, again and again
		a.PathFailed()
		f.clk.Advance(10 * ms)
		a.PathRecovered()
		if got := share(pointRead); got < 0.45 || got > 0.55 {
			t.Fatalf("cycle %d: a's share of point reads with its path back = %.3f, want an even split (scores dropped)", cycle, got)
		}
		f.clk.Advance(ms) // a call sent on the new connection (one begun before the drop is not counted)
		a.Begin(pointRead)
		a.Done(pointRead, 100*time.Microsecond, true)
		if got := share(pointRead); got > 0.07 {
			t.Fatalf("cycle %d: a's share of point reads after one more failed read = %.3f, want about the minimum share", cycle, got)
		}
	}
}

// The same slowness behind every member (the database, not an endpoint) moves nothing: both
// members' calls wait alike, their costs stay alike, and the tier's calls stay split. Only
// the member whose own calls hang loses its share (TestPick_MemberWhoseCallsHangLosesItsShare).
func TestPick_SlownessBehindEveryMemberMovesNothing(t *testing.T) {
	f := newFixture(t, Options{})
	f.score("a", 20*ms)
	f.score("b", 20*ms)
	f.clk.Advance(time.Minute)
	a, b := f.reg.Endpoint("a"), f.reg.Endpoint("b")
	for range 3 {
		a.Begin(0)
		b.Begin(0)
	}
	f.clk.Advance(2 * time.Second) // every call unanswered for 2s, on both members
	if wa, wb := a.Stats().Waiting, b.Stats().Waiting; wa != 2*time.Second || wb != 2*time.Second {
		t.Fatalf("waits a %v, b %v; want 2s each", wa, wb)
	}
	if got := f.shares(view("a", "b"), 20000)["a"]; got < 0.45 || got > 0.55 {
		t.Fatalf("a's share with both members waiting alike = %.3f, want an even split", got)
	}
}

// Kinds of call in the tests: point reads and queries.
const (
	pointRead Kind = 1
	query     Kind = 2
)

// A member is compared with its peer on calls of the kind being picked for: one slow query
// on a member says nothing of its point reads (issue 43: a member that had served one query,
// 0.1-0.5 s to its first response on the emulator, looked 50 to 100 times slower than its
// peer on one score, and stayed near its minimum share for seconds).
func TestPick_ComparesMembersOnTheCallsKind(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.reg.Endpoint("a"), f.reg.Endpoint("b")
	for _, e := range []*Endpoint{a, b} {
		e.Begin(pointRead)
		e.Done(pointRead, 2*ms, false)
	}
	f.clk.Advance(time.Second) // a long gap: a's next sample would weigh 39 % on one score
	a.Begin(query)
	a.Done(query, 400*ms, false) // a served the tier's only query
	v := view("a", "b")
	count := func(k Kind) float64 { return f.shareOf(v, a, k, 20000) }
	if got := count(pointRead); got < 0.45 || got > 0.55 {
		t.Fatalf("a's share of point reads after one 400ms query on a = %.3f, want an even split (both read in 2ms)", got)
	}
	// Queries: a's is measured at 400 ms, b's not (InitialLatency, 10 ms): b is preferred until
	// one of its queries is measured.
	if got := count(query); got > 0.07 {
		t.Fatalf("a's share of queries (a 400ms, b not measured) = %.3f, want about the minimum share", got)
	}
	b.Begin(query)
	b.Done(query, 390*ms, false)
	if got := count(query); got < 0.45 || got > 0.55 {
		t.Fatalf("a's share of queries, both measured near 400ms = %.3f, want an even split", got)
	}
	// A member slow at every kind still loses its share of each.
	f.clk.Advance(time.Minute)
	for _, k := range []Kind{pointRead, query} {
		a.Begin(k)
		a.Done(k, 2*time.Second, false)
	}
	if got := count(pointRead); got > 0.07 {
		t.Fatalf("a's share of point reads once a reads in 2s = %.3f, want about the minimum share", got)
	}
	if got := count(query); got > 0.07 {
		t.Fatalf("a's share of queries once a queries in 2s = %.3f, want about the minimum share", got)
	}
	// A member back from a fault (every score dropped) is taken to be as fast as its peer at
	// each kind until it is measured: an even split of point reads, not 10 ms against 2 ms.
	a.PathFailed()
	a.PathRecovered()
	if got := count(pointRead); got < 0.45 || got > 0.55 {
		t.Fatalf("a's share of point reads, a not measured since its fault, b at 2ms = %.3f, want an even split", got)
	}
}

// A call in flight counts only beyond what its kind usually takes: a query running its usual
// time on a member costs its point reads nothing more than the call in flight, while one
// that hangs costs the time beyond it. A member with no score for the query's kind (back
// from a fault) is given its peer's.
func TestPick_WaitCountsBeyondWhatItsKindTakes(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.reg.Endpoint("a"), f.reg.Endpoint("b")
	for _, e := range []*Endpoint{a, b} {
		e.Begin(pointRead)
		e.Done(pointRead, 2*ms, false)
	}
	b.Begin(query)
	b.Done(query, 300*ms, false) // a has no query score
	f.clk.Advance(time.Minute)
	a.Begin(query) // a query on a, none on b
	f.clk.Advance(250 * ms)
	v := view("a", "b")
	share := func() float64 {
		n := 0
		for range 20000 {
			if f.p.Pick(v, pointRead) == a {
				n++
			}
		}
		return float64(n) / 20000
	}
	if got := share(); got < 0.45 || got > 0.55 {
		t.Fatalf("a's share of point reads, a query 250ms in flight on a (b's queries take 300ms) = %.3f, want an even split", got)
	}
	if o := a.overdue(f.clk.Now(), nil); o != 250000 {
		t.Fatalf("overdue with no score of the query's kind and no peer = %v µs, want the whole wait (250000)", o)
	}
	f.clk.Advance(time.Second) // 1.25 s: 950 ms beyond what b's queries take
	if o := a.overdue(f.clk.Now(), b); math.Abs(o-950000) > 1 {
		t.Fatalf("overdue = %v µs, want 950000 (1.25 s less b's 300 ms)", o)
	}
	if got := share(); got > 0.07 {
		t.Fatalf("a's share of point reads with a query hung 950ms beyond its kind's time = %.3f, want about the minimum share", got)
	}

	// A member whose own score for the kind measured a failure (1 s) is not given that second
	// to hang: the shorter of the two scores is the kind's usual time.
	c, d := f.reg.Endpoint("c"), f.reg.Endpoint("d")
	c.Begin(query)
	c.Done(query, 20*ms, true) // failed: the penalty, 1 s
	d.Begin(query)
	d.Done(query, 300*ms, false)
	f.clk.Advance(time.Minute)
	c.Begin(query)
	f.clk.Advance(1250 * ms)
	if o := c.overdue(f.clk.Now(), d); math.Abs(o-950000) > 1 {
		t.Fatalf("overdue with c's own 1s query score, d's 300ms = %v µs, want 950000 (beyond d's 300 ms)", o)
	}
	if o := c.overdue(f.clk.Now(), nil); math.Abs(o-250000) > 1 {
		t.Fatalf("overdue with c's own 1s query score, no peer = %v µs, want 250000", o)
	}
}
