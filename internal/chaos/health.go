package chaos

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// HealthDetectionDefault says whether the client in this build ejects endpoints from call
// outcomes (issue 8): then failed calls under silent faults are bounded, not only counted.
const HealthDetectionDefault = true

// healthSettings are the client's outcome-based health settings during a run: the defaults,
// with ejection times, the counting interval and the standby probe interval compressed as
// the schedule is (faults hold 300ms to 5s; the defaults are 30s to 300s of ejection and 10s
// intervals, made for faults that last minutes). The probe timeout stays at its default,
// 2s, which silentDetection counts on.
var healthSettings = spannerme.HealthSettings{
	Interval:         2 * time.Second,
	BaseEjectionTime: 2 * time.Second,
	MaxEjectionTime:  20 * time.Second,
	ProbeInterval:    time.Second,
	// Brownout detection keeps its defaults (Ratio 4, Margin 200ms, latency probes every 2s);
	// the Window is spelled out because the plan's brownouts are drawn from it.
	Brownout: spannerme.BrownoutSettings{Window: brownoutWindow},
}

// brownoutWindow is the client's BrownoutSettings.Window during a run (its default): how long
// an endpoint must be far slower than its fallback before it is degraded.
const brownoutWindow = 10 * time.Second

// healthProbeTimeout is the probe timeout in force (HealthSettings.ProbeTimeout's default).
const healthProbeTimeout = 2 * time.Second

// healthLog prints every ejection and readmission and counts them.
type healthLog struct {
	out  io.Writer
	name func(addr string) string

	mu        sync.Mutex // guards start, counts and ejections
	start     time.Time
	counts    map[string]int
	ejections []ejection
}

// ejection is one ejection of an endpoint, for the justified-ejection invariant.
type ejection struct {
	endpoint string // e1, e2, e3
	at       time.Time
	why      string // reason and detail
}

func (h *healthLog) add(ev spannerme.HealthEvent) {
	what := "readmitted"
	if ev.Kind == spannerme.EndpointEjected {
		what = "ejected (" + ev.Reason.String() + ")"
	}
	h.mu.Lock()
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.counts[what]++
	start := h.start
	if ev.Kind == spannerme.EndpointEjected {
		h.ejections = append(h.ejections, ejection{endpoint: h.name(ev.Endpoint), at: ev.At, why: ev.Reason.String() + ": " + ev.Detail})
	}
	h.mu.Unlock()
	line := fmt.Sprintf("%7.1fs >> %s %s", ev.At.Sub(start).Seconds(), h.name(ev.Endpoint), what)
	if ev.Kind == spannerme.EndpointEjected {
		line += fmt.Sprintf(" until +%v", ev.Until.Sub(ev.At).Round(time.Millisecond))
	}
	fmt.Fprintln(h.out, line)
}

// summary is "ejected (timeouts) 3, readmitted 3", or "none".
func (h *healthLog) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for k, n := range h.counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return joinOr(parts, "none")
}

// justifyLookback is how long after a fault ended an ejection may still be its doing: a
// counting interval that ends (Interval) or a suspicion probe that times out (ProbeTimeout)
// after the heal, and a second of slack.
const justifyLookback = 2*time.Second + healthProbeTimeout + time.Second

// unjustified returns a line for each ejection of an endpoint on which no fault was in force
// within justifyLookback before it. Instant connection events (reset, fe-restart,
// fe-partial-reset) and the GOAWAY storm are no such fault: they are connectivity's, and must
// never eject (F24, F27).
func (h *healthLog) unjustified(tl *faultTimeline) (out []string, n int) {
	h.mu.Lock()
	evs := append([]ejection(nil), h.ejections...)
	h.mu.Unlock()
	for _, ev := range evs {
		e := -1
		for i := range NumEndpoints {
			if endpointName(i) == ev.endpoint {
				e = i
			}
		}
		justified := e < 0 // an endpoint outside the topology: nothing to hold it against
		for _, s := range tl.during(ev.at.Add(-justifyLookback), ev.at) {
			if e >= 0 && (s.TCP[e].active() || s.Frontend[e].active()) {
				justified = true
			}
		}
		if !justified {
			out = append(out, fmt.Sprintf("%7.1fs %s ejected with no fault in force on it in the %v before: %s",
				ev.at.Sub(tl.start).Seconds(), ev.endpoint, justifyLookback, ev.why))
		}
	}
	return out, len(evs)
}
