package health

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// testConfig has small, distinct numbers so that each rule is seen apart.
var testConfig = Config{
	Interval:            10 * time.Second,
	ConsecutiveFailures: 5,
	FailurePercentage:   50,
	MinimumCalls:        10,
	BaseEjectionTime:    30 * time.Second,
	MaxEjectionTime:     70 * time.Second,
	ProbeInterval:       20 * time.Second,
}

var errUnavailable = status.Error(codes.Unavailable, "backend down")

// harness is a Detector on a fake clock whose probes and events are recorded.
type harness struct {
	t      fatalfer
	clock  *clock.Fake
	start  time.Time
	d      *Detector
	mu     sync.Mutex // guards probes and events
	probes []uint64   // probes started and not yet answered by the test
	events []Event
	// probeClasses are the classes of every probe started, in order.
	probeClasses []Class
}

// fatalfer is what harness needs of *testing.T and *rapid.T.
type fatalfer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// newHarness returns a harness; the caller closes h.d.
func newHarness(t fatalfer, cfg Config, withProbe bool) *harness {
	t.Helper()
	h := &harness{t: t, clock: clock.NewFake(time.Time{})}
	h.start = h.clock.Now()
	o := Options{Config: cfg, Clock: h.clock, OnEvent: func(ev Event) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.events = append(h.events, ev)
	}}
	if withProbe {
		o.Probe = func(seq uint64, c Class) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.probes = append(h.probes, seq)
			h.probeClasses = append(h.probeClasses, c)
		}
	}
	h.d = New(o)
	return h
}

// answer ends the oldest probe under way with err.
func (h *harness) answer(err error) {
	h.t.Helper()
	h.mu.Lock()
	if len(h.probes) == 0 {
		h.mu.Unlock()
		h.t.Fatalf("at %v: no probe under way to answer", h.clock.Now().Sub(h.start))
	}
	seq := h.probes[0]
	h.probes = h.probes[1:]
	h.mu.Unlock()
	h.d.ProbeDone(seq, err, time.Millisecond)
}

func (h *harness) takeEvents() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.events {
		s := ev.Kind.String()
		if ev.Kind == Ejected {
			s += fmt.Sprintf(":%s:%v", ev.Reason, ev.Until.Sub(ev.At))
		}
		out = append(out, s)
	}
	h.events = nil
	return out
}

func (h *harness) probing() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.probes)
}

// step is one line of a step table: move the clock to at (from the start), do ev n times,
// then check.
type step struct {
	at time.Duration
	// ev: "ok", "fail" (class Calls), "read", "readfail", "commit", "commitfail" (classes
	// Reads and Writes), "timeout", "confirm", "pass" (answer the probe: passed), "probefail",
	// "skip", or "" (only move the clock).
	ev string
	n  int
	// wantOut: ejected after the step. wantProbes: probes under way. wantEvents: the
	// events since the previous step ("ejected:<reason>:<ejection time>", "readmitted").
	wantOut    bool
	wantProbes int
	wantEvents []string
}

func runSteps(t *testing.T, cfg Config, withProbe bool, steps []step) *harness {
	t.Helper()
	h := newHarness(t, cfg, withProbe)
	t.Cleanup(h.d.Close)
	for i, s := range steps {
		h.clock.Set(h.start.Add(s.at))
		for range max(s.n, 1) {
			switch s.ev {
			case "ok":
				h.d.Success(Calls)
			case "fail":
				h.d.Failure(Calls, "", errUnavailable)
			case "read":
				h.d.Success(Reads)
			case "readfail":
				h.d.Failure(Reads, "/google.spanner.v1.Spanner/ExecuteStreamingSql", errUnavailable)
			case "commitfail":
				h.d.Failure(Writes, "/google.spanner.v1.Spanner/Commit", errUnavailable)
			case "commit":
				h.d.Success(Writes)
			case "timeout":
				h.d.Timeout()
			case "confirm":
				h.d.Confirm(Calls)
			case "confirmwrites":
				h.d.Confirm(Writes)
			case "pass":
				h.answer(nil)
			case "probefail":
				h.answer(errors.New("probe: deadline exceeded"))
			case "skip":
				h.answer(ErrProbeSkipped)
			case "":
			default:
				t.Fatalf("step %d: unknown event %q", i, s.ev)
			}
		}
		got := h.takeEvents()
		if h.d.Ejected() != s.wantOut || h.probing() != s.wantProbes || !slices.Equal(got, s.wantEvents) {
			t.Fatalf("step %d (at %v, %q x%d): ejected=%v probes=%d events=%q; want ejected=%v probes=%d events=%q\nstatus: %+v",
				i, s.at, s.ev, max(s.n, 1), h.d.Ejected(), h.probing(), got, s.wantOut, s.wantProbes, s.wantEvents, h.d.Status())
		}
	}
	return h
}

func TestDetectorSteps(t *testing.T) {
	const s = time.Second
	ms := time.Millisecond
	ejCons30 := []string{"ejected:consecutive failures:30s"}
	for _, tc := range []struct {
		name      string
		withProbe bool
		steps     []step
	}{
		{"consecutive failures eject; a success between them resets the count", true, []step{
			{at: 1 * s, ev: "fail", n: 4},
			{at: 1 * s, ev: "ok"},
			{at: 2 * s, ev: "fail", n: 4},
			{at: 2 * s, ev: "fail", wantOut: true, wantEvents: ejCons30},
			{at: 2 * s, ev: "fail", n: 20, wantOut: true}, // more failures eject nothing more
		}},
		{"failure percentage: more than the threshold among at least MinimumCalls", true, []step{
			{at: 1 * s, ev: "ok", n: 5},
			{at: 1 * s, ev: "fail", n: 4},
			{at: 1 * s, ev: "ok"},
			{at: 1 * s, ev: "fail", n: 1}, // 5 of 11: 45%
			{at: 2 * s, ev: "fail", n: 1}, // 6 of 12: 50%, not more
			{at: 2 * s, ev: "fail", n: 1, wantOut: true, wantEvents: []string{"ejected:failure percentage:30s"}}, // 7 of 13
		}},
		{"too few calls: no percentage ejection; the next interval starts from zero", true, []step{
			{at: 1 * s, ev: "fail", n: 4},
			{at: 1 * s, ev: "ok"},
			{at: 1 * s, ev: "fail", n: 4}, // 8 of 9
			{at: 10 * s},                  // the interval ends below MinimumCalls
			{at: 11 * s, ev: "ok"},
			{at: 11 * s, ev: "fail", n: 4}, // 4 of 5 in this interval, below MinimumCalls
			{at: 11 * s, ev: "ok", n: 20},
		}},
		{"failure percentage checked at the end of the interval", true, []step{
			{at: 1 * s, ev: "fail", n: 4},
			{at: 1 * s, ev: "ok"},
			{at: 1 * s, ev: "fail", n: 4},
			{at: 1 * s, ev: "ok"}, // 8 of 10, the last call a success
			{at: 9*s + 999*ms},    // still in the interval
			{at: 10 * s, wantOut: true, wantEvents: []string{"ejected:failure percentage:30s"}},
		}},
		{"a timeout makes the endpoint suspect; the probe decides", true, []step{
			{at: 1 * s, ev: "timeout", wantProbes: 1},
			{at: 1 * s, ev: "timeout", n: 50, wantProbes: 1}, // one probe at a time
			{at: 2 * s, ev: "pass"},
			{at: 3 * s, ev: "timeout"},                // a probe passed 1s ago: ProbeInterval/10 = 2s
			{at: 4 * s, ev: "timeout", wantProbes: 1}, // 2s after it
			{at: 5 * s, ev: "probefail", wantOut: true, wantEvents: []string{"ejected:timeouts:30s"}},
		}},
		{"ejection time, readmission probes until one passes, multiplier", true, []step{
			{at: 0, ev: "fail", n: 5, wantOut: true, wantEvents: ejCons30},
			{at: 29 * s, wantOut: true},
			{at: 30 * s, wantOut: true, wantProbes: 1},
			{at: 31 * s, ev: "probefail", wantOut: true},
			{at: 50 * s, wantOut: true},
			{at: 51 * s, wantOut: true, wantProbes: 1}, // ProbeInterval after the failed probe
			{at: 52 * s, ev: "pass", wantEvents: []string{"readmitted"}},
			{at: 53 * s, ev: "fail", n: 5, wantOut: true, wantEvents: []string{"ejected:consecutive failures:1m0s"}},
			{at: 113 * s, wantOut: true, wantProbes: 1},
			{at: 113 * s, ev: "pass", wantEvents: []string{"readmitted"}},
			{at: 114 * s, ev: "fail", n: 5, wantOut: true, wantEvents: []string{"ejected:consecutive failures:1m10s"}}, // 90s, capped at 70s
		}},
		{"the multiplier decays after whole intervals not ejected", true, []step{
			{at: 0, ev: "fail", n: 5, wantOut: true, wantEvents: ejCons30},
			{at: 30 * s, wantOut: true, wantProbes: 1},
			{at: 30 * s, ev: "pass", wantEvents: []string{"readmitted"}}, // multiplier 1
			{at: 39 * s, ev: "ok"},
			{at: 40 * s, ev: "ok"}, // one whole interval after readmission: multiplier 0
			{at: 41 * s, ev: "fail", n: 5, wantOut: true, wantEvents: ejCons30},
		}},
		{"the multiplier does not decay in an interval cut short", true, []step{
			{at: 0, ev: "fail", n: 5, wantOut: true, wantEvents: ejCons30},
			{at: 30 * s, wantOut: true, wantProbes: 1},
			{at: 30 * s, ev: "pass", wantEvents: []string{"readmitted"}},
			{at: 39 * s, ev: "fail", n: 5, wantOut: true, wantEvents: []string{"ejected:consecutive failures:1m0s"}},
		}},
		{"an endpoint without successful calls is probed; a failed probe ejects", true, []step{
			{at: 10 * s, ev: "ok"},
			{at: 20 * s},                // a success in the last ProbeInterval: no probe
			{at: 40 * s, wantProbes: 1}, // none since 20s
			{at: 40 * s, ev: "pass"},
			{at: 60 * s, wantProbes: 1},
			{at: 61 * s, ev: "probefail", wantOut: true, wantEvents: []string{"ejected:probe failed:30s"}},
		}},
		{"a probe result that ends before the ejection time is over readmits nothing", true, []step{
			{at: 1 * s, ev: "timeout", wantProbes: 1},
			{at: 1 * s, ev: "fail", n: 5, wantOut: true, wantProbes: 1, wantEvents: ejCons30},
			{at: 2 * s, ev: "pass", wantOut: true},
			{at: 31 * s, wantOut: true, wantProbes: 1},
			{at: 31 * s, ev: "pass", wantEvents: []string{"readmitted"}},
		}},
		{"a skipped readmission probe is tried again after ProbeInterval", true, []step{
			{at: 0, ev: "fail", n: 5, wantOut: true, wantEvents: ejCons30},
			{at: 30 * s, wantOut: true, wantProbes: 1},
			{at: 30 * s, ev: "skip", wantOut: true},
			{at: 50 * s, wantOut: true, wantProbes: 1},
			{at: 50 * s, ev: "pass", wantEvents: []string{"readmitted"}},
		}},
		{"a skipped suspicion probe ejects nothing", true, []step{
			{at: 1 * s, ev: "timeout", wantProbes: 1},
			{at: 1 * s, ev: "skip"},
		}},
		{"without probes: timeouts never eject, readmission when the ejection time is over", false, []step{
			{at: 1 * s, ev: "timeout", n: 100},
			{at: 100 * s},
			{at: 100 * s, ev: "fail", n: 5, wantOut: true, wantEvents: ejCons30},
			{at: 130 * s, wantEvents: []string{"readmitted"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runSteps(t, testConfig, tc.withProbe, tc.steps)
		})
	}
}

// Application errors are the backend's answers: thousands of them, with probes passing,
// eject nothing (F16).
func TestApplicationErrorsNeverEject(t *testing.T) {
	h := newHarness(t, testConfig, true)
	defer h.d.Close()
	appErrs := []codes.Code{codes.NotFound, codes.InvalidArgument, codes.Aborted, codes.AlreadyExists,
		codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated, codes.OutOfRange,
		codes.Unimplemented, codes.ResourceExhausted, codes.Canceled, codes.Internal}
	for i := range 5000 {
		err := status.Error(appErrs[i%len(appErrs)], "application error")
		h.d.Record(Calls, "", Classify(err, true, false), err)
		if i%100 == 0 {
			h.clock.Advance(time.Second)
			if h.probing() > 0 {
				h.answer(nil)
			}
		}
	}
	if h.d.Ejected() || len(h.takeEvents()) != 0 {
		t.Fatalf("application errors ejected the endpoint: %+v", h.d.Status())
	}
}

func TestStatus(t *testing.T) {
	h := runSteps(t, testConfig, true, []step{
		{at: 1 * time.Second, ev: "ok", n: 3},
		{at: 2 * time.Second, ev: "timeout", wantProbes: 1},
		{at: 2 * time.Second, ev: "fail", n: 2, wantProbes: 1},
	})
	st := h.d.Status()
	want := Status{Suspect: true, ProbeInFlight: true, IntervalStart: h.start, Calls: 5, Failures: 2, Timeouts: 1, ConsecutiveFailures: 2}
	if st.Ejected != want.Ejected || st.Suspect != want.Suspect || st.ProbeInFlight != want.ProbeInFlight ||
		!st.IntervalStart.Equal(want.IntervalStart) || st.Calls != want.Calls || st.Failures != want.Failures ||
		st.Timeouts != want.Timeouts || st.ConsecutiveFailures != want.ConsecutiveFailures {
		t.Fatalf("Status = %+v, want %+v", st, want)
	}
	h.clock.Set(h.start.Add(3 * time.Second))
	h.answer(errors.New("no answer"))
	st = h.d.Status()
	if !st.Ejected || st.Reason != Timeouts || st.Ejections != 1 || st.Multiplier != 1 ||
		!st.EjectedAt.Equal(h.start.Add(3*time.Second)) || !st.EjectedUntil.Equal(h.start.Add(33*time.Second)) ||
		st.LastProbe.Passed() || !st.LastProbe.At.Equal(h.start.Add(2*time.Second)) || st.LastProbe.Latency != time.Millisecond ||
		!strings.Contains(st.Detail, "no answer") || st.Suspect {
		t.Fatalf("Status after the failed probe = %+v", st)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	h := newHarness(t, testConfig, true)
	defer h.d.Close()
	h.d.Timeout()
	h.d.Close()
	h.d.Close()
	if n := h.clock.Pending(); n != 0 {
		t.Fatalf("%d timers pending after Close", n)
	}
	h.answer(errors.New("failed")) // ignored
	for range 20 {
		h.d.Failure(Calls, "", errUnavailable)
	}
	h.d.Timeout()
	h.clock.Advance(time.Hour)
	if h.d.Ejected() || h.probing() != 0 || len(h.takeEvents()) != 0 {
		t.Fatalf("the detector acted after Close: %+v", h.d.Status())
	}
}

func TestEjectionTime(t *testing.T) {
	c := Config{BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second}
	for _, tc := range []struct {
		base, max time.Duration
		n         int
		want      time.Duration
	}{
		{c.BaseEjectionTime, c.MaxEjectionTime, 1, 30 * time.Second},
		{c.BaseEjectionTime, c.MaxEjectionTime, 3, 90 * time.Second},
		{c.BaseEjectionTime, c.MaxEjectionTime, 10, 300 * time.Second},
		{c.BaseEjectionTime, c.MaxEjectionTime, 11, 300 * time.Second},
		{c.BaseEjectionTime, c.MaxEjectionTime, 1 << 40, 300 * time.Second}, // no overflow
		{time.Minute, time.Second, 5, time.Minute},                          // max below base: base
	} {
		got := Config{BaseEjectionTime: tc.base, MaxEjectionTime: tc.max}.ejectionTime(tc.n)
		if got != tc.want {
			t.Errorf("ejectionTime(base %v, max %v, %d) = %v, want %v", tc.base, tc.max, tc.n, got, tc.want)
		}
	}
}

// Success is the call path: no allocation, no lock.
func TestSuccessAllocatesNothing(t *testing.T) {
	h := newHarness(t, testConfig, true)
	defer h.d.Close()
	h.d.Failure(Calls, "", errUnavailable)
	if n := testing.AllocsPerRun(1000, func() { h.d.Success(Calls); _ = h.d.Ejected() }); n != 0 {
		t.Fatalf("Success allocates %v times per call", n)
	}
}

// Concurrent outcomes, probes and status reads on the real clock, for the race detector; the
// events still come one at a time and in order: ejections and readmissions alternate, and
// each ejection counts one more.
func TestConcurrentUse(t *testing.T) {
	var mu sync.Mutex
	var d *Detector
	pending := map[uint64]bool{}
	var events []Event // appended by OnEvent, one call at a time
	var evMu sync.Mutex
	d = New(Options{Config: Config{Interval: time.Millisecond, ConsecutiveFailures: 3, FailurePercentage: 10, MinimumCalls: 5,
		BaseEjectionTime: time.Millisecond, MaxEjectionTime: 3 * time.Millisecond, ProbeInterval: time.Millisecond},
		Probe: func(seq uint64, _ Class) { mu.Lock(); pending[seq] = true; mu.Unlock() },
		OnEvent: func(ev Event) {
			_ = d.Status()
			evMu.Lock()
			events = append(events, ev)
			evMu.Unlock()
		}})
	defer func() {
		d.Close()
		evMu.Lock()
		defer evMu.Unlock()
		ejections := 0
		for i, ev := range events {
			if want := []EventKind{Ejected, Readmitted}[i%2]; ev.Kind != want {
				t.Fatalf("event %d is %v, want %v: ejections and readmissions must alternate", i, ev.Kind, want)
			}
			if ev.Kind == Ejected {
				ejections++
			}
			if ev.Ejections != ejections {
				t.Fatalf("event %d (%v) counts %d ejections, want %d", i, ev.Kind, ev.Ejections, ejections)
			}
		}
		if ejections == 0 {
			t.Fatal("no ejection: the test exercised nothing")
		}
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				switch (i + g) % 4 {
				case 0, 1:
					d.Success(Calls)
				case 2:
					d.Failure(Calls, "", errUnavailable)
				case 3:
					d.Timeout()
				}
				if i%50 == 0 {
					mu.Lock()
					for seq := range pending {
						delete(pending, seq)
						mu.Unlock()
						d.ProbeDone(seq, nil, 0)
						mu.Lock()
					}
					mu.Unlock()
					_ = d.Status()
				}
			}
		}()
	}
	wg.Wait()
}

// Calls whose connection went away count for nothing: many of them in a row, as one reset
// connection ends, eject nothing and do not break a run of failures apart either.
func TestLostConnectionsEjectNothing(t *testing.T) {
	h := newHarness(t, testConfig, true)
	defer h.d.Close()
	lost := status.Error(codes.Unavailable, `connection error: desc = "error reading from server: read: connection reset by peer"`)
	for range 100 {
		h.d.Record(Calls, "", Classify(lost, false, false), lost)
	}
	if st := h.d.Status(); h.d.Ejected() || st.ConsecutiveFailures != 0 || st.Failures != 0 || st.Calls != 0 {
		t.Fatalf("lost connections counted: %+v", st)
	}
	for range testConfig.ConsecutiveFailures {
		h.d.Record(Calls, "", Classify(errUnavailable, true, false), errUnavailable)
		h.d.Record(Calls, "", Classify(lost, false, false), lost)
	}
	if !h.d.Ejected() {
		t.Fatalf("the backend's own UNAVAILABLE answers, interleaved with lost connections, did not eject: %+v", h.d.Status())
	}
}

// A probe without a verdict (answered CANCELED, say: the probe wraps ErrProbeSkipped) ejects
// nothing: not a standby's idle probe, not a suspect's; an ejected endpoint whose readmission
// probe had no verdict stays out and is probed again after ProbeInterval.
func TestProbeWithoutVerdictEjectsNothing(t *testing.T) {
	canceled := fmt.Errorf("%w: %w", ErrProbeSkipped, status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL"))
	h := newHarness(t, testConfig, true)
	defer h.d.Close()
	// A standby: the idle probe comes after ProbeInterval.
	h.clock.Advance(testConfig.ProbeInterval)
	if h.probing() != 1 {
		t.Fatalf("no idle probe after ProbeInterval")
	}
	h.answer(canceled)
	if h.d.Ejected() {
		t.Fatalf("a CANCELED idle probe ejected: %+v", h.d.Status())
	}
	// A suspect.
	h.clock.Advance(testConfig.ProbeInterval / 5)
	h.d.Timeout()
	if h.probing() != 1 {
		t.Fatalf("no probe for a suspect")
	}
	h.answer(canceled)
	if h.d.Ejected() {
		t.Fatalf("a CANCELED probe of a suspect ejected: %+v", h.d.Status())
	}
	// Ejected: the readmission probe without a verdict keeps it out, and it is probed again.
	for range testConfig.ConsecutiveFailures {
		h.d.Failure(Calls, "", errUnavailable)
	}
	if !h.d.Ejected() {
		t.Fatalf("not ejected by failures")
	}
	h.takeEvents()
	h.clock.Advance(testConfig.BaseEjectionTime)
	if h.probing() != 1 {
		t.Fatalf("no readmission probe")
	}
	h.answer(canceled)
	if !h.d.Ejected() || h.probing() != 0 {
		t.Fatalf("a CANCELED readmission probe decided: ejected=%v probes=%d", h.d.Ejected(), h.probing())
	}
	h.clock.Advance(testConfig.ProbeInterval)
	if h.probing() != 1 {
		t.Fatalf("not probed again ProbeInterval after a probe without a verdict")
	}
	h.answer(nil)
	if h.d.Ejected() {
		t.Fatalf("a passing probe did not readmit")
	}
	if ev := h.takeEvents(); !slices.Equal(ev, []string{"readmitted"}) {
		t.Fatalf("events %q, want only readmitted", ev)
	}
}

// Classes are counted apart: a class that keeps failing ejects the endpoint although another
// class succeeds between its failures (a gray failure), and each class's percentage is its
// own.
func TestClassesCountedApart(t *testing.T) {
	cfg := Config{Interval: 10 * time.Second, ConsecutiveFailures: 10, FailurePercentage: 50, MinimumCalls: 20,
		BaseEjectionTime: 30 * time.Second}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"commits fail, reads succeed between them", func() []step {
			var st []step
			for i := range 9 {
				st = append(st, step{at: time.Duration(i) * 100 * time.Millisecond, ev: "read", n: 4}, step{ev: "commitfail", at: time.Duration(i) * 100 * time.Millisecond})
			}
			return append(st, step{at: time.Second, ev: "commitfail", wantOut: true, wantEvents: []string{"ejected:consecutive failures:30s"}})
		}()},
		{"a commit success resets only the writes", []step{
			{ev: "readfail", n: 9}, {ev: "commit"}, {ev: "readfail", wantOut: true, wantEvents: []string{"ejected:consecutive failures:30s"}},
		}},
		{"reads over the percentage, writes fine", []step{
			// 100 commits keep the endpoint's calls as a whole far below 50% failed.
			{ev: "commit", n: 100}, {ev: "read", n: 9}, {ev: "readfail", n: 5}, {ev: "read"}, {ev: "readfail", n: 5},
			{ev: "read"}, {ev: "readfail"}, // 11 of 22 reads failed: not more than 50%
			{ev: "readfail", wantOut: true, wantEvents: []string{"ejected:failure percentage:30s"}},
		}},
		{"a few failures of each class eject nothing", []step{
			{ev: "read", n: 50}, {ev: "readfail", n: 3}, {ev: "commit", n: 50}, {ev: "commitfail", n: 3}, {at: 10 * time.Second},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, cfg, false, tc.steps) })
	}
}

// The ejection names the class and the method whose failures caused it, and Status gives
// each class's counts.
func TestEjectionNamesClassAndMethod(t *testing.T) {
	h := newHarness(t, Config{ConsecutiveFailures: 3}, false)
	t.Cleanup(h.d.Close)
	h.d.Success(Reads)
	for range 3 {
		h.d.Failure(Writes, "/google.spanner.v1.Spanner/Commit", errUnavailable)
	}
	st := h.d.Status()
	if !st.Ejected || st.Class != Writes || !strings.HasPrefix(st.Detail, "writes failing (Commit): 3 consecutive failures") {
		t.Fatalf("status %+v, want ejected by writes failing (Commit)", st)
	}
	if w, r := st.Classes[Writes], st.Classes[Reads]; w.Failures != 3 || w.Calls != 3 || r.Calls != 1 || r.Failures != 0 {
		t.Errorf("class counts: writes %+v, reads %+v", w, r)
	}
	if n := testing.AllocsPerRun(1000, func() { h.d.Success(Writes) }); n != 0 {
		t.Errorf("Success allocates %v times", n)
	}
}

// Confirm (another endpoint of a group was ejected) probes at once, never while ejected; a
// probe under way answers it only if it is of its class and started at that instant, else the
// confirming probe follows it (one per class waits; the classes one after the other); an
// ejection drops those waiting; a failed confirming probe ejects.
func TestConfirm(t *testing.T) {
	runSteps(t, testConfig, true, []step{
		{at: time.Second, ev: "confirm", wantProbes: 1},
		{at: time.Second, ev: "confirm", wantProbes: 1}, // the one under way started now: it answers
		{at: time.Second, ev: "pass"},
		{at: 1100 * time.Millisecond, ev: "confirm", wantProbes: 1}, // a probe that passed before says nothing of now
		{at: 1200 * time.Millisecond, ev: "confirm", wantProbes: 1}, // under way since before: this one waits
		{at: 1200 * time.Millisecond, ev: "confirm", wantProbes: 1}, // one per class waits
		{at: 1300 * time.Millisecond, ev: "pass", wantProbes: 1},    // the waiting one starts
		{at: 1300 * time.Millisecond, ev: "pass"},                   // nothing more waits
		{at: 3500 * time.Millisecond, ev: "confirm", wantProbes: 1},
		{at: 3500 * time.Millisecond, ev: "probefail", wantOut: true, wantEvents: []string{"ejected:probe failed:30s"}},
		{at: 10 * time.Second, ev: "confirm", wantOut: true}, // ejected: its own probes decide
	})
	// An idle check under way when another endpoint is ejected for its writes: the writes
	// probe follows it, and its failure ejects for writes.
	h := runSteps(t, testConfig, true, []step{
		{at: 20 * time.Second, wantProbes: 1}, // the idle check (ProbeInterval)
		{at: 20 * time.Second, ev: "confirmwrites", wantProbes: 1},
		{at: 20500 * time.Millisecond, ev: "pass", wantProbes: 1},
		{at: 20500 * time.Millisecond, ev: "probefail", wantOut: true, wantEvents: []string{"ejected:probe failed:30s"}},
	})
	if st := h.d.Status(); st.Class != Writes {
		t.Errorf("ejected for %v, want writes", st.Class)
	}
	// Confirms of two classes wait for a probe under way: each is probed, one after the other.
	h = runSteps(t, testConfig, true, []step{
		{at: time.Second, ev: "timeout", wantProbes: 1},
		{at: 1100 * time.Millisecond, ev: "confirmwrites", wantProbes: 1},
		{at: 1100 * time.Millisecond, ev: "confirm", wantProbes: 1},
		{at: 1200 * time.Millisecond, ev: "pass", wantProbes: 1},
		{at: 1300 * time.Millisecond, ev: "pass", wantProbes: 1},
		{at: 1400 * time.Millisecond, ev: "pass"},
	})
	h.mu.Lock()
	if want := []Class{Calls, Calls, Writes}; !slices.Equal(h.probeClasses, want) {
		t.Errorf("probe classes %v, want %v", h.probeClasses, want)
	}
	h.mu.Unlock()
	// A probe under way whose endpoint is ejected by its calls meanwhile: the waiting confirm
	// is dropped (the ejection's own probes decide), and not sent after the readmission either.
	runSteps(t, testConfig, true, []step{
		{at: time.Second, ev: "timeout", wantProbes: 1},
		{at: 1100 * time.Millisecond, ev: "confirm", wantProbes: 1},
		{at: 1200 * time.Millisecond, ev: "commitfail", n: 5, wantOut: true, wantProbes: 1, wantEvents: []string{"ejected:consecutive failures:30s"}},
		{at: 1300 * time.Millisecond, ev: "pass", wantOut: true},
		{at: 31200 * time.Millisecond, wantOut: true, wantProbes: 1}, // the ejection time is over
		{at: 31200 * time.Millisecond, ev: "pass", wantEvents: []string{"readmitted"}},
	})
	// Without a probe function there is nothing to confirm with.
	runSteps(t, testConfig, false, []step{{at: time.Second, ev: "confirm"}})
}

// The probes that may readmit an endpoint prove the class whose failures ejected it; every
// other probe (idle, timeout, confirm) is of class Calls.
func TestReadmissionProbesTheClassThatFailed(t *testing.T) {
	h := runSteps(t, testConfig, true, []step{
		{at: time.Second, ev: "commitfail", n: 5, wantOut: true, wantEvents: []string{"ejected:consecutive failures:30s"}},
		{at: 31 * time.Second, wantOut: true, wantProbes: 1},                   // the ejection time is over
		{at: 31 * time.Second, ev: "probefail", wantOut: true},                 // writes still fail
		{at: 51 * time.Second, wantOut: true, wantProbes: 1},                   // ProbeInterval later
		{at: 51 * time.Second, ev: "pass", wantEvents: []string{"readmitted"}}, // the commit path answers
		{at: 71 * time.Second, wantProbes: 1},                                  // an idle check
		{at: 71 * time.Second, ev: "pass"},
		{at: 74 * time.Second, ev: "confirm", wantProbes: 1},
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := []Class{Writes, Writes, Calls, Calls}; !slices.Equal(h.probeClasses, want) {
		t.Fatalf("probe classes %v, want %v", h.probeClasses, want)
	}
}

// An ejection's detail and a failed probe's error quote a server's error text: they are kept
// cut to bounded.ServerText bytes, with the marker.
func TestServerTextIsBounded(t *testing.T) {
	h := newHarness(t, testConfig, true)
	defer h.d.Close()
	long := strings.Repeat("server detail ", 1000)
	err := status.Error(codes.Unavailable, long)
	for range testConfig.ConsecutiveFailures {
		h.d.Record(Writes, "/google.spanner.v1.Spanner/Commit", Classify(err, true, false), err)
	}
	const most = bounded.ServerText + len("…[cut: 100000 bytes in all]")
	st := h.d.Status()
	if !st.Ejected || len(st.Detail) > most || !strings.Contains(st.Detail, "…[cut: ") {
		t.Fatalf("ejected %v with a detail of %d bytes: %.80q…", st.Ejected, len(st.Detail), st.Detail)
	}
	h.clock.Advance(testConfig.BaseEjectionTime)
	if h.probing() == 0 {
		t.Fatal("no readmission probe")
	}
	h.answer(errors.New(long))
	if e := h.d.Status().LastProbe.Err; e == nil || len(e.Error()) > most {
		t.Fatalf("the failed probe's error is kept as %v", e)
	}
}

// A confirming probe proves the class that ejected the other endpoint, and its failure ejects
// for that class; a probe of another class that was under way at an ejection and passes after
// the ejection time readmits nothing: the class that failed is probed at once.
func TestProbesProveTheirClass(t *testing.T) {
	h := runSteps(t, testConfig, true, []step{
		{at: time.Second, ev: "confirmwrites", wantProbes: 1},
		{at: time.Second, ev: "probefail", wantOut: true, wantEvents: []string{"ejected:probe failed:30s"}},
	})
	if st := h.d.Status(); st.Class != Writes {
		t.Fatalf("ejected for %v by a failed writes probe, want writes", st.Class)
	}
	h = runSteps(t, testConfig, true, []step{
		{at: time.Second, ev: "timeout", wantProbes: 1}, // a probe of class calls under way
		{at: 2 * time.Second, ev: "commitfail", n: 5, wantOut: true, wantProbes: 1, wantEvents: []string{"ejected:consecutive failures:30s"}},
		{at: 32 * time.Second, ev: "pass", wantOut: true}, // after the ejection time: it proves calls, not writes
		{at: 32 * time.Second, wantOut: true, wantProbes: 1},
		{at: 32 * time.Second, ev: "pass", wantEvents: []string{"readmitted"}},
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := []Class{Calls, Writes}; !slices.Equal(h.probeClasses, want) {
		t.Fatalf("probe classes %v, want %v", h.probeClasses, want)
	}
}
