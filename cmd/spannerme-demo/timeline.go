package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// timeline prints, every second, how many kilobytes each fake endpoint carried from the
// backend, the operations that succeeded and failed, and each group's current endpoint;
// story lines (say) come in between.
type timeline struct {
	out    io.Writer // a lockedWriter: each line is one Write
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

func startTimeline(ctx context.Context, out io.Writer, gme *spannerme.GCPMultiEndpoint, eps map[string]*spannermetest.Endpoint,
	names []string, nameOf map[string]string, ld *load) *timeline {
	ctx, cancel := context.WithCancel(ctx)
	t := &timeline{out: out, start: time.Now(), cancel: cancel, done: make(chan struct{})}
	var head strings.Builder
	fmt.Fprintf(&head, "\n%6s", "time")
	for _, n := range names {
		fmt.Fprintf(&head, " %18s", strings.TrimSuffix(n, ":443")+" KB")
	}
	fmt.Fprintf(&head, " %7s %6s  current endpoint per MultiEndpoint", "ops ok", "failed")
	t.line(head.String())
	go func() {
		defer close(t.done)
		last := map[string]int64{}
		for _, n := range names {
			last[n] = eps[n].Stats().BytesFromBackend
		}
		lastTotals := ld.totals()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%5.0fs", time.Since(t.start).Seconds())
			for _, n := range names {
				cur := eps[n].Stats().BytesFromBackend
				fmt.Fprintf(&b, " %18.1f", float64(cur-last[n])/1024)
				last[n] = cur
			}
			tot := ld.totals()
			ok := tot.ops() - tot.failed() - (lastTotals.ops() - lastTotals.failed())
			fmt.Fprintf(&b, " %7d %6d ", ok, tot.failed()-lastTotals.failed())
			lastTotals = tot
			for _, g := range gme.Status().Groups {
				fmt.Fprintf(&b, " %s=%s", g.Name, nameOf[g.Current])
			}
			t.line(b.String())
		}
	}()
	return t
}

func (t *timeline) line(s string) { fmt.Fprintln(t.out, s) }

// say prints a story line.
func (t *timeline) say(s string) {
	t.line(fmt.Sprintf("%5.1fs ** %s", time.Since(t.start).Seconds(), s))
}

func (t *timeline) stop() { t.cancel(); <-t.done }
