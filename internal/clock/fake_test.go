package clock

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// recorder collects "name@offset" for callbacks run by a Fake.
type recorder struct {
	c   *Fake
	mu  sync.Mutex
	got []string
}

func (r *recorder) f(name string) func() {
	return func() {
		at := r.c.Now().Sub(t0) // Now inside a callback: must not deadlock
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, fmt.Sprintf("%s@%v", name, at))
	}
}

func (r *recorder) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.got, " ")
	r.got = nil
	return s
}

func TestNewFake_ZeroStart(t *testing.T) {
	if got := NewFake(time.Time{}).Now(); !got.Equal(t0) {
		t.Errorf("NewFake(zero).Now() = %v, want %v", got, t0)
	}
	start := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	if got := NewFake(start).Now(); !got.Equal(start) {
		t.Errorf("NewFake(start).Now() = %v, want %v", got, start)
	}
}

func TestFake_RunsCallbacksInDueThenSchedulingOrder(t *testing.T) {
	c := NewFake(time.Time{})
	r := &recorder{c: c}
	c.AfterFunc(3*time.Second, r.f("c"))
	c.AfterFunc(time.Second, r.f("a1"))
	c.AfterFunc(2*time.Second, r.f("b"))
	c.AfterFunc(time.Second, r.f("a2")) // same due time as a1, scheduled later
	c.AfterFunc(10*time.Second, r.f("late"))
	if c.Pending() != 5 {
		t.Fatalf("Pending() = %d, want 5", c.Pending())
	}
	if due, ok := c.NextDue(); !ok || !due.Equal(t0.Add(time.Second)) {
		t.Errorf("NextDue() = %v, %v; want %v, true", due, ok, t0.Add(time.Second))
	}
	c.Advance(999 * time.Millisecond)
	if got := r.take(); got != "" {
		t.Errorf("before the first due time: ran %q", got)
	}
	c.Advance(2001 * time.Millisecond) // to exactly 3s: due-at-target runs
	if got, want := r.take(), "a1@1s a2@1s b@2s c@3s"; got != want {
		t.Errorf("ran %q, want %q", got, want)
	}
	if got := c.Now(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("Now() = %v after Advance, want t0+3s", got)
	}
	if c.Pending() != 1 {
		t.Errorf("Pending() = %d, want 1", c.Pending())
	}
	c.Advance(-time.Hour) // treated as 0
	if got := c.Now(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("Advance(negative) moved time to %v", got)
	}
}

func TestFake_CallbacksSchedulingCallbacks(t *testing.T) {
	c := NewFake(time.Time{})
	r := &recorder{c: c}
	var chain func(n int) func()
	chain = func(n int) func() {
		return func() {
			r.f(fmt.Sprint("x", n))()
			if n < 5 {
				c.AfterFunc(time.Second, chain(n+1)) // AfterFunc inside a callback: no deadlock
			}
		}
	}
	c.AfterFunc(time.Second, chain(1))
	c.AfterFunc(0, r.f("now")) // due at once: runs at the next Advance, even Advance(0)
	c.AfterFunc(-time.Second, r.f("past"))
	c.Advance(0)
	if got, want := r.take(), "past@0s now@0s"; got != want {
		t.Errorf("Advance(0) ran %q, want %q", got, want)
	}
	c.Advance(3 * time.Second) // x1 at 1s schedules x2 at 2s, which schedules x3 at 3s
	if got, want := r.take(), "x1@1s x2@2s x3@3s"; got != want {
		t.Errorf("ran %q, want %q", got, want)
	}
	c.Advance(time.Hour)
	if got, want := r.take(), "x4@4s x5@5s"; got != want {
		t.Errorf("ran %q, want %q", got, want)
	}
	// A callback scheduling with d <= 0 runs in the same Advance, at the same instant.
	c.AfterFunc(time.Second, func() { c.AfterFunc(0, r.f("nested")) })
	c.Advance(time.Second)
	if got, want := r.take(), "nested@1h0m4s"; got != want {
		t.Errorf("ran %q, want %q", got, want)
	}
}

func TestFake_Stop(t *testing.T) {
	c := NewFake(time.Time{})
	r := &recorder{c: c}
	a := c.AfterFunc(time.Second, r.f("a"))
	b := c.AfterFunc(2*time.Second, r.f("b"))
	if !a.Stop() {
		t.Error("first Stop of a pending timer = false, want true")
	}
	if a.Stop() {
		t.Error("second Stop = true, want false")
	}
	c.Advance(5 * time.Second)
	if got := r.take(); got != "b@2s" {
		t.Errorf("ran %q, want b@2s", got)
	}
	if b.Stop() {
		t.Error("Stop after the callback ran = true, want false")
	}
	// A callback may stop another timer due at the same time, and that timer then does not run.
	var victim Timer
	c.AfterFunc(time.Second, func() {
		if !victim.Stop() {
			t.Error("Stop from a callback = false, want true")
		}
	})
	victim = c.AfterFunc(time.Second, r.f("victim"))
	// Stopping its own timer from inside the callback reports false: it already started.
	var self Timer
	self = c.AfterFunc(time.Second, func() {
		if self.Stop() {
			t.Error("Stop of the running timer = true, want false")
		}
	})
	c.Advance(time.Second)
	if got := r.take(); got != "" {
		t.Errorf("ran %q, want nothing", got)
	}
	if c.Pending() != 0 {
		t.Errorf("Pending() = %d, want 0", c.Pending())
	}
	if _, ok := c.NextDue(); ok {
		t.Error("NextDue() reports a timer when none is pending")
	}
}

func TestFake_SetNeverGoesBackwards(t *testing.T) {
	c := NewFake(time.Time{})
	r := &recorder{c: c}
	c.AfterFunc(2*time.Second, r.f("a"))
	c.Set(t0.Add(5 * time.Second))
	if got := r.take(); got != "a@2s" {
		t.Errorf("Set ran %q, want a@2s", got)
	}
	c.AfterFunc(0, r.f("due-now"))
	c.AfterFunc(time.Second, r.f("future"))
	c.Set(t0.Add(time.Second)) // backwards: time stays, callbacks already due run
	if got := c.Now(); !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("Set(earlier) moved time to %v, want t0+5s", got)
	}
	if got := r.take(); got != "due-now@5s" {
		t.Errorf("Set(earlier) ran %q, want due-now@5s (and not the future callback)", got)
	}
	c.Set(t0.Add(6 * time.Second))
	if got := r.take(); got != "future@6s" {
		t.Errorf("ran %q, want future@6s", got)
	}
}

// A callback runs outside Fake's lock: it may call Now, AfterFunc, Stop, Pending, NextDue and
// even Advance without deadlocking. The test fails by timing out if it deadlocks.
func TestFake_CallbackMayCallBackIn(t *testing.T) {
	c := NewFake(time.Time{})
	other := c.AfterFunc(time.Hour, func() {})
	var ran atomic.Bool
	c.AfterFunc(time.Second, func() {
		_ = c.Now()
		_ = c.Pending()
		_, _ = c.NextDue()
		other.Stop()
		c.AfterFunc(time.Minute, func() {}).Stop()
		c.Advance(0)
		ran.Store(true)
	})
	c.Advance(time.Second)
	if !ran.Load() {
		t.Fatal("callback did not run")
	}
}

// Fake is safe for concurrent use: callers on several goroutines, under -race.
func TestFake_Concurrent(t *testing.T) {
	c := NewFake(time.Time{})
	var runs atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tm := c.AfterFunc(time.Duration(i%7)*time.Millisecond, func() { runs.Add(1) })
				if (i+g)%3 == 0 {
					tm.Stop()
				}
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	c.Advance(time.Hour)
	if c.Pending() != 0 {
		t.Errorf("Pending() = %d after advancing past every due time", c.Pending())
	}
	if runs.Load() == 0 {
		t.Error("no callback ran")
	}
}

func TestReal(t *testing.T) {
	before := time.Now()
	if now := Real.Now(); now.Before(before) {
		t.Errorf("Real.Now() = %v, before %v", now, before)
	}
	done := make(chan struct{})
	Real.AfterFunc(time.Millisecond, func() { close(done) })
	<-done // fails by timing out if the callback never runs
	var ran atomic.Bool
	tm := Real.AfterFunc(time.Hour, func() { ran.Store(true) })
	if !tm.Stop() {
		t.Error("Stop of a pending real timer = false, want true")
	}
	if ran.Load() {
		t.Error("a stopped real timer ran")
	}
}
