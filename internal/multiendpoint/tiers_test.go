package multiendpoint

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// tierStep: at `at` after the start, do `op`, then expect Current, the Tier view's members
// ("A1 A2"), its Previous ("" = nil) and the events since the previous step.
type tierStep struct {
	at           time.Duration
	op           op
	wantCurrent  string
	wantMembers  string
	wantPrevious string
	wantEvents   []string
}

type tierTable struct {
	name      string
	tiers     [][]string
	recovery  time.Duration
	switching time.Duration
	slowStart time.Duration
	ready     []string
	steps     []tierStep
}

func runTierTable(t *testing.T, tc tierTable) {
	t.Helper()
	clk := clock.NewFake(time.Time{})
	start := clk.Now()
	var mu sync.Mutex
	var events []string
	ready := map[string]bool{}
	for _, e := range tc.ready {
		ready[e] = true
	}
	m, err := New(Options{
		Name: "g", Tiers: tc.tiers, RecoveryTimeout: tc.recovery, SwitchingDelay: tc.switching, SlowStart: tc.slowStart,
		Clock: clk,
		InitialState: func(e string) State {
			if ready[e] {
				return Available
			}
			return Unavailable
		},
		OnSwitch: func(ev Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, fmt.Sprintf("%s>%s %s@%v", ev.From, ev.To, ev.Reason, ev.At.Sub(start)))
		},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Close()
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		ev := events
		events = nil
		return ev
	}
	take()
	for i, s := range tc.steps {
		clk.Set(start.Add(s.at))
		s.op.do(t, m)
		where := fmt.Sprintf("step %d (at %v, %s)", i, s.at, s.op.name)
		if got := m.Current(); got != s.wantCurrent {
			t.Errorf("%s: Current() = %q, want %q\n%s", where, got, s.wantCurrent, dump(m))
		}
		v := m.Tier()
		if got := strings.Join(v.Members, " "); got != s.wantMembers {
			t.Errorf("%s: Tier().Members = %q, want %q", where, got, s.wantMembers)
		}
		if got := strings.Join(v.Previous, " "); got != s.wantPrevious {
			t.Errorf("%s: Tier().Previous = %q, want %q", where, got, s.wantPrevious)
		}
		if len(v.Joined) != len(v.Members) {
			t.Errorf("%s: %d Joined for %d Members", where, len(v.Joined), len(v.Members))
		}
		got := take()
		want := make([]string, len(s.wantEvents))
		for j, w := range s.wantEvents {
			if !strings.Contains(w, "@") {
				w += "@" + s.at.String()
			}
			want[j] = w
		}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Errorf("%s: events = %q, want %q", where, got, want)
		}
	}
}

func TestTiers_FailoverInsideAndBetweenTiers(t *testing.T) {
	ab := [][]string{{"A1", "A2"}, {"B"}}
	for _, tc := range []tierTable{
		{name: "a member down moves calls to its peer at once, no switch", tiers: ab, recovery: rt, switching: sd, ready: []string{"A1", "A2", "B"},
			steps: []tierStep{
				{0, wait, "A1", "A1 A2", "", nil},
				{1 * time.Second, down("A1"), "A2", "A2", "", nil},
				{1500 * ms, up("A1"), "A1", "A1 A2", "", nil},
				{2 * time.Second, down("A2"), "A1", "A1", "", nil},
			}},
		{name: "the whole tier down: RecoveryTimeout, then the lower tier", tiers: ab, recovery: rt, switching: sd, ready: []string{"A1", "A2", "B"},
			steps: []tierStep{
				{1 * time.Second, down("A1"), "A2", "A2", "", nil},
				{1200 * ms, down("A2"), "A2", "A2", "", nil}, // the tier is Recovering: kept
				{3 * time.Second, wait, "A2", "A2", "", nil}, // A1 Unavailable, A2 still Recovering
				{3200 * ms, wait, "B", "B", "", []string{"A2>B fallback"}},
			}},
		{name: "RecoveryTimeout 0: the whole tier down falls back at once", tiers: ab, switching: sd, ready: []string{"A1", "A2", "B"},
			steps: []tierStep{
				{1 * time.Second, down("A2"), "A1", "A1", "", nil},
				{2 * time.Second, down("A1"), "B", "B", "", []string{"A1>B fallback"}},
			}},
		{name: "switch back waits SwitchingDelay from the member that returned first", tiers: ab, switching: sd, ready: []string{"B"},
			steps: []tierStep{
				{0, wait, "B", "B", "", nil},
				{1 * time.Second, up("A2"), "B", "B", "", nil},
				{1200 * ms, up("A1"), "B", "B", "", nil}, // does not restart the wait
				{1500 * ms, wait, "A1", "A1 A2", "", []string{"B>A1 recovery"}},
			}},
		{name: "the member timing the switch drops: its peer's own delay", tiers: ab, switching: sd, ready: []string{"B"},
			steps: []tierStep{
				{1 * time.Second, up("A2"), "B", "B", "", nil},
				{1200 * ms, up("A1"), "B", "B", "", nil},
				{1400 * ms, down("A2"), "B", "B", "", nil},
				{1500 * ms, wait, "B", "B", "", nil},
				{1700 * ms, wait, "A1", "A1", "", []string{"B>A1 recovery"}},
			}},
		{name: "middle tier between", tiers: [][]string{{"A"}, {"B1", "B2"}, {"C"}}, ready: []string{"C"},
			steps: []tierStep{
				{0, wait, "C", "C", "", nil},
				{1 * time.Second, up("B2"), "B2", "B2", "", []string{"C>B2 recovery"}},
				{2 * time.Second, up("A"), "A", "A", "", []string{"B2>A recovery"}},
				{3 * time.Second, down("A"), "B2", "B2", "", []string{"A>B2 fallback"}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTierTable(t, tc) })
	}
}

func TestTiers_SlowStartKeepsThePreviousTier(t *testing.T) {
	ab := [][]string{{"A1", "A2"}, {"B1", "B2"}}
	const window = 20 * time.Second
	for _, tc := range []tierTable{
		{name: "the ramp lasts SlowStart after a switch back", tiers: ab, slowStart: window, ready: []string{"B1", "B2"},
			steps: []tierStep{
				{1 * time.Second, up("A1"), "A1", "A1", "B1 B2", []string{"B1>A1 recovery"}},
				{2 * time.Second, up("A2"), "A1", "A1 A2", "B1 B2", nil},
				{5 * time.Second, down("B1"), "A1", "A1 A2", "B2", nil},
				{21*time.Second - 1, wait, "A1", "A1 A2", "B2", nil},
				{21 * time.Second, wait, "A1", "A1 A2", "", nil},
			}},
		{name: "the old tier fails during the ramp: the ramp ends at once, for good", tiers: ab, slowStart: window, ready: []string{"B1", "B2"},
			steps: []tierStep{
				{1 * time.Second, up("A1"), "A1", "A1", "B1 B2", []string{"B1>A1 recovery"}},
				{2 * time.Second, down("B1"), "A1", "A1", "B2", nil},
				{3 * time.Second, down("B2"), "A1", "A1", "", nil},
				{4 * time.Second, up("B2"), "A1", "A1", "", nil},
			}},
		{name: "a fallback ends the ramp", tiers: ab, slowStart: window, ready: []string{"B1", "B2"},
			steps: []tierStep{
				{1 * time.Second, up("A1"), "A1", "A1", "B1 B2", []string{"B1>A1 recovery"}},
				{2 * time.Second, down("A1"), "B1", "B1 B2", "", []string{"A1>B1 fallback"}},
			}},
		{name: "no ramp at creation nor without SlowStart", tiers: ab, ready: []string{"B1"},
			steps: []tierStep{
				{0, wait, "B1", "B1", "", nil},
				{1 * time.Second, up("A2"), "A2", "A2", "", []string{"B1>A2 recovery"}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTierTable(t, tc) })
	}
}

func TestTiers_Reconfigure(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	start := clk.Now()
	m, err := New(Options{Name: "g", Tiers: [][]string{{"A"}, {"B", "C"}}, SlowStart: time.Minute, Clock: clk,
		InitialState: func(string) State { return Available }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if v := m.Tier(); v.Index != 0 || strings.Join(v.Members, " ") != "A" || !v.Joined[0].Equal(start) {
		t.Fatalf("Tier() = %+v", v)
	}
	clk.Advance(time.Second)
	// C joins A's tier; B stays in the (now) second tier.
	if err := m.ReconfigureTiers([][]string{{"A", "C"}, {"B"}}, 0, 0); err != nil {
		t.Fatal(err)
	}
	v := m.Tier()
	if strings.Join(v.Members, " ") != "A C" || !v.Joined[0].Equal(start) || !v.Joined[1].Equal(start.Add(time.Second)) {
		t.Fatalf("after C joined: Tier() = %+v", v)
	}
	if s := m.Status(); fmt.Sprint(s.Tiers) != "[[A C] [B]]" || s.CurrentTier != 0 {
		t.Fatalf("Status tiers %v current %d", s.Tiers, s.CurrentTier)
	}
	// A flat list keeps the MultiEndpoint tiered, each endpoint its own tier.
	if err := m.SetEndpoints([]string{"C", "A"}); err != nil {
		t.Fatal(err)
	}
	if v := m.Tier(); v == nil || strings.Join(v.Members, " ") != "C" || m.Current() != "C" {
		t.Fatalf("after SetEndpoints: Tier() = %+v, Current %q", v, m.Current())
	}
}

func TestTiers_InvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no tier", Options{Name: "g", Tiers: [][]string{}}, `group "g": the tier list is empty`},
		{"empty tier", Options{Name: "g", Tiers: [][]string{{"A"}, {}}}, `group "g": tier 1 is empty`},
		{"empty endpoint", Options{Name: "g", Tiers: [][]string{{"A"}, {"B", ""}}}, `group "g": endpoint 2 "": empty endpoint`},
		{"duplicate across tiers", Options{Name: "g", Tiers: [][]string{{"A", "B"}, {"A"}}}, `group "g": endpoint 2 "A": duplicate endpoint (also at position 0)`},
		{"both lists", Options{Name: "g", Endpoints: []string{"A"}, Tiers: [][]string{{"A"}}}, `group "g": both Endpoints and Tiers are set`},
		{"negative slow start", Options{Name: "g", Tiers: [][]string{{"A"}}, SlowStart: -1}, `group "g": negative SlowStart -1ns`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.opts)
			if err == nil {
				m.Close()
				t.Fatal("New succeeded")
			}
			var ce *ConfigError
			if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Fatalf("New: %v, want a *ConfigError ending %q", err, tc.want)
			}
		})
	}
	// A bad ReconfigureTiers changes nothing.
	m, err := New(Options{Name: "g", Tiers: [][]string{{"A", "B"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	before := fmt.Sprint(m.Status())
	for _, bad := range [][][]string{nil, {{"A"}, {}}, {{"A", "A"}}} {
		if err := m.ReconfigureTiers(bad, 0, 0); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ReconfigureTiers(%v) = %v, want ErrInvalidConfig", bad, err)
		}
	}
	if err := m.ReconfigureTiers([][]string{{"C"}}, -1, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ReconfigureTiers with a negative duration = %v", err)
	}
	if after := fmt.Sprint(m.Status()); after != before {
		t.Errorf("a refused ReconfigureTiers changed the status:\n before %s\n after  %s", before, after)
	}
	m.Close()
	if err := m.ReconfigureTiers([][]string{{"A"}}, 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReconfigureTiers after Close = %v, want ErrClosed", err)
	}
}

// Without tiers nothing is published, and reading the view never allocates.
func TestTiers_ViewIsFreeToRead(t *testing.T) {
	flat, err := New(Options{Endpoints: []string{"A", "B"}})
	if err != nil {
		t.Fatal(err)
	}
	defer flat.Close()
	if v := flat.Tier(); v != nil {
		t.Fatalf("Tier() without tiers = %+v, want nil", v)
	}
	tiered, err := New(Options{Tiers: [][]string{{"A", "B"}}, InitialState: func(string) State { return Available }})
	if err != nil {
		t.Fatal(err)
	}
	defer tiered.Close()
	if n := testing.AllocsPerRun(1000, func() { _ = len(tiered.Tier().Members) + len(tiered.Current()) }); n != 0 {
		t.Fatalf("Tier and Current allocate %v times", n)
	}
	// Reporting a state a member is already in publishes nothing new.
	v := tiered.Tier()
	tiered.SetEndpointAvailability("A", true)
	if tiered.Tier() != v {
		t.Fatal("a report that changes nothing published a new view")
	}
}
