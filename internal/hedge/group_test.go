package hedge

import (
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client's protos, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// An earlier ask leaves the last saved-up hedges to the later ones: the try-th ask needs
// Tries-try+1 hedges saved up, and spends one.
func TestHedgeBudgetKeepsTheLastForTheLongestWaiting(t *testing.T) {
	tests := []struct {
		saved    int64 // hedges saved up
		try      int
		want     bool
		wantLeft int64
	}{
		{saved: 10, try: 1, want: true, wantLeft: 9},
		{saved: 4, try: 1, want: true, wantLeft: 3},
		{saved: 3, try: 1, want: false, wantLeft: 3},
		{saved: 3, try: 2, want: true, wantLeft: 2},
		{saved: 2, try: 2, want: false, wantLeft: 2},
		{saved: 2, try: 3, want: true, wantLeft: 1},
		{saved: 1, try: 3, want: false, wantLeft: 1},
		{saved: 1, try: 4, want: true, wantLeft: 0},
		{saved: 0, try: 4, want: false, wantLeft: 0},
		{saved: 1, try: 9, want: true, wantLeft: 0},  // beyond Tries: as the last
		{saved: 3, try: 0, want: false, wantLeft: 3}, // below 1: as the first
	}
	for _, tt := range tests {
		var g Group
		g.state = &state{}
		g.SetSaved(tt.saved*1000 + 999)
		if got := g.spend(tt.try); got != tt.want || int64(g.saved()) != tt.wantLeft {
			t.Errorf("%d saved up, ask %d: spend = %v, %v left; want %v, %d left", tt.saved, tt.try, got, g.saved(), tt.want, tt.wantLeft)
		}
	}
}

// The budget is a token bucket: 10 hedges saved up at first, Budget of a hedge earned per
// hedgeable call, one spent per hedge; a last ask (try Tries) that finds none is refused.
func TestHedgeBudget(t *testing.T) {
	var h Hedger
	h.Set(map[string]Settings{"g": {Budget: 0.25, MinDelay: time.Millisecond}})
	g := h.Group("g")
	spent := 0
	for range 10 {
		if g.spend(Tries) {
			spent++
		}
	}
	if spent != 10 || g.spend(Tries) {
		t.Fatalf("spent %d of the 10 saved up, then one more", spent)
	}
	for range 3 {
		g.earn()
	}
	if g.spend(Tries) {
		t.Fatal("3 calls at 25% earned a whole hedge")
	}
	g.earn()
	if !g.spend(Tries) {
		t.Fatal("4 calls at 25% did not earn a hedge")
	}
	for range 1000 {
		g.earn()
	}
	if got := g.saved(); got != Bucket {
		t.Errorf("saved up after 1000 calls: %v, want the cap %v", got, Bucket)
	}
	if c := h.Group("g").Counts(); c.Hedgeable != 1004 {
		t.Errorf("counts %+v, want 1004 hedgeable", c)
	}
	// A reload keeps the state of a group that still hedges, drops the others'.
	h.Set(map[string]Settings{"g": {Budget: 0.5, MinDelay: time.Millisecond}, "h": {Budget: 0.5, MinDelay: time.Millisecond}})
	if g := h.Group("g"); g.Counts().Hedgeable != 1004 || g.Settings().Budget != 0.5 {
		t.Errorf("after a reload: %+v %+v, want the counts kept and the new budget", g.Counts(), g.Settings())
	}
	h.Set(nil)
	if h.Group("g") != nil || h.Groups() != nil {
		t.Error("hedging still on after it was removed")
	}
}

// The adaptive delay: none until MinSamples calls are measured, then the p95 of the
// last two windows (bucketed, rounded up to the bucket's bound), never below MinDelay, and
// none again once the group was idle for two windows.
func TestHedgeAdaptiveDelay(t *testing.T) {
	var h Hedger
	h.Set(map[string]Settings{"g": {MinDelay: 20 * time.Millisecond, Budget: 0.05}})
	g := h.Group("g")
	now := time.Unix(1000, 0)
	if _, ok := g.delay(0, now); ok {
		t.Fatal("a delay with no measurement")
	}
	for i := range 90 {
		g.firstResponse(0, now, time.Duration(i%10+1)*time.Millisecond)
	}
	for range 9 {
		g.firstResponse(0, now, 200*time.Millisecond)
	}
	if _, ok := g.delay(0, now); ok {
		t.Fatalf("a delay with %d measurements", MinSamples-1)
	}
	// The 100th: 90 calls at 1-10ms and 10 at 200ms, the p95 is about 200ms.
	g.firstResponse(0, now, 200*time.Millisecond)
	d, ok := g.delay(0, now)
	if !ok || d < 200*time.Millisecond || d > 240*time.Millisecond {
		t.Errorf("delay %v, %v; want about 200ms (its bucket's bound)", d, ok)
	}
	if _, ok := g.delay(1, now); ok {
		t.Error("the other method has a delay")
	}
	// Fast calls only, a window later: the p95 falls to the floor.
	later := now.Add(Window)
	for range 10 * MinSamples {
		g.firstResponse(0, later, time.Millisecond)
	}
	if d, ok := g.delay(0, later); !ok || d != 20*time.Millisecond {
		t.Errorf("delay %v, %v; want the 20ms floor", d, ok)
	}
	if _, ok := g.delay(0, later.Add(2*Window)); ok {
		t.Error("a delay after two idle windows")
	}
	// A fixed delay ignores the measurements.
	h.Set(map[string]Settings{"g": {Delay: 7 * time.Millisecond, MinDelay: 20 * time.Millisecond}})
	if d, ok := h.Group("g").delay(0, later); !ok || d != 7*time.Millisecond {
		t.Errorf("fixed delay %v, %v; want 7ms", d, ok)
	}
}

// Every budget is earned at its own rate: 0.0005 earns 5 hedges over 10,000 hedgeable calls,
// 0.0019 earns 1.9 per 1,000 (in whole thousandths they earned 0 and 1).
func TestBudgetResolution(t *testing.T) {
	for _, tc := range []struct {
		budget float64
		calls  int
		want   float64
	}{
		{0.0005, 10_000, 5},
		{0.0019, 1_000, 1.9},
		{1e-9, 1_000_000, 0.001},
		{0.05, 100, 5},
	} {
		g := Group{settings: Settings{Budget: tc.budget}, state: &state{}}
		for range tc.calls {
			g.earn()
		}
		if got := g.saved(); math.Abs(got-tc.want) > 1e-9*tc.want+1e-12 {
			t.Errorf("budget %v, %d calls: %v hedges saved up, want %v", tc.budget, tc.calls, got, tc.want)
		}
	}
}
