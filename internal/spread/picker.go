package spread

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// Options configures a Picker. The zero value is valid.
type Options struct {
	// MinShare is the share of the calls each member of a tier of n members gets at least:
	// a fraction MinShare×n of the picks is uniform over the members, the rest is power of
	// two choices. It keeps an endpoint penalised once measured (the minimum weight of gRFC
	// A100's slow start, draft, grpc/proposal pull request 498, and Envoy's MinWeightPercent
	// serve the same end). Zero means 0.05; it must be in [0, 1] (a negative value is an
	// error, NaN too); MinShare×n is capped at 1 (all uniform).
	MinShare float64
	// SlowStart is the slow start window of a member that joined its tier and of a tier
	// switched back to (multiendpoint.Options.SlowStart should be the same). Zero means no
	// slow start. Negative is an error.
	SlowStart time.Duration
	// Aggression shapes the ramp: weight = TimeFactor^(1/Aggression). Zero means 1
	// (linear); it must be positive otherwise.
	Aggression float64
	// MinWeight is the weight a ramping member or tier starts at (Envoy's MinWeightPercent
	// / 100). Zero means 0.1 (Envoy's default); it must be in [0, 1].
	MinWeight float64
	// Rand returns uniform 64-bit random numbers. Nil means math/rand/v2's Uint64 (safe for
	// concurrent use, lock-free). A deterministic source for tests need not be safe for
	// concurrent use if the test picks from one goroutine.
	Rand func() uint64
	// Clock reads the time of slow start ramps and of the calls waiting on an endpoint
	// (Endpoint.waiting); it is read by a pick only while a ramp lasts or when a candidate
	// has calls in flight, once. It must be the clock of the Endpoints that Resolve
	// returns (Registry's EndpointOptions.Clock). Nil means the real clock.
	Clock clock.Clock
	// Resolve returns the Endpoint of an address (normally from a Registry); required. It is
	// called when the tier view changes, never on a pick that finds the view unchanged.
	Resolve func(address string) *Endpoint
}

// ErrInvalidOptions is wrapped by the errors of New.
var ErrInvalidOptions = errors.New("invalid spread options")

// Picker picks the endpoint of each call of one MultiEndpoint, from its current tier view.
// Create it with New. Pick is safe for concurrent use, takes no lock and, while the view is
// unchanged, does not allocate.
type Picker struct {
	minShare  float64
	window    time.Duration
	invAggr   float64
	minWeight float64
	rand      func() uint64 // Options.Rand; nil: math/rand/v2's
	clock     clock.Clock
	resolve   func(string) *Endpoint
	set       atomic.Pointer[set]
}

// set is what a Picker picks from: one tier view resolved to Endpoints. Immutable but for
// rampOver.
type set struct {
	view     *multiendpoint.Tier
	members  []*Endpoint
	joined   []int64 // UnixNano of view.Joined
	previous []*Endpoint
	start    int64  // UnixNano of view.RampStart
	uniform  uint64 // a pick is uniform when the top 24 bits of its draw are below it
	// rest maps the top 24 bits of a draw that is not uniform, minus uniform, to [0, 1):
	// 1 / (2^24 - uniform); 0 when every pick is uniform.
	rest float64
	// rampUntil is when the last ramp of this set ends (UnixNano); 0: none. rampOver is set
	// by the first pick after it, so that later picks skip the clock.
	rampUntil int64
	rampOver  atomic.Bool
}

// New returns a Picker. It returns an error wrapping ErrInvalidOptions for an option out of
// its range or a nil Resolve.
func New(opts Options) (*Picker, error) {
	switch {
	case opts.Resolve == nil:
		return nil, fmt.Errorf("%w: Resolve is nil", ErrInvalidOptions)
	case !(opts.MinShare >= 0 && opts.MinShare <= 1):
		return nil, fmt.Errorf("%w: MinShare %v is outside [0, 1]", ErrInvalidOptions, opts.MinShare)
	case opts.SlowStart < 0:
		return nil, fmt.Errorf("%w: negative SlowStart %v", ErrInvalidOptions, opts.SlowStart)
	case !(opts.Aggression >= 0) || math.IsInf(opts.Aggression, 1):
		return nil, fmt.Errorf("%w: Aggression %v is not a positive number", ErrInvalidOptions, opts.Aggression)
	case !(opts.MinWeight >= 0 && opts.MinWeight <= 1):
		return nil, fmt.Errorf("%w: MinWeight %v is outside [0, 1]", ErrInvalidOptions, opts.MinWeight)
	}
	p := &Picker{minShare: opts.MinShare, window: opts.SlowStart, invAggr: 1, minWeight: opts.MinWeight,
		rand: opts.Rand, clock: opts.Clock, resolve: opts.Resolve}
	if p.minShare == 0 {
		p.minShare = 0.05
	}
	if opts.Aggression > 0 {
		p.invAggr = 1 / opts.Aggression
	}
	if p.minWeight == 0 {
		p.minWeight = 0.1
	}
	if p.clock == nil {
		p.clock = clock.Real
	}
	return p, nil
}

// Weight is the slow start weight of a member or tier elapsed after its join, for a window
// and 1/Aggression: max(minWeight, TimeFactor^(1/Aggression)), TimeFactor = max(elapsed, 1 s)
// / window, as Envoy's slow start mode; 1 once elapsed reaches the window (or with no
// window).
func Weight(elapsed, window time.Duration, invAggression, minWeight float64) float64 {
	if window <= 0 || elapsed >= window {
		return 1
	}
	f := math.Max(float64(elapsed), float64(time.Second)) / float64(window)
	if f >= 1 {
		return 1
	}
	return math.Max(minWeight, math.Pow(f, invAggression))
}

// Pick returns the endpoint for one call of kind k of the MultiEndpoint whose current tier is
// v (multiendpoint.MultiEndpoint.Tier). v must not be nil. The caller calls Begin on the
// endpoint when it starts the call and Done when it ends, with the same k.
//
// A tier of one member, with no ramp, is that member (no random number drawn). Otherwise:
// while a switch back ramps (v.Previous), the tier's share is its slow start weight and the
// rest goes to v.Previous; inside the chosen tier, a fraction MinShare×n of the picks is
// uniform and the rest power of two choices by cost: of the two candidates drawn, each wins
// with a probability proportional to 1/(cost + 1 ms)^3 (an even draw on equal costs; the cost
// of a call of kind k, Endpoint.cost, where a candidate that has not measured the kind is
// taken to be as fast as the other, at most InitialLatency, and the wait counts beyond the
// shorter of their scores for its first call's kind), and a
// winner that ramps more than the other candidate is taken with the ratio of their slow
// start weights (else the other).
func (p *Picker) Pick(v *multiendpoint.Tier, k Kind) *Endpoint {
	s := p.set.Load()
	if s == nil || s.view != v {
		s = p.rebuild(s, v)
	}
	members := s.members
	if s.rampUntil != 0 && !s.rampOver.Load() {
		return p.pickRamping(s, k.index())
	}
	if len(members) == 1 {
		return members[0]
	}
	return p.choose(s, members, nil, time.Time{}, k.index())
}

// pickRamping is Pick while a ramp of s may last.
func (p *Picker) pickRamping(s *set, k int) *Endpoint {
	t := p.clock.Now()
	now := t.UnixNano()
	if now >= s.rampUntil {
		s.rampOver.Store(true)
		if len(s.members) == 1 {
			return s.members[0]
		}
		return p.choose(s, s.members, nil, t, k)
	}
	if len(s.previous) > 0 {
		w := Weight(time.Duration(now-s.start), p.window, p.invAggr, p.minWeight)
		if w < 1 && unit(p.draw()) >= w {
			if len(s.previous) == 1 {
				return s.previous[0]
			}
			return p.choose(s, s.previous, nil, t, k)
		}
	}
	if len(s.members) == 1 {
		return s.members[0]
	}
	return p.choose(s, s.members, s.joined, t, k)
}

// tolerance is added to both costs (in microseconds) before they are compared: costs that
// differ by a fraction of it weigh nearly alike, whatever their ratio (a 0.3 ms difference
// between two 1 ms scores is noise, not a reason to prefer one).
const tolerance = 1000

// choose is the minimum share and power of two choices over members (at least 2), with a
// soft comparison of the two candidates' costs. joined, if not nil, gives each member's join
// time for its slow start weight at t. t is the time if the pick has read it already (a
// ramp), else zero: read here only when a candidate has calls in flight. It draws one random
// number, two with a ramp. k is the kind of the call (an index).
func (p *Picker) choose(s *set, members []*Endpoint, joined []int64, t time.Time, k int) *Endpoint {
	// One draw: the top 24 bits decide the minimum share (and the comparison below), the
	// next 20 bits pick i and the low 20 bits j (multiply and shift: no division; the bias,
	// under 2^-20 × n, is nil for a tier of a few members).
	n := uint64(len(members))
	r := p.draw()
	i := (r >> 20 & (1<<20 - 1)) * n >> 20
	if r>>40 < s.uniform {
		return members[i]
	}
	j := (r & (1<<20 - 1)) * (n - 1) >> 20
	// j skips i: j++ when j >= i (i, j < n, so j-i borrows into the top bit exactly when
	// j < i).
	j += 1 ^ (j-i)>>63
	// A soft comparison (the package comment says why): i wins with probability
	// cj'^3 / (ci'^3 + cj'^3), c' = cost + tolerance, its weight being its inverse cost
	// raised to the bias 3. Equal costs are an even draw and near-equal ones nearly so; a
	// member 3 times costlier than the other wins 1 in 28, 5 times 1 in 126. The top 24
	// bits, known here to be at least uniform, are uniform above it: u is uniform in [0, 1)
	// (2^24 × (1 - MinShare × n) steps), and independent of i and j.
	u := float64(r>>40-s.uniform) * s.rest
	ci, cj := latencies(members[i], members[j], k)
	if ni, nj := members[i].inflight.Load(), members[j].inflight.Load(); ni > 0 || nj > 0 {
		if t.IsZero() {
			t = p.clock.Now() // one read for both (Endpoint.busyCost)
		}
		if ni > 0 {
			ci = members[i].busyCost(k, ci, t, members[j])
		}
		if nj > 0 {
			cj = members[j].busyCost(k, cj, t, members[i])
		}
	}
	ci, cj = ci+tolerance, cj+tolerance
	wi, wj := cj*cj*cj, ci*ci*ci // bias 3
	// The draw goes either way at random, which a branch would mispredict half of the time:
	// i loses when u×(wi+wj) > wi, i.e. when the difference's sign bit is set, and swap then
	// exchanges i and j.
	swap := -(math.Float64bits(wi-u*(wi+wj)) >> 63) & (i ^ j)
	win, other := i^swap, j^swap
	if joined != nil {
		// The winner ramps more than the other candidate: taken with the ratio of their
		// weights (members that joined together ramp alike, and nothing changes).
		now := t.UnixNano()
		ww := Weight(time.Duration(now-joined[win]), p.window, p.invAggr, p.minWeight)
		wo := Weight(time.Duration(now-joined[other]), p.window, p.invAggr, p.minWeight)
		if ww < wo && unit(p.draw()) >= ww/wo {
			return members[other]
		}
	}
	return members[win]
}

// draw returns a uniform 64-bit random number from Options.Rand, or math/rand/v2's.
func (p *Picker) draw() uint64 {
	if p.rand != nil {
		return p.rand()
	}
	return rand.Uint64()
}

// unit maps a 64-bit random number to [0, 1).
func unit(r uint64) float64 { return float64(r>>11) * 0x1p-53 }

// rebuild resolves v into a set and publishes it (unless another goroutine published one
// for v meanwhile). It allocates; it runs once per view.
func (p *Picker) rebuild(old *set, v *multiendpoint.Tier) *set {
	s := &set{view: v, members: make([]*Endpoint, len(v.Members)), joined: make([]int64, len(v.Members))}
	for i, a := range v.Members {
		s.members[i] = p.resolve(a)
		s.joined[i] = v.Joined[i].UnixNano()
		s.members[i].forgetBefore(v.Joined[i]) // a member back in its tier after a fault: its score is stale
		if p.window > 0 && len(v.Members) > 1 {
			s.rampUntil = max(s.rampUntil, s.joined[i]+int64(p.window))
		}
	}
	if len(v.Previous) > 0 && p.window > 0 {
		s.start = v.RampStart.UnixNano()
		s.rampUntil = max(s.rampUntil, s.start+int64(p.window))
		for _, a := range v.Previous {
			s.previous = append(s.previous, p.resolve(a))
		}
	}
	// MinShare×n of the picks uniform: r < uniform with r uniform over 2^24.
	s.uniform = uint64(math.Min(p.minShare*float64(len(v.Members)), 1) * (1 << 24))
	if s.uniform < 1<<24 {
		s.rest = 1 / float64(1<<24-s.uniform)
	}
	if p.set.CompareAndSwap(old, s) {
		return s
	}
	if cur := p.set.Load(); cur != nil && cur.view == v {
		return cur
	}
	return s // another view won the race; s is still right for this pick
}
