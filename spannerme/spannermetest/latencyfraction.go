package spannermetest

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// slowCalls is a SetLatencyFraction setting; immutable once stored.
type slowCalls struct {
	fraction float64
	latency  time.Duration
	rng      *lockedRand
}

// SetLatencyFraction delays a fraction of the calls that start from now on by d, on top of
// [Frontend.SetLatency]'s delay and before the mode acts on them, as SetLatency does: the
// tail of a frontend whose calls are mostly fast. Each call is delayed independently with
// probability fraction, drawn in the order calls reach the frontend from a source seeded
// anew by each SetLatencyFraction call (see [WithSeed]). It is kept across mode changes.
// Zero fraction or zero (or negative) d turns it off. It returns an error, and changes
// nothing, if fraction is outside [0, 1] or NaN. It does nothing after Close.
func (f *Frontend) SetLatencyFraction(fraction float64, d time.Duration) error {
	if !(fraction >= 0 && fraction <= 1) {
		return fmt.Errorf("spannermetest: SetLatencyFraction: fraction %v not in [0, 1]", fraction)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.behavior.Load().mode == FrontendClosed {
		return nil
	}
	if fraction == 0 || d <= 0 {
		f.slow.Store(nil)
		return nil
	}
	f.slow.Store(&slowCalls{fraction: fraction, latency: d, rng: &lockedRand{r: rand.New(rand.NewPCG(f.seed, 1))}})
	return nil
}

// slowDelay returns the delay SetLatencyFraction draws for a call that starts now.
func (f *Frontend) slowDelay() time.Duration {
	s := f.slow.Load()
	if s == nil || !s.rng.below(s.fraction) {
		return 0
	}
	return s.latency
}
