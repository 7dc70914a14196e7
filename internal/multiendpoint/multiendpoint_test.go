package multiendpoint

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	rt = 2 * time.Second        // RecoveryTimeout used by the tables
	sd = 500 * time.Millisecond // SwitchingDelay used by the tables
	ms = time.Millisecond
)

// op is one thing that happens to the MultiEndpoint at a step.
type op struct {
	name string
	do   func(t *testing.T, m *MultiEndpoint)
}

func up(e string) op {
	return op{"up " + e, func(_ *testing.T, m *MultiEndpoint) { m.SetEndpointAvailability(e, true) }}
}

func down(e string) op {
	return op{"down " + e, func(_ *testing.T, m *MultiEndpoint) { m.SetEndpointAvailability(e, false) }}
}

func setEndpoints(es ...string) op {
	return op{"set " + strings.Join(es, ","), func(t *testing.T, m *MultiEndpoint) {
		if err := m.SetEndpoints(es); err != nil {
			t.Fatalf("SetEndpoints(%v): %v", es, err)
		}
	}}
}

func setTimeouts(r, s time.Duration) op {
	return op{fmt.Sprintf("timeouts %v %v", r, s), func(t *testing.T, m *MultiEndpoint) {
		if err := m.SetTimeouts(r, s); err != nil {
			t.Fatalf("SetTimeouts: %v", err)
		}
	}}
}

var wait = op{"wait", func(*testing.T, *MultiEndpoint) {}}

// step: at time `at` after the start, do `op`, then expect the current endpoint, the states
// ("A:Available B:Recovering", priority order; empty = not checked) and the events emitted
// since the previous step ("A>B fallback"; nil = none).
type step struct {
	at          time.Duration
	op          op
	wantCurrent string
	wantStates  string
	wantEvents  []string
}

type table struct {
	name      string
	endpoints []string
	recovery  time.Duration
	switching time.Duration
	ready     []string // endpoints ready at creation
	// connecting: endpoints not ready at creation are still connecting (InitialState
	// Recovering); otherwise they are known down (Unavailable).
	connecting bool
	grace      time.Duration // ConnectGrace
	steps      []step
}

// knownDown is an InitialState for tests whose endpoints start known to be down.
func knownDown(string) State { return Unavailable }

func runTable(t *testing.T, tc table) {
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
		Name: "g", Endpoints: tc.endpoints, RecoveryTimeout: tc.recovery, SwitchingDelay: tc.switching, ConnectGrace: tc.grace,
		Clock: clk,
		InitialState: func(e string) State {
			switch {
			case ready[e]:
				return Available
			case tc.connecting:
				return Recovering
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
	takeEvents := func() []string {
		mu.Lock()
		defer mu.Unlock()
		ev := events
		events = nil
		return ev
	}
	takeEvents()
	for i, s := range tc.steps {
		clk.Set(start.Add(s.at))
		s.op.do(t, m)
		where := fmt.Sprintf("step %d (at %v, %s)", i, s.at, s.op.name)
		if got := m.Current(); got != s.wantCurrent {
			t.Errorf("%s: Current() = %q, want %q\n%s", where, got, s.wantCurrent, dump(m))
		}
		if s.wantStates != "" {
			if got := states(m); got != s.wantStates {
				t.Errorf("%s: states = %q, want %q", where, got, s.wantStates)
			}
		}
		got := takeEvents()
		want := make([]string, len(s.wantEvents))
		for j, w := range s.wantEvents {
			// "A>B fallback" means at this step's time; "A>B fallback@1.5s" gives the time.
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

func states(m *MultiEndpoint) string {
	var b []string
	for _, e := range m.Status().Endpoints {
		b = append(b, e.Endpoint+":"+e.State.String())
	}
	return strings.Join(b, " ")
}

func dump(m *MultiEndpoint) string {
	s := m.Status()
	return fmt.Sprintf("status: current=%s pending=%q@%v endpoints=%v", s.Current, s.PendingSwitch, s.PendingSwitchAt, s.Endpoints)
}

// Rule 1: initial states and the initial current endpoint.
func TestRule1_InitialStates(t *testing.T) {
	for _, tc := range []table{
		{name: "recovering when RecoveryTimeout>0", endpoints: []string{"A", "B"}, recovery: rt,
			steps: []step{{0, wait, "A", "A:Recovering B:Recovering", nil}}},
		{name: "unavailable when RecoveryTimeout=0", endpoints: []string{"A", "B"},
			steps: []step{{0, wait, "A", "A:Unavailable B:Unavailable", nil}}},
		{name: "already ready starts available", endpoints: []string{"A", "B"}, recovery: rt, ready: []string{"B"},
			steps: []step{{0, wait, "A", "A:Recovering B:Available", nil},
				// A had RecoveryTimeout to connect; it did not, so B takes over.
				{rt, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}}}},
		{name: "ready lower endpoint with RecoveryTimeout=0 takes over at once", endpoints: []string{"A", "B"}, ready: []string{"B"},
			steps: []step{{0, wait, "B", "A:Unavailable B:Available", nil}}},
		{name: "first becomes available", endpoints: []string{"A", "B"}, recovery: rt, switching: sd,
			steps: []step{{100 * ms, up("A"), "A", "A:Available B:Recovering", nil},
				{rt, wait, "A", "A:Available B:Unavailable", nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTable(t, tc) })
	}
}

// Rule 1 with RecoveryTimeout 0: an endpoint whose first connection attempt is under way is
// Recovering until reported, so the top endpoint is not passed over at startup because a
// lower one connected a moment sooner; a failed first attempt hands over at once.
func TestRule1_RecoveryTimeoutZeroWaitsForTheFirstAttempt(t *testing.T) {
	for _, tc := range []table{
		{name: "lower connects first: top kept", endpoints: []string{"A", "B"}, switching: sd, connecting: true, grace: 30 * time.Second,
			steps: []step{
				{0, wait, "A", "A:Recovering B:Recovering", nil},
				{10 * ms, up("B"), "A", "A:Recovering B:Available", nil},
				{50 * ms, up("A"), "A", "A:Available B:Available", nil},
				{time.Hour, wait, "A", "", nil},
			}},
		{name: "top's first attempt fails: lower at once", endpoints: []string{"A", "B"}, switching: sd, connecting: true, grace: 30 * time.Second,
			steps: []step{
				{10 * ms, up("B"), "A", "", nil},
				{20 * time.Second, down("A"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
				{21 * time.Second, up("A"), "B", "A:Available B:Available", nil},
				{21*time.Second + sd, wait, "A", "", []string{"B>A recovery"}},
			}},
		{name: "known down at creation: Unavailable", endpoints: []string{"A", "B"}, ready: []string{"B"},
			steps: []step{{0, wait, "B", "A:Unavailable B:Available", nil}}},
		{name: "the grace runs out: lower then", endpoints: []string{"A", "B"}, connecting: true, grace: 2 * time.Second,
			steps: []step{
				{10 * ms, up("B"), "A", "A:Recovering B:Available", nil},
				{2 * time.Second, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
			}},
		{name: "no grace: known nothing means Unavailable", endpoints: []string{"A", "B"}, connecting: true,
			steps: []step{{0, wait, "A", "A:Unavailable B:Unavailable", nil}}},
		{name: "added while connecting", endpoints: []string{"A"}, ready: []string{"A"}, connecting: true, grace: 30 * time.Second,
			steps: []step{
				{0, setEndpoints("N", "A"), "A", "N:Recovering A:Available", nil},
				{time.Second, down("N"), "A", "N:Unavailable A:Available", nil},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTable(t, tc) })
	}
}

// Rule 2: the recovery clock starts when the endpoint LEFT Available and is never restarted by
// repeated not-available reports.
func TestRule2_FailoverExactlyRecoveryTimeoutAfterLeavingAvailable(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, recovery: rt, switching: sd, steps: []step{
		{0, up("A"), "A", "", nil},
		{0, up("B"), "A", "A:Available B:Available", nil},
		{1 * time.Second, down("A"), "A", "A:Recovering B:Available", nil},
		// CONNECTING <-> TRANSIENT_FAILURE while reconnecting: repeated not-ready reports.
		{1500 * ms, down("A"), "A", "A:Recovering B:Available", nil},
		{2500 * ms, down("A"), "A", "A:Recovering B:Available", nil},
		{2999 * ms, down("A"), "A", "A:Recovering B:Available", nil},
		{3 * time.Second, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
	}})
}

func TestRule2_RecoveryTimeoutZeroFailsOverAtOnce(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, switching: sd, steps: []step{
		{0, up("A"), "A", "", nil},
		{0, up("B"), "A", "", nil},
		{time.Second, down("A"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
	}})
}

func TestRule2_RecoveringEndpointThatComesBackStaysCurrent(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, recovery: rt, switching: sd, steps: []step{
		{0, up("A"), "A", "", nil},
		{0, up("B"), "A", "", nil},
		{time.Second, down("A"), "A", "A:Recovering B:Available", nil},
		{2 * time.Second, up("A"), "A", "A:Available B:Available", nil},
		// The old recovery timer is stale: nothing happens when it would have fired.
		{3 * time.Second, wait, "A", "A:Available B:Available", nil},
		// A fresh outage gets a fresh, full RecoveryTimeout.
		{4 * time.Second, down("A"), "A", "A:Recovering B:Available", nil},
		{5999 * ms, wait, "A", "A:Recovering B:Available", nil},
		{6 * time.Second, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
	}})
}

// F4: an endpoint that comes back and drops again and again does not keep traffic by
// restarting its recovery clock: it is Unavailable RecoveryTimeout after its first drop,
// traffic settles on the fallback, and it returns only after a whole SwitchingDelay up.
func TestCase_F4_FlappingEndpointIsDamped(t *testing.T) {
	const r, s = time.Second, 2 * time.Second
	runTable(t, table{endpoints: []string{"A", "B"}, recovery: r, switching: s, steps: []step{
		{0, up("A"), "A", "", nil},
		{0, up("B"), "A", "A:Available B:Available", nil}, // first connections: no probation
		{1000 * ms, down("A"), "A", "A:Recovering B:Available", nil},
		{1100 * ms, up("A"), "A", "A:Available B:Available", nil}, // back, on probation
		{1200 * ms, down("A"), "A", "A:Recovering B:Available", nil},
		{1300 * ms, up("A"), "A", "", nil},
		{1900 * ms, wait, "A", "A:Available B:Available", nil},
		// Its clock still counts from 1s: this drop is past the RecoveryTimeout.
		{2050 * ms, down("A"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
		// Flapping on the standby side: every pending switch-back is cancelled. A already
		// spent its RecoveryTimeout: a drop during its probation makes it Unavailable at once.
		{2100 * ms, up("A"), "B", "A:Available B:Available", nil},
		{2200 * ms, down("A"), "B", "A:Unavailable B:Available", nil},
		{2300 * ms, up("A"), "B", "", nil},
		{2400 * ms, down("A"), "B", "", nil},
		{3000 * ms, up("A"), "B", "A:Available B:Available", nil}, // and now it stays up
		{4999 * ms, wait, "B", "", nil},
		{5000 * ms, wait, "A", "", []string{"B>A recovery"}},
	}})
}

// A probation ends after RecoveryTimeout up: a later failure gets a fresh, full clock.
func TestRule2_ProbationEndsAfterRecoveryTimeout(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, recovery: rt, steps: []step{
		{0, up("A"), "A", "", nil},
		{0, up("B"), "A", "", nil},
		{1 * time.Second, down("A"), "A", "A:Recovering B:Available", nil},
		{2 * time.Second, up("A"), "A", "A:Available B:Available", nil},
		{4 * time.Second, down("A"), "A", "A:Recovering B:Available", nil}, // stable since 4s
		{5999 * ms, wait, "A", "A:Recovering B:Available", nil},
		{6 * time.Second, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
	}})
}

// Rule 3: switch-back waits SwitchingDelay, and the target must stay Available for all of it.
func TestRule3_SwitchBackAfterSwitchingDelay(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, switching: sd, steps: []step{
		{0, up("B"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
		{time.Second, up("A"), "B", "A:Available B:Available", nil},
		{time.Second + sd - ms, up("A"), "B", "", nil}, // repeated report: no restart
		{time.Second + sd, wait, "A", "", []string{"B>A recovery"}},
	}})
}

func TestRule3_FlapDuringSwitchingDelayRestartsTheWait(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, recovery: rt, switching: sd, steps: []step{
		{0, up("B"), "A", "A:Recovering B:Available", nil},
		{rt, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
		{3 * time.Second, up("A"), "B", "", nil},
		{3300 * ms, down("A"), "B", "A:Recovering B:Available", nil}, // flap: pending switch cancelled
		{3400 * ms, up("A"), "B", "", nil},                           // LAST recovery
		{3500 * ms, wait, "B", "", nil},                              // 3s+sd: the first wait would have landed
		{3899 * ms, wait, "B", "", nil},
		{3900 * ms, wait, "A", "A:Available B:Available", []string{"B>A recovery"}},
	}})
}

func TestRule3_CurrentUnavailableLowerAvailableSwitchesAtOnce(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B", "C"}, recovery: rt, switching: sd, steps: []step{
		{rt, wait, "A", "A:Unavailable B:Unavailable C:Unavailable", nil},
		{3 * time.Second, up("C"), "C", "", []string{"A>C fallback"}},
	}})
}

func TestRule3_RecoveringCurrentKeptWhileNothingHigherIsAvailable(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B", "C"}, recovery: rt, switching: sd, steps: []step{
		{0, up("B"), "A", "", nil},
		{0, up("C"), "A", "", nil},
		{time.Second, wait, "A", "A:Recovering B:Available C:Available", nil},
		{rt, wait, "B", "A:Unavailable B:Available C:Available", []string{"A>B fallback"}},
		{3 * time.Second, down("B"), "B", "A:Unavailable B:Recovering C:Available", nil},
		{5 * time.Second, wait, "C", "A:Unavailable B:Unavailable C:Available", []string{"B>C fallback"}},
	}})
}

func TestRule3_HigherAvailableWhileCurrentRecoveringSwitchesAtOnce(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, recovery: rt, switching: sd, steps: []step{
		{0, up("B"), "A", "", nil},
		{rt, wait, "B", "", []string{"A>B fallback"}},
		{3 * time.Second, down("B"), "B", "A:Unavailable B:Recovering", nil},
		// The current endpoint is failing; a better one is back: no reason to wait.
		{3100 * ms, up("A"), "A", "A:Available B:Recovering", []string{"B>A recovery"}},
	}})
}

func TestRule3_AllDownThenLowestFirstThenTop(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B", "C"}, recovery: rt, switching: sd, steps: []step{
		{0, up("A"), "A", "", nil},
		{0, up("B"), "A", "", nil},
		{0, up("C"), "A", "", nil},
		{time.Second, down("A"), "A", "", nil},
		{time.Second, down("B"), "A", "", nil},
		{time.Second, down("C"), "A", "A:Recovering B:Recovering C:Recovering", nil},
		{3 * time.Second, wait, "A", "A:Unavailable B:Unavailable C:Unavailable", nil}, // nothing available: keep
		{10 * time.Second, up("C"), "C", "A:Unavailable B:Unavailable C:Available", []string{"A>C fallback"}},
		{11 * time.Second, up("A"), "C", "A:Available B:Unavailable C:Available", nil},
		{11*time.Second + sd, wait, "A", "", []string{"C>A recovery"}},
	}})
}

func TestRule3_PendingSwitchRetargetsToHigherEndpoint(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B", "C"}, switching: sd, steps: []step{
		{0, up("C"), "C", "", []string{"A>C fallback"}},
		{time.Second, up("B"), "C", "", nil},
		{1200 * ms, up("A"), "C", "", nil}, // retarget: A must be Available for a whole delay
		{1500 * ms, wait, "C", "", nil},    // B's wait would have ended here
		{1700 * ms, wait, "A", "", []string{"C>A recovery"}},
	}})
}

func TestRule3_PendingSwitchCancelledWhenTargetDrops(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, switching: sd, steps: []step{
		{0, up("B"), "B", "", []string{"A>B fallback"}},
		{time.Second, up("A"), "B", "", nil},
		{1200 * ms, down("A"), "B", "A:Unavailable B:Available", nil},
		{5 * time.Second, wait, "B", "", nil},
	}})
}

// Rule 4: SetEndpoints.
func TestRule4_SetEndpoints(t *testing.T) {
	for _, tc := range []table{
		{name: "kept endpoints keep their state, new ones start Recovering", endpoints: []string{"A", "B"}, recovery: rt, switching: sd,
			steps: []step{
				{0, up("A"), "A", "", nil},
				{time.Second, setEndpoints("B", "A", "C"), "A", "B:Recovering A:Available C:Recovering", nil},
				{3 * time.Second, wait, "A", "B:Unavailable A:Available C:Unavailable", nil},
			}},
		{name: "new endpoints ready when added start Available", endpoints: []string{"A"}, recovery: rt, switching: sd, ready: []string{"A", "N"},
			steps: []step{
				{0, wait, "A", "A:Available", nil},
				// Moving away from an Available current endpoint waits SwitchingDelay (F2).
				{time.Second, setEndpoints("N", "A"), "A", "N:Available A:Available", nil},
				{time.Second + sd, wait, "N", "", []string{"A>N reconfiguration"}},
			}},
		{name: "current removed: best Available at once", endpoints: []string{"A", "B", "C"}, switching: sd,
			steps: []step{
				{0, up("A"), "A", "", nil},
				{0, up("C"), "A", "", nil},
				{time.Second, setEndpoints("B", "C"), "C", "B:Unavailable C:Available", []string{"A>C reconfiguration"}},
			}},
		{name: "current removed, nothing Available: top priority", endpoints: []string{"A", "B"}, recovery: rt,
			steps: []step{
				{time.Second, setEndpoints("C", "B"), "C", "C:Recovering B:Recovering", []string{"A>C reconfiguration"}},
			}},
		{name: "reordering applies the switching delay", endpoints: []string{"A", "B"}, switching: sd,
			steps: []step{
				{0, up("A"), "A", "", nil},
				{0, up("B"), "A", "", nil},
				{time.Second, setEndpoints("B", "A"), "A", "B:Available A:Available", nil},
				{time.Second + sd, wait, "B", "", []string{"A>B reconfiguration"}},
			}},
		{name: "removed endpoint's recovery timer does nothing", endpoints: []string{"A", "B"}, recovery: rt,
			steps: []step{
				{0, up("A"), "A", "", nil},
				{0, up("B"), "A", "", nil},
				{time.Second, down("B"), "A", "A:Available B:Recovering", nil},
				{1500 * ms, setEndpoints("A"), "A", "A:Available", nil},
				{1600 * ms, setEndpoints("A", "B"), "A", "A:Available B:Recovering", nil},
				// The old timer (due at 3s) is stale; the re-added B has its own clock (due 3.6s).
				{3 * time.Second, wait, "A", "A:Available B:Recovering", nil},
				{3600 * ms, wait, "A", "A:Available B:Unavailable", nil},
			}},
		{name: "pending switch to a removed endpoint is cancelled", endpoints: []string{"A", "B"}, switching: sd,
			steps: []step{
				{0, up("B"), "B", "", []string{"A>B fallback"}},
				{time.Second, up("A"), "B", "", nil},
				{1100 * ms, setEndpoints("B"), "B", "B:Available", nil},
				{3 * time.Second, wait, "B", "", nil},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTable(t, tc) })
	}
}

func TestRule4_InvalidSetEndpointsChangesNothing(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	m, err := New(Options{Name: "west", Endpoints: []string{"A", "B"}, Clock: clk, InitialState: knownDown})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetEndpointAvailability("B", true)
	before := m.Status()
	for _, bad := range [][]string{nil, {}, {"A", ""}, {"A", "B", "A"}} {
		err := m.SetEndpoints(bad)
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("SetEndpoints(%q) = %v, want ErrInvalidConfig", bad, err)
		}
		if err != nil && !strings.Contains(err.Error(), `group "west"`) {
			t.Errorf("error %q does not name the group", err)
		}
		if got := m.Status(); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Errorf("SetEndpoints(%q) changed the state:\n got %v\nwant %v", bad, got, before)
		}
	}
	err = m.SetEndpoints([]string{"A", "B", "A"})
	if !strings.Contains(err.Error(), `endpoint 2 "A"`) {
		t.Errorf("duplicate error %q does not name the endpoint and position", err)
	}
}

func TestNew_Validation(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Name: "g"}, `group "g": the endpoint list is empty`},
		{Options{Name: "g", Endpoints: []string{"A", ""}}, `group "g": endpoint 1 "": empty endpoint`},
		{Options{Name: "g", Endpoints: []string{"A", "B", "B"}}, `group "g": endpoint 2 "B": duplicate endpoint (also at position 1)`},
		{Options{Name: "g", Endpoints: []string{"A"}, RecoveryTimeout: -1}, `negative RecoveryTimeout`},
		{Options{Name: "g", Endpoints: []string{"A"}, SwitchingDelay: -time.Second}, `negative SwitchingDelay`},
	} {
		m, err := New(tc.opts)
		if err == nil {
			m.Close()
			t.Errorf("New(%+v) succeeded, want error containing %q", tc.opts, tc.want)
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig containing %q", tc.opts, err, tc.want)
		}
	}
}

// Rule 4: durations change at runtime; running clocks keep their start.
func TestRule4_SetTimeouts(t *testing.T) {
	for _, tc := range []table{
		{name: "longer RecoveryTimeout extends a running recovery", endpoints: []string{"A", "B"}, recovery: rt,
			steps: []step{
				{0, up("A"), "A", "", nil},
				{0, up("B"), "A", "", nil},
				{time.Second, down("A"), "A", "", nil},
				{1500 * ms, setTimeouts(5*time.Second, 0), "A", "A:Recovering B:Available", nil},
				{3 * time.Second, wait, "A", "A:Recovering B:Available", nil}, // old deadline passes
				{6 * time.Second, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
			}},
		{name: "shorter RecoveryTimeout already past fails over at once", endpoints: []string{"A", "B"}, recovery: rt,
			steps: []step{
				{0, up("A"), "A", "", nil},
				{0, up("B"), "A", "", nil},
				{time.Second, down("A"), "A", "", nil},
				{1500 * ms, setTimeouts(100*ms, 0), "B", "A:Unavailable B:Available", []string{"A>B reconfiguration"}},
			}},
		{name: "SwitchingDelay change moves a pending switch", endpoints: []string{"A", "B"}, switching: sd,
			steps: []step{
				{0, up("B"), "B", "", []string{"A>B fallback"}},
				{time.Second, up("A"), "B", "", nil},
				{1100 * ms, setTimeouts(0, 2*time.Second), "B", "", nil},
				{time.Second + sd, wait, "B", "", nil},
				{3 * time.Second, wait, "A", "", []string{"B>A recovery"}},
			}},
		{name: "SwitchingDelay zero lands a pending switch at once", endpoints: []string{"A", "B"}, switching: sd,
			steps: []step{
				{0, up("B"), "B", "", []string{"A>B fallback"}},
				{time.Second, up("A"), "B", "", nil},
				{1100 * ms, setTimeouts(0, 0), "A", "", []string{"B>A recovery"}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTable(t, tc) })
	}
}

func reconfigure(r, sd time.Duration, es ...string) op {
	return op{fmt.Sprintf("reconfigure %v %v %s", r, sd, strings.Join(es, ",")), func(t *testing.T, m *MultiEndpoint) {
		if err := m.Reconfigure(es, r, sd); err != nil {
			t.Fatalf("Reconfigure: %v", err)
		}
	}}
}

// Rule 1 survives reconfiguration: with RecoveryTimeout 0, an unrelated update keeps an
// endpoint on its first attempt Recovering, and endpoints added by Reconfigure start by the
// new RecoveryTimeout.
func TestRule1_ReconfigureKeepsTheFirstAttemptGrace(t *testing.T) {
	for _, tc := range []table{
		{name: "kept endpoint", endpoints: []string{"A", "B"}, connecting: true, grace: 30 * time.Second,
			steps: []step{
				{10 * ms, up("B"), "A", "A:Recovering B:Available", nil},
				{time.Second, reconfigure(0, sd, "A", "B"), "A", "A:Recovering B:Available", nil},
			}},
		{name: "added with the new RecoveryTimeout", endpoints: []string{"A"}, recovery: 10 * time.Second, ready: []string{"A"}, connecting: true, grace: 30 * time.Second,
			steps: []step{
				{time.Second, reconfigure(0, 0, "A", "C"), "A", "A:Available C:Recovering", nil},
				{31 * time.Second, wait, "A", "A:Available C:Unavailable", nil},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTable(t, tc) })
	}
}

// Rule 4: Reconfigure applies rule 3 once, to the whole new configuration: shortening the
// SwitchingDelay while removing the pending switch's target switches nowhere.
func TestRule4_ReconfigureAppliesRule3Once(t *testing.T) {
	runTable(t, table{endpoints: []string{"A", "B"}, switching: sd, steps: []step{
		{0, up("B"), "B", "", []string{"A>B fallback"}},
		{time.Second, up("A"), "B", "", nil}, // switch to A pending
		{1100 * ms, reconfigure(0, 0, "B"), "B", "B:Available", nil},
		{3 * time.Second, wait, "B", "", nil},
	}})
}

// Rule 5: after Close no timer is pending, no callback changes anything, no event is emitted.
func TestRule5_Close(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	var events int
	m, err := New(Options{Endpoints: []string{"A", "B", "C"}, RecoveryTimeout: rt, SwitchingDelay: sd, Clock: clk,
		OnSwitch: func(Event) { events++ }})
	if err != nil {
		t.Fatal(err)
	}
	m.SetEndpointAvailability("B", true)
	clk.Advance(rt) // A Unavailable, B current
	m.SetEndpointAvailability("C", true)
	m.SetEndpointAvailability("C", false) // C Recovering: a recovery timer is pending
	m.SetEndpointAvailability("A", true)  // a switch B -> A is pending
	if s := m.Status(); clk.Pending() != 2 || s.PendingSwitch != "A" {
		t.Fatalf("before Close: %d timers pending, pending switch %q; want 2 and A", clk.Pending(), s.PendingSwitch)
	}
	before, eventsBefore := m.Current(), events
	m.Close()
	m.Close() // idempotent
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d timers pending after Close", n)
	}
	clk.Advance(time.Hour)
	m.SetEndpointAvailability("B", false)
	if m.Current() != before || events != eventsBefore {
		t.Errorf("after Close: current %q (was %q), events %d (was %d)", m.Current(), before, events, eventsBefore)
	}
	if err := m.SetEndpoints([]string{"C"}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetEndpoints after Close = %v, want ErrClosed", err)
	}
	if err := m.SetTimeouts(0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("SetTimeouts after Close = %v, want ErrClosed", err)
	}
	if !m.Status().Closed {
		t.Error("Status().Closed = false after Close")
	}
}

// Rule 5: a timer callback that was already due when its timer was superseded does nothing.
func TestRule5_StaleTimerCallbackIsNoOp(t *testing.T) {
	clk := &capturingClock{Fake: clock.NewFake(time.Time{})}
	m, err := New(Options{Endpoints: []string{"A", "B"}, RecoveryTimeout: rt, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetEndpointAvailability("A", true)
	m.SetEndpointAvailability("B", true)
	m.SetEndpointAvailability("A", false) // recovery timer #n armed
	stale := clk.last
	m.SetEndpointAvailability("A", true) // timer superseded (Stop may lose the race in real life)
	stale()                              // the callback runs anyway, as a real timer racing Stop could
	if got := states(m); got != "A:Available B:Available" || m.Current() != "A" {
		t.Errorf("stale callback changed state: %s, current %s", got, m.Current())
	}
}

// Rule 5: a switch timer superseded by SetTimeouts (same pending switch, re-armed) does
// nothing if its callback runs anyway.
func TestRule5_StaleSwitchCallbackIsNoOp(t *testing.T) {
	clk := &capturingClock{Fake: clock.NewFake(time.Time{})}
	m, err := New(Options{Endpoints: []string{"A", "B"}, SwitchingDelay: sd, Clock: clk, InitialState: knownDown})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetEndpointAvailability("B", true) // A Unavailable: B current at once
	m.SetEndpointAvailability("A", true) // switch B -> A pending, due at sd
	if s := m.Status(); s.PendingSwitch != "A" || m.Current() != "B" {
		t.Fatalf("want B current and a switch to A pending: %s", dump(m))
	}
	stale := clk.last
	if err := m.SetTimeouts(0, 2*time.Second); err != nil { // the same switch, now due at 2s
		t.Fatal(err)
	}
	clk.Advance(sd)
	stale() // the old timer's callback, as a real timer racing Stop could run it
	if m.Current() != "B" {
		t.Errorf("stale switch callback switched to %q before the new delay", m.Current())
	}
	clk.Advance(2*time.Second - sd)
	if m.Current() != "A" {
		t.Errorf("Current() = %q after the new delay, want A", m.Current())
	}
}

// Rule 5: every callback ever scheduled, run after Close, changes nothing.
func TestRule5_CallbacksAfterCloseAreNoOps(t *testing.T) {
	clk := &capturingClock{Fake: clock.NewFake(time.Time{})}
	var events int
	m, err := New(Options{Endpoints: []string{"A", "B", "C"}, RecoveryTimeout: rt, SwitchingDelay: sd, Clock: clk,
		OnSwitch: func(Event) { events++ }})
	if err != nil {
		t.Fatal(err)
	}
	m.SetEndpointAvailability("C", true)
	clk.Advance(rt) // A, B Unavailable: C current
	m.SetEndpointAvailability("B", true)
	m.SetEndpointAvailability("A", true)  // switch C -> A pending
	m.SetEndpointAvailability("B", false) // B Recovering
	m.Close()
	before, eventsBefore := m.Status(), events
	for _, f := range clk.all {
		f()
	}
	if got := m.Status(); fmt.Sprint(got) != fmt.Sprint(before) || events != eventsBefore {
		t.Errorf("callbacks after Close changed the state or emitted events:\n got %v (%d events)\nwant %v (%d events)",
			got, events, before, eventsBefore)
	}
}

// Rule 5: Close from inside OnSwitch drops the events queued behind the one being delivered.
func TestRule5_NoEventAfterCloseDuringDelivery(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	var m *MultiEndpoint
	var got []string
	m, err := New(Options{Endpoints: []string{"A", "B"}, Clock: clk, InitialState: knownDown, OnSwitch: func(ev Event) {
		got = append(got, ev.From+">"+ev.To)
		if ev.To == "B" {
			m.SetEndpointAvailability("A", true) // queues B>A behind this event
			m.Close()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.SetEndpointAvailability("B", true)
	if fmt.Sprint(got) != "[A>B]" {
		t.Errorf("events = %v, want [A>B] (none after Close)", got)
	}
}

// capturingClock remembers the scheduled callbacks, to run them out of turn.
type capturingClock struct {
	*clock.Fake
	last func()
	all  []func()
}

func (c *capturingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.last = f
	c.all = append(c.all, f)
	return c.Fake.AfterFunc(d, f)
}

// Rule 6: events carry from, to, reason and time, in order; OnSwitch may call back in.
func TestRule6_EventsInOrderAndReentrant(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	var m *MultiEndpoint
	var got []Event
	m, err := New(Options{Name: "east", Endpoints: []string{"A", "B"}, Clock: clk, InitialState: knownDown, OnSwitch: func(ev Event) {
		got = append(got, ev)
		_ = m.Status() // re-entering must not deadlock
		if ev.To == "B" {
			m.SetEndpointAvailability("A", true) // re-entrant change: delivered after this event
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	clk.Advance(time.Second)
	m.SetEndpointAvailability("B", true)
	want := []Event{
		{Name: "east", From: "A", To: "B", Reason: Fallback, At: clk.Now()},
		{Name: "east", From: "B", To: "A", Reason: Recovery, At: clk.Now()},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events:\n got %v\nwant %v", got, want)
	}
}

func TestStatus(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	t0 := clk.Now()
	m, err := New(Options{Name: "g", Endpoints: []string{"A", "B"}, RecoveryTimeout: rt, SwitchingDelay: sd, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetEndpointAvailability("B", true)
	clk.Advance(rt)
	m.SetEndpointAvailability("A", true)
	s := m.Status()
	want := Status{Name: "g", Current: "B", PendingSwitch: "A", PendingSwitchAt: t0.Add(rt + sd),
		RecoveryTimeout: rt, SwitchingDelay: sd, Endpoints: []EndpointStatus{
			{Endpoint: "A", Priority: 0, State: Available, Since: t0.Add(rt)},
			{Endpoint: "B", Priority: 1, State: Available, Since: t0},
		}}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Errorf("Status:\n got %+v\nwant %+v", s, want)
	}
}

func TestStateAndReasonStrings(t *testing.T) {
	for v, want := range map[fmt.Stringer]string{
		Unavailable: "Unavailable", Available: "Available", Recovering: "Recovering", State(9): "State(9)",
		Fallback: "fallback", Recovery: "recovery", Reconfiguration: "reconfiguration", Reason(0): "Reason(0)",
	} {
		if got := v.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}
