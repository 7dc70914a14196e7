package multiendpoint

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// trackingClock is the real clock, keeping every timer it hands out so that a test can check
// that none is left pending and wait for callbacks that already started.
type trackingClock struct {
	mu     sync.Mutex
	timers []*trackedTimer
	wg     sync.WaitGroup // one per timer: done when its callback returns or Stop prevents it
}

type trackedTimer struct {
	t  clock.Timer
	wg *sync.WaitGroup
}

func (c *trackingClock) Now() time.Time { return clock.Real.Now() }

func (c *trackingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wg.Add(1)
	tt := &trackedTimer{wg: &c.wg}
	tt.t = clock.Real.AfterFunc(d, func() {
		defer c.wg.Done()
		f()
	})
	c.timers = append(c.timers, tt)
	return tt
}

func (t *trackedTimer) Stop() bool {
	stopped := t.t.Stop()
	if stopped {
		t.wg.Done()
	}
	return stopped
}

// pendingTimers stops every timer still scheduled and reports how many there were.
func (c *trackingClock) pendingTimers() int {
	c.mu.Lock()
	timers := append([]*trackedTimer(nil), c.timers...)
	c.mu.Unlock()
	n := 0
	for _, t := range timers {
		if t.Stop() {
			n++
		}
	}
	return n
}

// TestRace_ConcurrentCallers runs every entry point at once on the real clock with durations of
// a few milliseconds, under -race. It asserts no timing: only that Current and Status name
// endpoints that were configured, that events do too, that nothing panics, and that Close
// leaves no timer scheduled and no callback running.
func TestRace_ConcurrentCallers(t *testing.T) {
	universe := []string{"A", "B", "C", "D", "E", "F"}
	var configured sync.Map // every endpoint ever passed to New or SetEndpoints
	for _, e := range universe[:3] {
		configured.Store(e, true)
	}
	isConfigured := func(e string) bool { _, ok := configured.Load(e); return ok }

	var badEvents atomic.Int64
	var events atomic.Int64
	clk := &trackingClock{}
	m, err := New(Options{
		Name: "race", Endpoints: universe[:3], RecoveryTimeout: 2 * ms, SwitchingDelay: ms, Clock: clk,
		InitialState: func(e string) State {
			if e == "B" {
				return Available
			}
			return Recovering
		},
		OnSwitch: func(ev Event) {
			events.Add(1)
			if ev.Name != "race" || !isConfigured(ev.From) || !isConfigured(ev.To) || ev.From == ev.To {
				badEvents.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	const (
		budget     = 300 * time.Millisecond
		iterations = 20000 // per goroutine, whichever ends first
	)
	deadline := clock.Real.Now().Add(budget)
	var wg sync.WaitGroup
	var errs sync.Map // first failure per kind, reported after the run
	fail := func(kind, msg string) { errs.LoadOrStore(kind, msg) }
	run := func(seed uint64, body func(r *rand.Rand)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < iterations && clock.Real.Now().Before(deadline); i++ {
				body(r)
			}
		}()
	}
	// Reports also name "Z", which is never configured: it must be ignored, so Current,
	// Status and events naming it would fail the checks below.
	reported := append(slices.Clone(universe), "Z")
	for g := range 4 {
		run(uint64(g), func(r *rand.Rand) {
			m.SetEndpointAvailability(reported[r.IntN(len(reported))], r.IntN(2) == 0)
		})
	}
	run(10, func(r *rand.Rand) {
		list := r.Perm(len(universe))[:1+r.IntN(len(universe))]
		es := make([]string, len(list))
		for i, j := range list {
			es[i] = universe[j]
			configured.Store(es[i], true) // before SetEndpoints can make it current
		}
		if err := m.SetEndpoints(es); err != nil {
			fail("SetEndpoints", err.Error())
		}
	})
	run(11, func(r *rand.Rand) {
		if err := m.SetTimeouts(time.Duration(r.IntN(6))*ms, time.Duration(r.IntN(6))*ms); err != nil {
			fail("SetTimeouts", err.Error())
		}
	})
	for g := range 4 {
		run(uint64(20+g), func(*rand.Rand) {
			if c := m.Current(); !isConfigured(c) {
				fail("Current", "Current() = "+c)
			}
		})
	}
	run(30, func(*rand.Rand) {
		s := m.Status()
		if !isConfigured(s.Current) {
			fail("Status", "Status().Current = "+s.Current)
		}
		seen := map[string]bool{}
		for i, e := range s.Endpoints {
			if e.Priority != i || seen[e.Endpoint] || !isConfigured(e.Endpoint) {
				fail("Status", "inconsistent endpoints in Status")
			}
			seen[e.Endpoint] = true
		}
	})
	wg.Wait()
	errs.Range(func(k, v any) bool {
		t.Errorf("%s: %s", k, v)
		return true
	})
	if n := badEvents.Load(); n != 0 {
		t.Errorf("%d events named unconfigured endpoints or no change", n)
	}
	t.Logf("%d events", events.Load())

	// Leave a timer certainly scheduled, an hour away, so that Close has something to stop.
	if err := m.SetTimeouts(time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	configured.Store("G", true)
	if err := m.SetEndpoints([]string{"G", "A"}); err != nil { // G is new: Recovering for an hour
		t.Fatal(err)
	}
	m.Close()
	final := m.Current()
	if n := clk.pendingTimers(); n != 0 {
		t.Errorf("%d timers still scheduled after Close", n)
	}
	clk.wg.Wait() // callbacks that had already started when Close ran
	if m.Current() != final {
		t.Errorf("Current() changed after Close: %q -> %q", final, m.Current())
	}
	if !isConfigured(final) {
		t.Errorf("Current() = %q after Close", final)
	}
}
