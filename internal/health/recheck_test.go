package health

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestRecheck: another endpoint's readmission makes an ejected endpoint whose ejection time is
// over probe at once with the class that ejected it (not a ProbeInterval after its last failed
// probe), and readmits it when that passes; a probe under way is superseded, its late failure
// ignored; before the ejection time is over, or when not ejected, nothing is probed.
func TestRecheck(t *testing.T) {
	h := newHarness(t, testConfig, true)
	defer h.d.Close()
	step := stepper(t, &h, (*Detector).Recheck)
	step(time.Second, "not ejected", true, false, 0)
	for range testConfig.ConsecutiveFailures {
		h.d.Failure(Writes, "/google.spanner.v1.Spanner/Commit", errUnavailable)
	}
	step(time.Second, "ejected for writes", false, true, 0, "ejected:consecutive failures:30s")
	step(20*time.Second, "before the ejection time is over", true, true, 0)
	step(31*time.Second, "the ejection time is over: its own probe", false, true, 1)
	h.answer(errors.New("commit still failing"))
	step(31*time.Second, "that probe failed: the next one a ProbeInterval later", false, true, 0)
	step(35*time.Second, "another endpoint readmitted", true, true, 1)
	h.answer(nil)
	step(35*time.Second, "the recheck passed", false, false, 0, "readmitted")
	h.mu.Lock()
	classes := slices.Clone(h.probeClasses)
	h.mu.Unlock()
	if want := []Class{Writes, Writes}; !slices.Equal(classes, want) {
		t.Fatalf("probe classes %v, want %v", classes, want)
	}

	// A probe under way when the other endpoint is readmitted is superseded.
	h = newHarness(t, testConfig, true)
	defer h.d.Close()
	for range testConfig.ConsecutiveFailures {
		h.d.Failure(Calls, "", errUnavailable)
	}
	step(30*time.Second, "its own probe under way", false, true, 1, "ejected:consecutive failures:30s")
	step(30*time.Second, "another endpoint readmitted", true, true, 2)
	h.answer(errors.New("the fault that just ended"))
	step(30*time.Second, "the superseded probe's failure is ignored", false, true, 1)
	h.answer(nil)
	step(30*time.Second, "the recheck passed", false, false, 0, "readmitted")

	// Without a probe function there is nothing to probe with.
	h = newHarness(t, testConfig, false)
	defer h.d.Close()
	for range testConfig.ConsecutiveFailures {
		h.d.Failure(Calls, "", errUnavailable)
	}
	h.clock.Set(h.start.Add(10 * time.Second))
	h.d.Recheck()
	if !h.d.Ejected() {
		t.Fatal("readmitted by a Recheck without a probe function, before the ejection time")
	}
}

// TestConnected: an ejected endpoint whose probe found no connection when its ejection time
// ended (skipped) probes at once, with the class that ejected it, when its connection is
// ready again, not a ProbeInterval later, and is readmitted when that passes. Before the
// ejection time is over, with a probe under way (left to finish), or when not ejected,
// Connected probes nothing; nor without a probe function.
func TestConnected(t *testing.T) {
	h := newHarness(t, testConfig, true)
	defer h.d.Close()
	step := stepper(t, &h, (*Detector).Connected)
	step(time.Second, "connected, not ejected", true, false, 0)
	for range testConfig.ConsecutiveFailures {
		h.d.Failure(Reads, "/google.spanner.v1.Spanner/ExecuteStreamingSql", errUnavailable)
	}
	step(time.Second, "ejected for reads", false, true, 0, "ejected:consecutive failures:30s")
	step(20*time.Second, "connected before the ejection time is over", true, true, 0)
	step(31*time.Second, "the ejection time is over: its own probe", false, true, 1)
	step(31*time.Second, "connected with that probe under way: left to finish", true, true, 1)
	h.answer(fmt.Errorf("%w: no ready connection", ErrProbeSkipped))
	step(31*time.Second, "that probe was skipped: the next one a ProbeInterval later", false, true, 0)
	step(32*time.Second, "connected again", true, true, 1)
	h.answer(nil)
	step(32*time.Second, "that probe passed", false, false, 0, "readmitted")
	h.mu.Lock()
	classes := slices.Clone(h.probeClasses)
	h.mu.Unlock()
	if want := []Class{Reads, Reads}; !slices.Equal(classes, want) {
		t.Fatalf("probe classes %v, want %v", classes, want)
	}

	h = newHarness(t, testConfig, false)
	defer h.d.Close()
	for range testConfig.ConsecutiveFailures {
		h.d.Failure(Calls, "", errUnavailable)
	}
	h.clock.Set(h.start.Add(10 * time.Second))
	h.d.Connected()
	if !h.d.Ejected() {
		t.Fatal("readmitted by Connected without a probe function, before the ejection time")
	}
}

// stepper returns a step of a test on the harness *hp (a test may start a new one): at its
// start plus at, calls act on its detector if do, then checks whether the endpoint is
// ejected, how many probes are under way and the events since the last step (what names the
// step in a failure).
func stepper(t *testing.T, hp **harness, act func(*Detector)) func(at time.Duration, what string, do bool, wantOut bool, wantProbes int, wantEvents ...string) {
	return func(at time.Duration, what string, do bool, wantOut bool, wantProbes int, wantEvents ...string) {
		t.Helper()
		h := *hp
		h.clock.Set(h.start.Add(at))
		if do {
			act(h.d)
		}
		got := h.takeEvents()
		if h.d.Ejected() != wantOut || h.probing() != wantProbes || !slices.Equal(got, wantEvents) {
			t.Fatalf("%s (at %v): ejected=%v probes=%d events=%q; want ejected=%v probes=%d events=%q",
				what, at, h.d.Ejected(), h.probing(), got, wantOut, wantProbes, wantEvents)
		}
	}
}
