package statuspage

import (
	"fmt"
	"strings"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// summary says in one line whether all is well (each name in it cut as a page cell is), or what is wrong and where, most serious
// first: the GCPMultiEndpoint closed; groups with no available endpoint; groups off their
// first endpoint; endpoints not available to a group that uses them as a standby; a
// rejected configuration edit. ok is true when there is nothing to say.
func summary(st spannerme.Status, names map[string]string, rejected bool) (text string, ok bool) {
	if st.Closed {
		return "Closed: this client serves nothing.", false
	}
	var down, off, standby []string
	for _, g := range st.Groups {
		available, current := 0, -1
		var notAvailable []string
		for _, e := range g.Endpoints {
			if e.State == spannerme.Available {
				available++
			} else {
				notAvailable = append(notAvailable, cutText(labelOf(names, e.Endpoint)))
			}
			if e.Endpoint == g.Current {
				current = e.Priority
			}
		}
		switch {
		case available == 0:
			down = append(down, fmt.Sprintf("group %s has no available endpoint", cutText(g.Name)))
		case current != 0:
			off = append(off, fmt.Sprintf("group %s is on %s (priority %d), not its first endpoint", cutText(g.Name), cutText(labelOf(names, g.Current)), current))
		case len(notAvailable) > 0:
			standby = append(standby, fmt.Sprintf("group %s: standby %s not available", cutText(g.Name), strings.Join(notAvailable, ", ")))
		}
	}
	problems := append(append(down, off...), standby...)
	if rejected {
		problems = append(problems, "the last configuration edit was rejected (below)")
	}
	if len(problems) == 0 {
		return fmt.Sprintf("All well: %s on its first endpoint, every endpoint available.", groupsWord(len(st.Groups))), true
	}
	return strings.Join(problems, "; ") + ".", false
}

// groupsWord is "the group" or "every group".
func groupsWord(n int) string {
	if n == 1 {
		return "the group"
	}
	return "every group"
}

// rejectedEdit says that the last reload of the configuration file failed after the
// configuration in force was applied, and when; "" when it did not.
func rejectedEdit(st spannerme.Status) string {
	c := st.Config
	if c == nil || c.LastError == nil || c.LastErrorAt.Before(c.AppliedAt) {
		return ""
	}
	return fmt.Sprintf("Configuration edit rejected at %s (%s ago): %v. The configuration in force (hash %.12s, applied at %s) stays.",
		c.LastErrorAt.Format("15:04:05"), ago(st.At, c.LastErrorAt), bounded.Text(c.LastError.Error(), maxCellText), c.Hash, c.AppliedAt.Format("15:04:05"))
}

// latencyText writes a latency with the unit that fits: µs under a millisecond, ms with
// two significant decimals under 10ms, whole ms under a second, else seconds.
func latencyText(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds())
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// lastErrorText writes a pool's last connection error, with its age, and whether it is past:
// the pool connected after it (a READY pool whose state changed since the error).
func lastErrorText(now time.Time, p spannerme.PoolStatus) (text string, past bool) {
	e := p.LastError
	if e == nil {
		return "", false
	}
	past = p.Connectivity == "READY" && !e.At.After(p.Since)
	if past {
		return fmt.Sprintf("past: %s %s ago, before it connected %s ago: %s", e.Kind, ago(now, e.At), ago(now, p.Since), e.Message), true
	}
	return fmt.Sprintf("%s %s ago: %s", e.Kind, ago(now, e.At), e.Message), false
}

// connectivityNote explains a pool whose connectivity and health seem to disagree: health
// judges only the answers of calls that reached the endpoint, connectivity only its
// connections. "" when they agree.
func connectivityNote(p spannerme.PoolStatus) string {
	switch {
	case p.Retired || p.Health.Disabled:
		return ""
	case p.Connectivity != "READY" && p.Connectivity != "" && p.Connectivity != "SHUTDOWN" && !p.Health.Ejected:
		return "not connected, though healthy: health judges only the answers of calls that reached the endpoint; with no connection none do, so the endpoint is not available until it connects"
	case p.Connectivity == "READY" && p.Health.Ejected:
		return "connected, though ejected: its connections are up, but the calls through them failed or stalled (the service behind the endpoint), so it is not available until a probe passes"
	}
	return ""
}
