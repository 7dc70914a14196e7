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
	if s.ok() {
		fmt.Fprintln(out, "  result:             OK")
	} else {
		fmt.Fprintln(out, "  result:             FAILED")
	}
}
