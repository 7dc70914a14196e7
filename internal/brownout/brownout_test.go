package brownout

import (
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

const ms = time.Millisecond

var defaults = Rule{Ratio: 4, Margin: 200 * ms, Window: 10 * time.Second}

// step: after advancing by `after`, latencies of E1 and E2 (0: unknown), E2's availability,
// and whether E1 is then degraded.
type step struct {
	after        time.Duration
	e1, e2       time.Duration
	e2Down       bool
	wantDegraded bool
}

func TestGroupRule(t *testing.T) {
	two := 2 * time.Second
	cases := []struct {
		name  string
		steps []step
	}{
		{"brownout enters after Window", []step{
			{0, 400 * ms, 20 * ms, false, false},
			{two, 400 * ms, 20 * ms, false, false},
			{8 * time.Second, 400 * ms, 20 * ms, false, true}, // 10 s since the first
		}},
		{"a dip restarts the window", []step{
			{0, 400 * ms, 20 * ms, false, false},
			{8 * time.Second, 30 * ms, 20 * ms, false, false},
			{two, 400 * ms, 20 * ms, false, false},
			{8 * time.Second, 400 * ms, 20 * ms, false, false},
			{two, 400 * ms, 20 * ms, false, true},
		}},
		{"farther fallback: 60 vs 20 (3x, 40ms) never", []step{
			{0, 60 * ms, 20 * ms, false, false},
			{time.Minute, 60 * ms, 20 * ms, false, false},
		}},
		{"ratio without margin: 40 vs 5 (8x, 35ms) never", []step{
			{0, 40 * ms, 5 * ms, false, false},
			{time.Minute, 40 * ms, 5 * ms, false, false},
		}},
		{"margin without ratio: 900 vs 400 never", []step{
			{0, 900 * ms, 400 * ms, false, false},
			{time.Minute, 900 * ms, 400 * ms, false, false},
		}},
		{"equally slow never", []step{
			{0, 400 * ms, 400 * ms, false, false},
			{time.Minute, 400 * ms, 400 * ms, false, false},
		}},
		{"fallback unknown never", []step{
			{0, 400 * ms, 0, false, false},
			{time.Minute, 400 * ms, 0, false, false},
		}},
		{"hysteresis: between the bounds it stays degraded", []step{
			{0, 400 * ms, 20 * ms, false, false},
			{10 * time.Second, 400 * ms, 20 * ms, false, true},
			{two, 150 * ms, 20 * ms, false, true}, // below entry (7.5x but 130ms < 200) yet above exit (>=2x and >=100ms)
			{time.Minute, 150 * ms, 20 * ms, false, true},
		}},
		{"leaves after Window below the exit bound", []step{
			{0, 400 * ms, 20 * ms, false, false},
			{10 * time.Second, 400 * ms, 20 * ms, false, true},
			{two, 25 * ms, 20 * ms, false, true},
			{9 * time.Second, 25 * ms, 20 * ms, false, true},
			{time.Second, 25 * ms, 20 * ms, false, false},
		}},
		{"one slow sample in the exit window restarts it", []step{
			{0, 400 * ms, 20 * ms, false, false},
			{10 * time.Second, 400 * ms, 20 * ms, false, true},
			{two, 25 * ms, 20 * ms, false, true},
			{8 * time.Second, 400 * ms, 20 * ms, false, true},
			{two, 25 * ms, 20 * ms, false, true},
			{9 * time.Second, 25 * ms, 20 * ms, false, true},
			{time.Second, 25 * ms, 20 * ms, false, false},
		}},
		{"fallback down: not degraded at once", []step{
			{0, 400 * ms, 20 * ms, false, false},
			{10 * time.Second, 400 * ms, 20 * ms, false, true},
			{two, 400 * ms, 20 * ms, true, false},
			{two, 400 * ms, 20 * ms, false, false},
			{10 * time.Second, 400 * ms, 20 * ms, false, true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1000, 0))
			g := NewGroup(defaults)
			for i, s := range c.steps {
				clk.Advance(s.after)
				vs := g.Evaluate(clk.Now(), []Sample{
					{Endpoint: "e1", Latency: s.e1, Known: s.e1 > 0, Available: true},
					{Endpoint: "e2", Latency: s.e2, Known: s.e2 > 0, Available: !s.e2Down},
				})
				if vs[0].Degraded != s.wantDegraded || g.Degraded("e1") != s.wantDegraded {
					t.Fatalf("step %d: e1 degraded = %v, want %v", i, vs[0].Degraded, s.wantDegraded)
				}
				if vs[1].Degraded {
					t.Fatalf("step %d: e2 degraded", i)
				}
			}
		})
	}
}

func TestSingleEndpointNeverDegraded(t *testing.T) {
	g := NewGroup(defaults)
	now := time.Unix(0, 0)
	for i := 0; i < 10; i++ {
		now = now.Add(5 * time.Second)
		if v := g.Evaluate(now, []Sample{{Endpoint: "e1", Latency: time.Second, Known: true, Available: true}}); v[0].Degraded {
			t.Fatal("single endpoint degraded")
		}
	}
}

func TestChangedOncePerTransition(t *testing.T) {
	g := NewGroup(Rule{Ratio: 4, Margin: 200 * ms})
	now := time.Unix(0, 0)
	lat := []time.Duration{400, 400, 400, 20, 20, 400}
	var changes int
	for _, l := range lat {
		now = now.Add(time.Second)
		v := g.Evaluate(now, []Sample{{Endpoint: "e1", Latency: l * ms, Known: true, Available: true},
			{Endpoint: "e2", Latency: 20 * ms, Known: true, Available: true}})
		if v[0].Changed {
			changes++
		}
	}
	if changes != 3 {
		t.Fatalf("changes = %d, want 3 (in, out, in)", changes)
	}
}

// A degraded endpoint whose latency becomes unknown (its pool lost its connection and its
// samples) stays degraded, and after it reconnects still slow it stays degraded; only a Window
// of fast samples takes it back.
func TestDegradedStaysDegradedWhileUnmeasured(t *testing.T) {
	const ms = time.Millisecond
	g := NewGroup(Rule{Ratio: 4, Margin: 200 * ms, Window: 10 * time.Second})
	now := time.Time{}.Add(time.Hour)
	eval := func(lat time.Duration, known bool) bool {
		v := g.Evaluate(now, []Sample{{Endpoint: "e1", Latency: lat, Known: known, Available: true},
			{Endpoint: "e2", Latency: 20 * ms, Known: true, Available: true}})
		now = now.Add(2 * time.Second)
		return v[0].Degraded
	}
	for range 7 {
		eval(time.Second, true)
	}
	if !eval(time.Second, true) {
		t.Fatal("e1, 1s against 20ms for 14s, is not degraded")
	}
	if !eval(0, false) {
		t.Fatal("e1 stopped being degraded when its latency became unknown")
	}
	if !eval(time.Second, true) {
		t.Fatal("e1, reconnected and still slow, is not degraded")
	}
	for range 6 {
		eval(20*ms, true)
	}
	if eval(20*ms, true) {
		t.Fatal("e1, fast again for 12s, is still degraded")
	}
}
