package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock whose time moves only when Advance or Set is called. Due callbacks run
// synchronously inside Advance, in order of due time (then of scheduling), on the goroutine
// that calls Advance, and outside Fake's own lock: a callback may call Now, AfterFunc or Stop.
//
// Fake is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex // guards now, seq and timers
	now    time.Time
	seq    uint64
	timers []*fakeTimer
}

// NewFake returns a Fake clock that reads start. A zero start means 2026-01-01 00:00:00 UTC,
// so that times in test failures are readable.
func NewFake(start time.Time) *Fake {
	if start.IsZero() {
		start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return &Fake{now: start}
}

type fakeTimer struct {
	clock *Fake
	due   time.Time
	seq   uint64
	f     func()
}

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when the fake time reaches Now()+d. A callback due at or before
// the current fake time runs at the next Advance (Advance(0) will do).
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{clock: c, due: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop removes the timer if it has not run yet and reports whether it did.
func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range c.timers {
		if o == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the fake time forward by d, running every callback that falls due on the way
// at its own due time (Now() inside a callback returns that due time). Callbacks scheduled by
// callbacks run too if they fall due within d. d < 0 is treated as 0.
func (c *Fake) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	c.advanceTo(target)
}

// Set moves the fake time to t, running due callbacks as Advance does. A t before Now() runs
// only callbacks already due and leaves the time as it is: fake time never goes backwards.
func (c *Fake) Set(t time.Time) { c.advanceTo(t) }

func (c *Fake) advanceTo(target time.Time) {
	for {
		c.mu.Lock()
		if target.Before(c.now) {
			target = c.now // never backwards, but what is already due runs
		}
		next := c.nextDueLocked(target)
		if next == nil {
			if target.After(c.now) {
				c.now = target
			}
			c.mu.Unlock()
			return
		}
		if next.due.After(c.now) {
			c.now = next.due
		}
		c.mu.Unlock()
		next.f()
	}
}

// nextDueLocked removes and returns the earliest timer due at or before target, or nil.
// c.mu must be held.
func (c *Fake) nextDueLocked(target time.Time) *fakeTimer {
	if len(c.timers) == 0 {
		return nil
	}
	sort.SliceStable(c.timers, func(i, j int) bool {
		a, b := c.timers[i], c.timers[j]
		if !a.due.Equal(b.due) {
			return a.due.Before(b.due)
		}
		return a.seq < b.seq
	})
	t := c.timers[0]
	if t.due.After(target) {
		return nil
	}
	c.timers = c.timers[1:]
	return t
}

// Pending returns how many callbacks are scheduled and not yet run or stopped.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextDue returns the due time of the earliest pending callback, if any.
func (c *Fake) NextDue() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best time.Time
	for i, t := range c.timers {
		if i == 0 || t.due.Before(best) {
			best = t.due
		}
	}
	return best, len(c.timers) > 0
}
