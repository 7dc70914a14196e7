package multiendpoint

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// F22: 500 clients see the top endpoint recover at the same moment. With SwitchingJitter J,
// each switches back SwitchingDelay×(1 + J×u) after the recovery: none before
// SwitchingDelay, none at or after SwitchingDelay×(1 + J), spread evenly over that window.
func TestCase_F22_SwitchingJitterSpreadsAFleetsSwitchBack(t *testing.T) {
	const (
		fleet   = 500
		delay   = 10 * time.Second
		jitter  = 0.5
		bins    = 10
		recover = time.Second // when A comes back, after the start
	)
	clk := clock.NewFake(time.Time{})
	start := clk.Now()
	src := rand.New(rand.NewPCG(22, 22)) // deterministic; the machines draw from one goroutine
	landed := make([]time.Duration, 0, fleet)
	for range fleet {
		m, err := New(Options{Endpoints: []string{"A", "B"}, SwitchingDelay: delay, SwitchingJitter: jitter, Rand: src.Float64,
			Clock: clk, InitialState: func(e string) State {
				if e == "B" {
					return Available
				}
				return Unavailable
			},
			OnSwitch: func(ev Event) {
				if ev.To == "A" {
					if ev.Reason != Recovery {
						t.Errorf("switch to A for %v, want recovery", ev.Reason)
					}
					landed = append(landed, ev.At.Sub(start.Add(recover)))
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if m.Current() != "B" {
			t.Fatalf("Current() = %q at the start, want B", m.Current())
		}
		clk.Set(start.Add(recover))
		m.SetEndpointAvailability("A", true)
		if s := m.Status(); s.PendingSwitch != "A" || s.PendingSwitchAt.Before(start.Add(recover+delay)) {
			t.Fatalf("pending switch %q at %v, want A no sooner than %v", s.PendingSwitch, s.PendingSwitchAt.Sub(start), recover+delay)
		}
	}
	if len(landed) != 0 {
		t.Fatalf("%d switched back before SwitchingDelay", len(landed))
	}
	clk.Advance(delay - 1) // 1ns before SwitchingDelay: nobody yet
	if len(landed) != 0 {
		t.Fatalf("%d switched back before SwitchingDelay", len(landed))
	}
	window := time.Duration(float64(delay) * jitter)
	clk.Advance(1 + window) // the end of the window, and 1ns past it
	if len(landed) != fleet {
		t.Fatalf("%d of %d switched back within SwitchingDelay×(1+SwitchingJitter)", len(landed), fleet)
	}
	var count [bins]int
	first, last := landed[0], landed[0]
	for _, d := range landed {
		if d < delay || d >= delay+window {
			t.Errorf("switch-back %v after the recovery, outside [%v, %v)", d, delay, delay+window)
			continue
		}
		first, last = min(first, d), max(last, d)
		count[int(float64(d-delay)/float64(window)*bins)]++
	}
	// Evenly spread: each tenth of the window gets about fleet/bins (50). With 500 uniform
	// draws a tenth holds fewer than 25 or more than 75 with probability below 1e-4; the
	// seed is fixed, so this is a check of the spreading, not a flaky test.
	for i, n := range count {
		if n < fleet/bins/2 || n > fleet/bins*3/2 {
			t.Errorf("tenth %d of the window got %d switch-backs, want about %d (all: %v)", i, n, fleet/bins, count)
		}
	}
	t.Logf("switch-backs from %v to %v after the recovery (window [%v, %v)); per tenth: %v", first, last, delay, delay+window, count)
}

// The jitter draw belongs to the target's return: retargeting keeps it, so a switch back to
// B after A came and went lands at B's own time (rule 3), jitter included.
func TestSwitchingJitterKeptAcrossRetargeting(t *testing.T) {
	draws := []float64{0, 0, 0, 0.5, 0.25} // New: A, B and C arrive; then B's return, then A's
	clk := clock.NewFake(time.Time{})
	start := clk.Now()
	m, err := New(Options{Endpoints: []string{"A", "B", "C"}, SwitchingDelay: time.Second, SwitchingJitter: 1, Clock: clk,
		InitialState: func(e string) State {
			if e == "C" {
				return Available
			}
			return Unavailable
		},
		Rand: func() float64 {
			if len(draws) == 0 {
				t.Fatal("more draws than returns")
			}
			u := draws[0]
			draws = draws[1:]
			return u
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	clk.Set(start.Add(time.Second))
	m.SetEndpointAvailability("B", true) // due at 1s + 1s×1.5
	if s := m.Status(); s.PendingSwitch != "B" || !s.PendingSwitchAt.Equal(start.Add(2500*time.Millisecond)) {
		t.Fatalf("pending %q at %v, want B at 2.5s", s.PendingSwitch, s.PendingSwitchAt.Sub(start))
	}
	clk.Set(start.Add(1200 * time.Millisecond))
	m.SetEndpointAvailability("A", true) // due at 1.2s + 1s×1.25
	if s := m.Status(); s.PendingSwitch != "A" || !s.PendingSwitchAt.Equal(start.Add(2450*time.Millisecond)) {
		t.Fatalf("pending %q at %v, want A at 2.45s", s.PendingSwitch, s.PendingSwitchAt.Sub(start))
	}
	clk.Set(start.Add(1300 * time.Millisecond))
	m.SetEndpointAvailability("A", false)
	if s := m.Status(); s.PendingSwitch != "B" || !s.PendingSwitchAt.Equal(start.Add(2500*time.Millisecond)) {
		t.Fatalf("after A dropped: pending %q at %v, want B at 2.5s, its own draw", s.PendingSwitch, s.PendingSwitchAt.Sub(start))
	}
	clk.Set(start.Add(2499 * time.Millisecond))
	if m.Current() != "C" {
		t.Fatalf("Current() = %q before B's time, want C", m.Current())
	}
	clk.Set(start.Add(2500 * time.Millisecond))
	if m.Current() != "B" {
		t.Fatalf("Current() = %q at B's time, want B", m.Current())
	}
}

// Zero jitter is today's behaviour and draws nothing; out-of-range draws are clamped.
func TestSwitchingJitterZeroAndClamping(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter float64
		draw   float64
		want   time.Duration // from the return to the switch
	}{
		{"zero jitter", 0, 0.9, time.Second},
		{"draw below 0 counts as 0", 1, -3, time.Second},
		{"NaN draw counts as 0", 1, math.NaN(), time.Second},
		{"draw of 1 or more stays below the window's end", 1, 7, 2*time.Second - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Time{})
			drew := 0
			m, err := New(Options{Endpoints: []string{"A", "B"}, SwitchingDelay: time.Second, SwitchingJitter: tc.jitter, Clock: clk,
				InitialState: knownDown, Rand: func() float64 { drew++; return tc.draw }})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			m.SetEndpointAvailability("B", true)
			back := clk.Now()
			m.SetEndpointAvailability("A", true)
			if got := m.Status().PendingSwitchAt.Sub(back); got != tc.want {
				t.Errorf("switch due %v after the return, want %v", got, tc.want)
			}
			if tc.jitter == 0 && drew != 0 {
				t.Errorf("Rand called %d times with no jitter", drew)
			}
		})
	}
}

func TestSwitchingJitterValidation(t *testing.T) {
	for _, j := range []float64{-0.1, 1.01, math.NaN(), math.Inf(1)} {
		m, err := New(Options{Name: "g", Endpoints: []string{"A"}, SwitchingJitter: j})
		if err == nil {
			m.Close()
			t.Errorf("New with SwitchingJitter %v succeeded", j)
			continue
		}
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "SwitchingJitter") {
			t.Errorf("New with SwitchingJitter %v = %v, want a *ConfigError naming SwitchingJitter", j, err)
		}
	}
	for _, j := range []float64{0, 0.5, 1} {
		m, err := New(Options{Name: "g", Endpoints: []string{"A"}, SwitchingJitter: j})
		if err != nil {
			t.Errorf("New with SwitchingJitter %v: %v", j, err)
			continue
		}
		m.Close()
	}
}

// SwitchingDelay 2000000h with SwitchingJitter 0.5 made
// SwitchingDelay×(1+J×u) overflow time.Duration, so the due time fell in the past and the
// switch back happened at once. The sum saturates: the switch is pending, far in the future.
func TestSwitchingJitter_HugeDelaySaturatesInsteadOfSwitchingAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		delay  time.Duration
		jitter float64
		draw   float64
	}{
		{"2000000h, J=0.5, u near 1", 2000000 * time.Hour, 0.5, 0.999},
		{"2000000h, J=0.5, u=0.5", 2000000 * time.Hour, 0.5, 0.5},
		{"MaxInt64, J=1, u near 1", math.MaxInt64, 1, math.Nextafter(1, 0)},
		{"MaxInt64, no jitter", math.MaxInt64, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Time{})
			start := clk.Now()
			var switched []Event
			m, err := New(Options{Endpoints: []string{"A", "B"}, SwitchingDelay: tc.delay, SwitchingJitter: tc.jitter,
				Rand: func() float64 { return tc.draw }, Clock: clk,
				InitialState: func(e string) State {
					if e == "B" {
						return Available
					}
					return Unavailable
				},
				OnSwitch: func(ev Event) { switched = append(switched, ev) }})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Current() != "B" {
				t.Fatalf("Current() = %q at the start, want B", m.Current())
			}
			switched = nil
			m.SetEndpointAvailability("A", true)
			clk.Advance(1000 * 24 * time.Hour)
			if m.Current() != "B" || len(switched) != 0 {
				t.Fatalf("after 1000 days Current() = %q, switches %v: want B, none (the delay overflowed)", m.Current(), switched)
			}
			s := m.Status()
			if s.PendingSwitch != "A" {
				t.Fatalf("PendingSwitch = %q, want A", s.PendingSwitch)
			}
			if min := start.Add(tc.delay); s.PendingSwitchAt.Before(min) {
				t.Errorf("PendingSwitchAt = %v, before start + SwitchingDelay %v", s.PendingSwitchAt, min)
			}
		})
	}
}

func TestSaturatingAdd(t *testing.T) {
	for _, tc := range []struct{ a, b, want time.Duration }{
		{1, 2, 3},
		{math.MaxInt64, 0, math.MaxInt64},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64 - 1, math.MaxInt64 - 1, math.MaxInt64},
		{7200000 * time.Second * 1000, 3600000 * time.Second * 1000, math.MaxInt64},
	} {
		if got := saturatingAdd(tc.a, tc.b); got != tc.want {
			t.Errorf("saturatingAdd(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if got := switchingJitter(math.MaxInt64, 1, math.Nextafter(1, 0)); got < 0 {
		t.Errorf("switchingJitter(MaxInt64, 1, ~1) = %d, want non-negative", got)
	}
}
