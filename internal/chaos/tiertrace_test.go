package chaos

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// TestSampleTiers reads the tiered group out of a status: its current endpoint and tier, the
// ramp, each member's availability, score and calls in flight, and which pools are READY (a
// retired pool is not); another group's endpoints and an unknown address change nothing.
func TestSampleTiers(t *testing.T) {
	idx := func(a string) int {
		if i, ok := map[string]int{"a1": 0, "a2": 1, "a3": 2}[a]; ok {
			return i
		}
		return -1
	}
	st := spannerme.Status{
		Pools: []spannerme.PoolStatus{
			{Endpoint: "a1", Connectivity: "READY"},
			{Endpoint: "a2", Connectivity: "TRANSIENT_FAILURE"},
			{Endpoint: "a3", Connectivity: "READY", Retired: true},
			{Endpoint: "other", Connectivity: "READY"},
		},
		Groups: []spannerme.GroupStatus{
			{Name: GroupDefault, Current: "a2", Endpoints: []spannerme.EndpointStatus{{Endpoint: "a2", State: spannerme.Available}}},
			{Name: groupNames[tieredGroup], Current: "a3",
				Endpoints: []spannerme.EndpointStatus{{Endpoint: "a1", State: spannerme.Available}, {Endpoint: "a2"}, {Endpoint: "a3", State: spannerme.Available}},
				Tiers: &spannerme.TiersStatus{CurrentTier: 1, SlowStartFrom: -1, Members: []spannerme.TierMemberStatus{
					{Endpoint: "a1", Latency: 7 * time.Millisecond, InFlight: 3},
					{Endpoint: "a3", Latency: time.Second},
				}}},
		},
	}
	s, ok := sampleTiers(st, idx, 5*time.Second)
	if !ok {
		t.Fatal("no sample from a status with the tiered group")
	}
	want := tierSample{at: 5 * time.Second, current: 2, tier: 1, rampFrom: -1,
		score: [NumEndpoints]time.Duration{7 * time.Millisecond, 0, time.Second}, inFlight: [NumEndpoints]int32{3, 0, 0},
		available: [NumEndpoints]bool{true, false, true}, ready: [NumEndpoints]bool{true, false, false}}
	if s != want {
		t.Fatalf("sample\n%+v, want\n%+v", s, want)
	}
	st.Groups = st.Groups[:1]
	if _, ok := sampleTiers(st, idx, 0); ok {
		t.Fatal("a sample from a status without the tiered group")
	}
}

// TestTraceOf: a way back told per half second, from the half second of the heal to its end:
// each step's successes per endpoint (from the buckets), and the last sample of the step;
// a step without a sample is left out.
func TestTraceOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	heal := t0.Add(10*time.Second + 200*time.Millisecond)
	var b [NumEndpoints][]int32
	for e := range b {
		b[e] = make([]int32, 120)
	}
	for i := 100; i < 110; i++ { // 10.0s to 11.0s
		b[0][i], b[1][i] = 1, 4
	}
	samples := []tierSample{
		{at: 9900 * time.Millisecond, current: 2, rampFrom: -1},                                                             // before the heal's step
		{at: 10100 * time.Millisecond, current: 2, tier: 1, rampFrom: -1, score: [3]time.Duration{0, 9 * time.Millisecond}}, // not the step's last
		{at: 10400 * time.Millisecond, current: 0, tier: 0, rampFrom: 1, score: [3]time.Duration{2 * time.Second, 9 * time.Millisecond},
			inFlight: [3]int32{1, 2, 0}, waiting: [3]time.Duration{0, 1234567 * time.Microsecond}, available: [3]bool{true, true, true}, ready: [3]bool{true, true, false}},
		// none from 10.5s to 11s
		{at: 11200 * time.Millisecond, current: 0, rampFrom: -1, score: [3]time.Duration{12340 * time.Microsecond, 9 * time.Millisecond}},
		{at: 12100 * time.Millisecond, current: 1, rampFrom: -1}, // after the end
	}
	got := traceOf(episode{heal: heal, tiered: true}, samples, b, t0, t0.Add(11500*time.Millisecond))
	want := []string{
		"+10.0s on e1 tier 0 (ramp from tier 1) | e1 AR 5 ok, score 2s, 1 in flight | e2 AR 20 ok, score 9ms, 2 in flight (waiting 1.235s) | e3 A- 0 ok, score unmeasured, 0 in flight",
		"+11.0s on e1 tier 0 | e1 -- 0 ok, score 12.3ms, 0 in flight | e2 -- 0 ok, score 9ms, 0 in flight | e3 -- 0 ok, score unmeasured, 0 in flight",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("trace\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestFailoverTablePrintsTheLongestTierWayBack: the table is followed by the trace of each
// tier row's longest way back, capped at maxTraceLines (its start and its end); a row without
// tiers prints none.
func TestFailoverTablePrintsTheLongestTierWayBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	heal := t0.Add(10 * time.Second)
	var samples []tierSample
	for at := 10 * time.Second; at < 40*time.Second; at += traceEvery {
		samples = append(samples, tierSample{at: at, rampFrom: -1})
	}
	rows := []FailoverRow{
		{Kind: "die-young [tier]", Back: []time.Duration{30 * time.Second}, BackBound: 4800 * time.Millisecond, WorstBack: "e1 at +10.0s (in force: none)",
			worstBack: episode{heal: heal, tiered: true}, worstBackEnd: heal.Add(30 * time.Second)},
		{Kind: "down", Back: []time.Duration{time.Second}, BackBound: 2250 * time.Millisecond, WorstBack: "e1 at +3.0s (in force: none)",
			worstBack: episode{heal: heal}, worstBackEnd: heal.Add(time.Second)},
	}
	traceWorst(rows, samples, [NumEndpoints][]int32{}, t0)
	tr := rows[0].worstBackTrace
	if n := len(tr); n != maxTraceLines+1 || tr[maxTraceLines/2] != "(36 lines left out)" ||
		!strings.HasPrefix(tr[0], "+10.0s ") || !strings.HasPrefix(tr[n-1], "+39.5s ") {
		t.Fatalf("tier row's trace: %d lines, want %d: its first and last %d steps and the count of those left out:\n%s",
			n, maxTraceLines+1, maxTraceLines/2, strings.Join(tr, "\n"))
	}
	if rows[1].worstBackTrace != nil {
		t.Fatalf("a row without tiers traced: %q", rows[1].worstBackTrace)
	}
	var out bytes.Buffer
	printFailover(&out, rows)
	if c := strings.Count(out.String(), "the longest way back of "); c != 1 || !strings.Contains(out.String(), "the longest way back of die-young [tier]: 30.00s, e1 at +10.0s") {
		t.Fatalf("printed %d traces:\n%s", c, out.String())
	}
}
