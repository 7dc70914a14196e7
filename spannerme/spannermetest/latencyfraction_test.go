package spannermetest

import (
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// TestFrontendLatencyFraction: SetLatencyFraction delays the calls its seeded draw picks
// (lower bounds only: a loaded machine may make any call slow, never one fast), rejects a
// fraction outside [0, 1], is kept across a mode change, and turns off with 0.
func TestFrontendLatencyFraction(t *testing.T) {
	b := startTestBackend(t)
	const seed = 7
	f := NewFrontendTB(t, b.addr, WithSeed(seed))
	tc := testClient(t, f.Addr())
	if err := unary(tc, "warm"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float64{-0.1, 1.5} {
		if err := f.SetLatencyFraction(bad, time.Second); err == nil {
			t.Errorf("SetLatencyFraction(%v) = nil, want an error", bad)
		}
	}
	const (
		latency  = 200 * time.Millisecond
		fraction = 0.5
		calls    = 16
	)
	if err := f.SetLatencyFraction(fraction, latency); err != nil {
		t.Fatal(err)
	}
	// The draw is the frontend's seeded source: replay it.
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range calls {
		want := rng.Float64() < fraction
		start := time.Now()
		if err := unary(tc, "x"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); want && d < latency {
			t.Errorf("call %d took %v, want >= %v (drawn slow)", i, d, latency)
		}
	}
	// Kept across a mode change; fraction 1 delays every call.
	if err := f.SetLatencyFraction(1, latency); err != nil {
		t.Fatal(err)
	}
	if err := f.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wantCode(t, "failed call", unary(tc, "x"), codes.Unavailable)
	if d := time.Since(start); d < latency {
		t.Errorf("failed call took %v, want >= %v", d, latency)
	}
	f.Pass()
	if err := f.SetLatencyFraction(0, latency); err != nil {
		t.Fatal(err)
	}
	if f.slow.Load() != nil {
		t.Error("SetLatencyFraction(0, d) left the slow calls on")
	}
}
