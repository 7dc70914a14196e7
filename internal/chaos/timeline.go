package chaos

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// timeline prints, every interval, the calls that succeeded and failed, the kilobytes each
// endpoint carried from the backend, each group's current endpoint, the faults in force,
// goroutines and heap; the executor's step lines come in between.
type timeline struct {
	quit, done chan struct{}
}

func startTimeline(out io.Writer, every time.Duration, start time.Time, topo *topology, gme *spannerme.GCPMultiEndpoint, l *load, x *executor) *timeline {
	t := &timeline{quit: make(chan struct{}), done: make(chan struct{})}
	fmt.Fprintf(out, "\n%8s %7s %6s %8s %8s %8s  %-22s %-10s %-8s faults in force\n",
		"time", "ok", "failed", "e1 KB", "e2 KB", "e3 KB", "current endpoint", "goroutines", "heap MiB")
	go func() {
		defer close(t.done)
		var last [NumEndpoints]int64
		for i := range last {
			last[i] = topo.eps[i].tcp.Stats().BytesFromBackend
		}
		lastOK, lastFailed := l.totals()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-t.quit:
				return
			case <-tick.C:
			}
			var b strings.Builder
			ok, failed := l.totals()
			fmt.Fprintf(&b, "%7.0fs %7d %6d", time.Since(start).Seconds(), ok-lastOK, failed-lastFailed)
			lastOK, lastFailed = ok, failed
			for i := range last {
				cur := topo.eps[i].tcp.Stats().BytesFromBackend
				fmt.Fprintf(&b, " %8d", (cur-last[i])>>10)
				last[i] = cur
			}
			var cur []string
			for _, g := range gme.Status().Groups {
				cur = append(cur, g.Name+"->"+topo.name(g.Current))
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			st := x.state()
			fmt.Fprintf(&b, "  %-22s %-10d %-8.0f %s", strings.Join(cur, " "), runtime.NumGoroutine(), mib(m.HeapAlloc), st.faults())
			fmt.Fprintln(out, b.String())
		}
	}()
	return t
}

func (t *timeline) stop() { close(t.quit); <-t.done }
