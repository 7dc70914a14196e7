package spannerme

import (
	"math"
	"sort"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
)

// HedgingSettings turns on hedged read-only streaming calls in one group (Settings.Hedging):
// a streaming query or read that may be hedged (docs/configuration.md, "Hedged reads", lists
// which requests may) and has no response message after the hedge delay is sent once more,
// unchanged, to another available endpoint of the group; the first of the two streams to
// deliver a message, or to end with a status the Spanner client does not retry, is the one
// the caller reads, and the other is cancelled. The zero value hedges after the group's
// recent p95 time to first response, at least 20ms, within a budget of 5% of the hedgeable
// calls.
type HedgingSettings struct {
	// Delay is how long a hedgeable stream waits for its first response message before it
	// is hedged. Zero means adaptive: the group's p95 time to first response message of the
	// method (ExecuteStreamingSql or StreamingRead) over the last 10 to 20 seconds of its
	// hedgeable calls, never below MinDelay; until 100 such calls have been measured, none is
	// hedged. Negative is a *ConfigError.
	Delay time.Duration
	// MinDelay is the floor of the adaptive delay. Zero means 20ms; negative is a
	// *ConfigError. Ignored with a fixed Delay.
	MinDelay time.Duration
	// Budget is the largest fraction of the group's hedgeable calls that are hedged, over
	// time: each hedgeable call earns Budget of a hedge, a hedge spends one, and at most 10
	// hedges are saved up (gRFC A6's retry throttling, in the opposite direction). When the
	// delay passes, a stream's hedge is sent only while at least 4 hedges are saved up; one
	// that still has no response asks again after 1.25, 1.5 and 1.75 times the delay, needing
	// 3, 2, then 1 saved up, so that a scarce budget goes to the streams that have waited
	// longest. A stream refused at its fourth ask is not hedged (Status counts it as refused).
	// Zero means 0.05; outside [0, 1] (or NaN) is a *ConfigError.
	Budget float64
}

// hedgeSettings is the validated Settings.Hedging with defaults; nil when no group hedges.
type hedgeSettings map[string]hedge.Settings

// parseHedging validates h and returns it with defaults (nil when empty). Entries of groups
// not configured (yet) are allowed. Errors: a *ConfigError naming the group, for the first
// invalid entry by group name.
func parseHedging(h map[string]HedgingSettings) (hedgeSettings, error) {
	if len(h) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(hedgeSettings, len(h))
	for _, name := range names {
		s := h[name]
		switch {
		case s.Delay < 0:
			return nil, configErr(name, "", -1, "Settings.Hedging: Delay %v is negative", s.Delay)
		case s.MinDelay < 0:
			return nil, configErr(name, "", -1, "Settings.Hedging: MinDelay %v is negative", s.MinDelay)
		case math.IsNaN(s.Budget) || s.Budget < 0 || s.Budget > 1:
			return nil, configErr(name, "", -1, "Settings.Hedging: Budget %v is outside [0, 1]", s.Budget)
		}
		if s.MinDelay == 0 {
			s.MinDelay = hedge.DefaultMinDelay
		}
		if s.Budget == 0 {
			s.Budget = hedge.DefaultBudget
		}
		out[name] = hedge.Settings{Delay: s.Delay, MinDelay: s.MinDelay, Budget: s.Budget}
	}
	return out, nil
}
