package spannerme

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A stream the budget refuses when its delay passes asks again after 1.25, 1.5 and 1.75
// delays, each time needing one saved-up hedge less: with 1.5 hedges saved up, E1 holding the query, the
// fourth ask is granted and the hedge wins; with none, the stream is refused once (counted
// after its fourth ask) and waits for its first stream; with none at the first ask and 1.5
// saved up after it (the stream queued again), a later ask is granted.
func TestHedgeRefusedAsksAgain(t *testing.T) {
	tests := []struct {
		name        string
		savedMilli  int64
		wantWon     bool
		wantRefused int64
		refill      bool // store 1.5 hedges once the first ask was refused
	}{
		{"the last ask is granted", 1500, true, 0, false},
		{"every ask refused", 0, false, 1, false},
		{"refilled after the first ask", 0, true, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A budget of 0.001 earns a thousandth of a hedge per call: the saved-up hedges
			// are what the test stores.
			r := newRawHedgeRig(t, &HedgingSettings{Delay: 400 * time.Millisecond, Budget: 0.001})
			r.gme.hedger.Group("default").SetSaved(tt.savedMilli)
			r.slowQueries.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if tt.wantWon {
				done := make(chan error, 1)
				go func() { _, _, err := r.query(ctx, countSQL, singleUse); done <- err }()
				if tt.refill {
					refillAfterFirstAsk(t, r.gme, 1500)
				}
				if err := <-done; err != nil {
					t.Fatalf("query: %v", err)
				}
			} else {
				qctx, qcancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { _, _, err := r.query(qctx, countSQL, singleUse); done <- err }()
				eventually(t, 20*time.Second, "the stream refused", func() bool { return r.hedging(t).Refused == 1 })
				qcancel()
				if err := <-done; status.Code(err) != codes.Canceled {
					t.Fatalf("query: %v, want CANCELED (the caller's)", err)
				}
			}
			h := r.hedging(t)
			if won := h.Won == 1 && h.Sent == 1; won != tt.wantWon || h.Refused != tt.wantRefused {
				t.Errorf("hedging %+v; want won %v, %d refused", h, tt.wantWon, tt.wantRefused)
			}
		})
	}
}

// refillAfterFirstAsk stores milli thousandths of saved-up hedges once the one stream queued
// in gme's hedge scheduler was queued again (its fire time moved: its first ask was refused).
func refillAfterFirstAsk(t *testing.T, gme *GCPMultiEndpoint, milli int64) {
	t.Helper()
	var first int64
	eventually(t, 20*time.Second, "the stream queued again after its first ask", func() bool {
		due := gme.hedger.QueuedDue()
		if len(due) != 1 {
			return false
		}
		if first == 0 {
			first = due[0]
		}
		return due[0] != first
	})
	gme.hedger.Group("default").SetSaved(milli)
}
