package spannerme

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// probeOutcome is what a probe's result tells the detector.
type probeOutcome int

const (
	passed probeOutcome = iota
	failed
	noVerdict
)

func verdictOf(err error) probeOutcome {
	switch {
	case err == nil:
		return passed
	case errors.Is(err, health.ErrProbeSkipped):
		return noVerdict
	}
	return failed
}

// A probe passes on any answer of the backend, fails when the path failed or nothing
// answered, and decides nothing when it was answered CANCELED or its connection went away.
func TestProbeVerdict(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want probeOutcome
	}{
		{"answered", nil, passed},
		{"NOT_FOUND", status.Error(codes.NotFound, "Session not found"), passed},
		{"UNIMPLEMENTED", status.Error(codes.Unimplemented, "unknown service"), passed},
		{"PERMISSION_DENIED", status.Error(codes.PermissionDenied, "x"), passed},
		{"server's UNAVAILABLE", status.Error(codes.Unavailable, "region down"), failed},
		{"stream reset", status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"), failed},
		{"no answer in time", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), failed},
		{"RST_STREAM CANCEL", status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL"), noVerdict},
		{"context cancelled", status.Error(codes.Canceled, "context canceled"), noVerdict},
		{"plain context.Canceled", context.Canceled, noVerdict},
		{"connection reset", status.Error(codes.Unavailable, `connection error: desc = "error reading from server: read: connection reset by peer"`), noVerdict},
		{"transport closing", status.Error(codes.Unavailable, "transport is closing"), noVerdict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := probeVerdict(tc.err)
			if verdictOf(got) != tc.want {
				t.Fatalf("probeVerdict(%v) = %v, want probeOutcome %d", tc.err, got, tc.want)
			}
			if tc.err != nil && got != nil && !errors.Is(got, tc.err) {
				t.Fatalf("probeVerdict(%v) = %v, which does not wrap the probe's error", tc.err, got)
			}
		})
	}
}

// A standby whose probes are all answered CANCELED (a frontend resetting them with
// RST_STREAM CANCEL) is never ejected: the detector, on a fake clock, gets probeVerdict's
// result for every probe.
func TestCanceledProbeEjectsNothing(t *testing.T) {
	fc := clock.NewFake(time.Time{})
	canceled := status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL")
	var d *health.Detector
	probes := 0
	d = health.New(health.Options{
		Config: health.Defaults, Clock: fc,
		Probe: func(seq uint64, _ health.Class) {
			probes++
			// Probe is called with no lock held: the probe can end at once.
			d.ProbeDone(seq, probeVerdict(canceled), time.Millisecond)
		},
	})
	defer d.Close()
	for i := range 10 {
		fc.Advance(health.Defaults.ProbeInterval)
		if d.Ejected() {
			t.Fatalf("after %d CANCELED probes: ejected: %+v", i+1, d.Status())
		}
	}
	if probes < 10 {
		t.Fatalf("%d probes in 10 ProbeIntervals, want 10", probes)
	}
}
