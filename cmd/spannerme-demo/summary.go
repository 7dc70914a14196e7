package main

import (
	"fmt"
	"io"
	"time"
)

// summary is what the demo measured.
type summary struct {
	backend                         string
	failover, switchBack            time.Duration
	recoveryTimeout, switchingDelay time.Duration
	reconnectMax                    time.Duration // Settings.ReconnectMaxDelay (-reconnect-max-delay)
	routedServedByWest              bool
	routedErr                       error
	reconfigured                    bool
	load                            loadTotals
	writesFound                     int64
	verifyErr, storyErr             error
}

// ok reports whether the demo showed what it promises: the whole story, no failed
// application call, every acknowledged write present exactly once.
func (s *summary) ok() bool {
	return s.storyErr == nil && s.load.failed() == 0 && s.verifyErr == nil && s.routedServedByWest && s.reconfigured
}

// The defaults the demo's settings are compared with: spannerme's ReconnectMaxDelay when zero,
// and the RecoveryTimeout and SwitchingDelay that docs/production.md recommends (upstream's
// zero values mean "at once", which no deployment should use).
const (
	defaultReconnectMax    = 5 * time.Second
	recommendedRecovery    = 2 * time.Second
	recommendedSwitchDelay = 30 * time.Second
)

// printNonDefaults says which of the demo's settings differ from the defaults (they make the
// story quick) and what the defaults would give.
func (s *summary) printNonDefaults(out io.Writer) {
	var lines []string
	if s.reconnectMax > 0 && s.reconnectMax != defaultReconnectMax {
		lines = append(lines, fmt.Sprintf("ReconnectMaxDelay %v (-reconnect-max-delay; default %v: a recovered endpoint is noticed up to %v later, so the quick switch-back would take up to %v longer)",
			s.reconnectMax, defaultReconnectMax, defaultReconnectMax, (defaultReconnectMax-s.reconnectMax).Round(time.Millisecond)))
	}
	if s.switchingDelay != recommendedSwitchDelay {
		lines = append(lines, fmt.Sprintf("SwitchingDelay %v (recommended %v, docs/production.md: the switch-back would come about %v after the endpoint is up)",
			s.switchingDelay, recommendedSwitchDelay, recommendedSwitchDelay))
	}
	if s.recoveryTimeout != recommendedRecovery {
		lines = append(lines, fmt.Sprintf("RecoveryTimeout %v (recommended %v: the failover would come about %v after the fault)",
			s.recoveryTimeout, recommendedRecovery, recommendedRecovery))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(out, "  differs from the defaults, to keep the story short:")
	for _, l := range lines {
		fmt.Fprintln(out, "    "+l)
	}
}

func (s *summary) print(out io.Writer) {
	fmt.Fprintf(out, "\nSummary (%s)\n", s.backend)
	fmt.Fprintf(out, "  failover time:      %v (RecoveryTimeout %v)\n", s.failover.Round(time.Millisecond), s.recoveryTimeout)
	fmt.Fprintf(out, "  switch-back time:   %v (SwitchingDelay %v, plus reconnecting)\n", s.switchBack.Round(time.Millisecond), s.switchingDelay)
	fmt.Fprintf(out, "  routed to west:     served by psc-west2: %v\n", s.routedServedByWest)
	fmt.Fprintf(out, "  reconfigured:       %v\n", s.reconfigured)
	fmt.Fprintf(out, "  total ops:          %d (reads %d, routed reads %d, read-write transactions %d)\n",
		s.load.ops(), s.load.readsOK+s.load.readsFailed, s.load.routedOK+s.load.routedFailed, s.load.writesOK+s.load.writesFailed)
	fmt.Fprintf(out, "  failed ops:         %d\n", s.load.failed())
	if s.load.firstErr != nil {
		fmt.Fprintf(out, "  first failure:      %v\n", s.load.firstErr)
	}
	if s.verifyErr != nil {
		fmt.Fprintf(out, "  writes:             MISMATCH: %v\n", s.verifyErr)
	} else {
		fmt.Fprintf(out, "  writes:             %d acknowledged, each present exactly once", s.writesFound)
		if s.load.ambiguous > 0 {
			fmt.Fprintf(out, " (%d of them after a commit cut off by the fault, found by its order ID)", s.load.ambiguous)
		}
		fmt.Fprintln(out)
	}
	if s.storyErr != nil {
		fmt.Fprintf(out, "  story:              FAILED: %v\n", s.storyErr)
	}
	s.printNonDefaults(out)
	if s.ok() {
		fmt.Fprintln(out, "  result:             OK")
	} else {
		fmt.Fprintln(out, "  result:             FAILED")
	}
}
