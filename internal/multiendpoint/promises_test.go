package multiendpoint

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// The tests in this file pin the promises of rules 2 and 3 under flapping and retargeting
// (issue 13), each with the input that showed the old behaviour.

// tableStart is the fake clock's start in runTable.
var tableStart = clock.NewFake(time.Time{}).Now()

// pending checks the pending switch: its target and when it lands ("" and 0: none).
func pending(target string, at time.Duration) op {
	return op{fmt.Sprintf("pending %q@%v", target, at), func(t *testing.T, m *MultiEndpoint) {
		t.Helper()
		s := m.Status()
		want := time.Time{}
		if target != "" {
			want = tableStart.Add(at)
		}
		if s.PendingSwitch != target || !s.PendingSwitchAt.Equal(want) {
			t.Errorf("pending switch = %q@%v, want %q@%v", s.PendingSwitch, s.PendingSwitchAt.Sub(tableStart), target, at)
		}
	}}
}

// Rule 3: a switch-back lands SwitchingDelay after its target's own last return to
// Available, never later because another endpoint came or went and retargeted it.
func TestRule3_SwitchBackNotRestartedByOtherEndpoints(t *testing.T) {
	const s = time.Second
	for _, tc := range []table{
		{name: "issue 13: B's switch lands at B's return + SwitchingDelay", endpoints: []string{"A", "B", "C"}, switching: s, ready: []string{"C"},
			steps: []step{
				{0, wait, "C", "A:Unavailable B:Unavailable C:Available", nil},
				{1000 * ms, up("B"), "C", "", nil},
				{1000 * ms, pending("B", 2*time.Second), "C", "", nil},
				{1500 * ms, up("A"), "C", "", nil},
				{1500 * ms, pending("A", 2500*ms), "C", "", nil},
				// A drops: the switch goes back to B, due at B's return + 1s, not 1.8s + 1s.
				{1800 * ms, down("A"), "C", "A:Unavailable B:Available C:Available", nil},
				{1800 * ms, pending("B", 2*time.Second), "C", "", nil},
				{1999 * ms, wait, "C", "", nil},
				{2000 * ms, wait, "B", "", []string{"C>B recovery"}},
				{2800 * ms, wait, "B", "", nil},
			}},
		{name: "the target's delay already past: at once", endpoints: []string{"A", "B", "C"}, switching: s, ready: []string{"C"},
			steps: []step{
				{1000 * ms, up("B"), "C", "", nil},
				{1800 * ms, up("A"), "C", "", nil},
				{1800 * ms, pending("A", 2800*ms), "C", "", nil},
				{2300 * ms, down("A"), "B", "A:Unavailable B:Available C:Available", []string{"C>B recovery"}},
				{2300 * ms, pending("", 0), "B", "", nil},
			}},
		{name: "a lower endpoint coming and going does not move the switch", endpoints: []string{"A", "B", "C", "D"}, switching: s, ready: []string{"D"},
			steps: []step{
				{1000 * ms, up("B"), "D", "", nil},
				{1200 * ms, up("C"), "D", "", nil},
				{1400 * ms, down("C"), "D", "", nil},
				{1600 * ms, up("C"), "D", "", nil},
				{1600 * ms, pending("B", 2*time.Second), "D", "", nil},
				{2000 * ms, wait, "B", "", []string{"D>B recovery"}},
			}},
		{name: "the target's own flap restarts its delay", endpoints: []string{"A", "B", "C"}, switching: s, ready: []string{"C"},
			steps: []step{
				{1000 * ms, up("B"), "C", "", nil},
				{1500 * ms, up("A"), "C", "", nil},
				{1600 * ms, down("B"), "C", "", nil}, // B's wait is void; A's is unaffected
				{1700 * ms, up("B"), "C", "", nil},
				{1800 * ms, down("A"), "C", "", nil},
				{1800 * ms, pending("B", 2700*ms), "C", "", nil},
				{2000 * ms, wait, "C", "", nil},
				{2700 * ms, wait, "B", "", []string{"C>B recovery"}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTable(t, tc) })
	}
}

// Rule 3, starvation form of issue 13: a higher endpoint that keeps coming back for 300ms
// every 800ms must not hold off, forever, the switch to an endpoint that is back for good.
// RecoveryTimeout 2s, SwitchingDelay 1s, A and B down from the start, B back for good at 3s.
func TestRule3_SwitchBackNotStarvedByFlappingHigherEndpoint(t *testing.T) {
	steps := []step{
		{2 * time.Second, wait, "C", "A:Unavailable B:Unavailable C:Available", []string{"A>C fallback"}},
		{3 * time.Second, up("B"), "C", "", nil},
		{3 * time.Second, pending("B", 4*time.Second), "C", "", nil},
		{4 * time.Second, wait, "B", "", []string{"C>B recovery"}},
		{12 * time.Second, wait, "B", "", nil},
	}
	for at := 3300 * ms; at < 12*time.Second; at += 800 * ms {
		steps = append(steps, step{at, up("A"), "", "", nil}, step{at + 300*ms, down("A"), "", "", nil})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	for i := range steps {
		if steps[i].wantCurrent == "" { // A's flaps: C until B's switch lands at 4s, then B
			steps[i].wantCurrent = "C"
			if steps[i].at >= 4*time.Second {
				steps[i].wantCurrent = "B"
			}
		}
	}
	runTable(t, table{endpoints: []string{"A", "B", "C"}, recovery: 2 * time.Second, switching: time.Second, ready: []string{"C"}, steps: steps})
}

// Rule 2, issue 13: an endpoint that already spent its RecoveryTimeout is Unavailable again
// at once when it drops during its probation. [A B], RecoveryTimeout 1s, SwitchingDelay 0; A
// drops every 200ms and is back 100ms later. With SwitchingDelay 0 traffic returns to A with
// each return, and at each drop from its first RecoveryTimeout on it goes to B at once,
// instead of staying on a Recovering A.
func TestRule2_FlappingEndpointThatSpentItsRecoveryTimeoutIsUnavailableAtOnce(t *testing.T) {
	const r = time.Second
	steps := []step{
		{200 * ms, down("A"), "A", "A:Recovering B:Available", nil},
		{300 * ms, up("A"), "A", "A:Available B:Available", nil}, // probation until 1.3s
		// The drops at 0.4s..1s continue the clock of the drop at 0.2s, which has run out at
		// the drop at 1.2s.
		{1200 * ms, down("A"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
	}
	for at := 400 * ms; at < 1200*ms; at += 200 * ms {
		steps = append(steps,
			step{at, down("A"), "A", "A:Recovering B:Available", nil},
			step{at + 100*ms, up("A"), "A", "A:Available B:Available", nil})
	}
	for at := 1200 * ms; at <= 10*time.Second; at += 200 * ms {
		steps = append(steps,
			step{at + 100*ms, up("A"), "A", "A:Available B:Available", []string{"B>A recovery"}},
			step{at + 200*ms, down("A"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	runTable(t, table{endpoints: []string{"A", "B"}, recovery: r, ready: []string{"A", "B"}, steps: steps})
}

// Rule 2: a returning endpoint is on probation for RecoveryTimeout; a drop during it
// continues the clock of its first drop; only a drop after a whole probation starts a fresh
// Recovering period.
func TestRule2_Probation(t *testing.T) {
	const r = time.Second
	for _, tc := range []table{
		{name: "drop during probation after Unavailable: Unavailable at once", endpoints: []string{"A", "B"}, recovery: r, ready: []string{"A", "B"},
			steps: []step{
				{1000 * ms, down("A"), "A", "A:Recovering B:Available", nil},
				{2000 * ms, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
				{3000 * ms, up("A"), "A", "A:Available B:Available", []string{"B>A recovery"}},
				{3999 * ms, down("A"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
			}},
		{name: "drop after a whole probation: a fresh Recovering period", endpoints: []string{"A", "B"}, recovery: r, ready: []string{"A", "B"},
			steps: []step{
				{1000 * ms, down("A"), "A", "", nil},
				{2000 * ms, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
				{3000 * ms, up("A"), "A", "", []string{"B>A recovery"}},
				{4000 * ms, down("A"), "A", "A:Recovering B:Available", nil},
				{4999 * ms, wait, "A", "A:Recovering B:Available", nil},
				{5000 * ms, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
			}},
		{name: "drop during probation after Recovering: the first drop's clock", endpoints: []string{"A", "B"}, recovery: r, ready: []string{"A", "B"},
			steps: []step{
				{1000 * ms, down("A"), "A", "", nil},
				{1500 * ms, up("A"), "A", "A:Available B:Available", nil},
				{1800 * ms, down("A"), "A", "A:Recovering B:Available", nil},
				{1999 * ms, wait, "A", "A:Recovering B:Available", nil},
				{2000 * ms, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
			}},
		{name: "each return starts a probation of its own", endpoints: []string{"A", "B"}, recovery: r, ready: []string{"A", "B"},
			steps: []step{
				{1000 * ms, down("A"), "A", "", nil},
				{2000 * ms, wait, "B", "", []string{"A>B fallback"}},
				{3000 * ms, up("A"), "A", "", []string{"B>A recovery"}},
				{3500 * ms, down("A"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
				{3800 * ms, up("A"), "A", "", []string{"B>A recovery"}},
				// Probation from 3.8s: a drop at 4.5s is within it.
				{4500 * ms, down("A"), "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
				{4600 * ms, up("A"), "A", "", []string{"B>A recovery"}},
				{5600 * ms, down("A"), "A", "A:Recovering B:Available", nil},
			}},
		{name: "first connection of an endpoint added down is no probation", endpoints: []string{"A", "B"}, recovery: r, ready: []string{"B"},
			steps: []step{
				{1000 * ms, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
				{2000 * ms, up("A"), "A", "", []string{"B>A recovery"}},
				{2100 * ms, down("A"), "A", "A:Recovering B:Available", nil},
				{3100 * ms, wait, "B", "A:Unavailable B:Available", []string{"A>B fallback"}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTable(t, tc) })
	}
}

// Rule 3 with reconfiguration: an endpoint that a reconfiguration adds, or moves above one it
// was below, arrives there at that moment: its delay counts from the reconfiguration (F2).
// Removing other endpoints never delays a switch.
func TestRule3_SwitchDelayAcrossReconfiguration(t *testing.T) {
	const s = time.Second
	for _, tc := range []table{
		{name: "removing the pending target keeps the next target's own delay", endpoints: []string{"A", "B", "C"}, switching: s, ready: []string{"C"},
			steps: []step{
				{1000 * ms, up("B"), "C", "", nil},
				{1500 * ms, up("A"), "C", "", nil},
				{1800 * ms, setEndpoints("B", "C"), "C", "B:Available C:Available", nil},
				{1800 * ms, pending("B", 2*time.Second), "C", "", nil},
				{2000 * ms, wait, "B", "", []string{"C>B reconfiguration"}},
			}},
		{name: "an endpoint moved above the pending target waits a whole delay from the move", endpoints: []string{"A", "C", "B"}, switching: s, ready: []string{"C"},
			steps: []step{
				{200 * ms, up("B"), "C", "A:Unavailable C:Available B:Available", nil},
				{1000 * ms, up("A"), "C", "", nil},
				{1000 * ms, pending("A", 2*time.Second), "C", "", nil},
				{1500 * ms, setEndpoints("B", "A", "C"), "C", "B:Available A:Available C:Available", nil},
				{1500 * ms, pending("B", 2500*ms), "C", "", nil},
				{2000 * ms, wait, "C", "", nil},
				{2500 * ms, wait, "B", "", []string{"C>B reconfiguration"}},
			}},
		{name: "an endpoint added ready waits a whole delay from its addition", endpoints: []string{"A", "C"}, switching: s, ready: []string{"C", "N"},
			steps: []step{
				{1000 * ms, setEndpoints("N", "A", "C"), "C", "N:Available A:Unavailable C:Available", nil},
				{1000 * ms, pending("N", 2*time.Second), "C", "", nil},
				{2000 * ms, wait, "N", "", []string{"C>N reconfiguration"}},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runTable(t, tc) })
	}
}
