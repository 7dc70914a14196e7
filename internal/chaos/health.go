package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
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

	mu        sync.Mutex // guards start, counts, ejections and events
	start     time.Time
	counts    map[string]int
	ejections []ejection
	events    []healthEvent
}

// healthEvent is one ejection or readmission, for the invariants of the long commit failure.
type healthEvent struct {
	endpoint string // e1, e2, e3
	ejected  bool   // false: readmitted
	class    string // the class of calls that ejected it ("writes", ...)
	at       time.Time
	until    time.Time // an ejection's end of its ejection time (HealthEvent.Until)
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
	h.events = append(h.events, healthEvent{endpoint: h.name(ev.Endpoint), ejected: ev.Kind == spannerme.EndpointEjected, class: ev.Class, at: ev.At, until: ev.Until})
	h.mu.Unlock()
	line := fmt.Sprintf("%7.1fs >> %s %s", ev.At.Sub(start).Seconds(), h.name(ev.Endpoint), what)
	if ev.Kind == spannerme.EndpointEjected {
		detail := ev.Detail
		if len(detail) > 240 {
			detail = detail[:240] + "..."
		}
		line += fmt.Sprintf(" until +%v: %s", ev.Until.Sub(ev.At).Round(time.Millisecond), detail)
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
		if !tl.faultOn(ev.endpoint, ev.at.Add(-justifyLookback), ev.at, Fault.active) {
			out = append(out, fmt.Sprintf("%7.1fs %s ejected with no fault in force on it in the %v before: %s",
				ev.at.Sub(tl.start).Seconds(), ev.endpoint, justifyLookback, ev.why))
		}
	}
	return out, len(evs)
}

// degradeLookback is how long after a slow fault ended a degradation may still be its doing:
// the rule needs Window of slow samples, and the median of three probes stays slow for up to
// two probes after the heal; 5s of slack covers those and a loaded machine.
const degradeLookback = brownoutWindow + 5*time.Second

// degradation is one time an endpoint became degraded (brownout) in a group.
type degradation struct {
	group, endpoint string // endpoint: e1, e2, e3
	at              time.Time
	why             string // latency against the fallback's
}

// brownoutLog watches the client's Status for endpoints degraded by brownout detection
// (EndpointStatus.Brownout), prints each change (">>" lines, like healthLog) and keeps the
// degradations. There is no brownout hook: Status is polled every brownoutPoll, and
// BrownoutStatus.Since dates each change (the rule's Window is seconds, far longer than a
// poll, so no change is missed).
type brownoutLog struct {
	out   io.Writer
	name  func(addr string) string
	start time.Time
	gme   *spannerme.GCPMultiEndpoint

	quit, done chan struct{}

	mu           sync.Mutex // guards degradations, recoveries and degraded
	degradations []degradation
	recoveries   int
	degraded     map[[2]string]bool // group, endpoint address: degraded at the last poll
}

const brownoutPoll = 200 * time.Millisecond

func startBrownoutLog(out io.Writer, start time.Time, topo *topology, gme *spannerme.GCPMultiEndpoint) *brownoutLog {
	b := &brownoutLog{out: out, name: topo.name, start: start, gme: gme, quit: make(chan struct{}), done: make(chan struct{}),
		degraded: map[[2]string]bool{}}
	go func() {
		defer close(b.done)
		tick := time.NewTicker(brownoutPoll)
		defer tick.Stop()
		for {
			b.poll()
			select {
			case <-b.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return b
}

// stop polls a last time and stops.
func (b *brownoutLog) stop() {
	close(b.quit)
	<-b.done
}

func (b *brownoutLog) poll() {
	for _, g := range b.gme.Status().Groups {
		for _, e := range g.Endpoints {
			if e.Brownout == nil {
				continue
			}
			key := [2]string{g.Name, e.Endpoint}
			b.mu.Lock()
			was := b.degraded[key]
			b.degraded[key] = e.Brownout.Degraded
			var line string
			switch {
			case e.Brownout.Degraded && !was:
				why := fmt.Sprintf("%v against %s's %v", e.Brownout.Latency.Round(time.Millisecond), b.name(e.Brownout.Fallback), e.Brownout.FallbackLatency.Round(time.Millisecond))
				b.degradations = append(b.degradations, degradation{group: g.Name, endpoint: b.name(e.Endpoint), at: e.Brownout.Since, why: why})
				line = fmt.Sprintf("%7.1fs >> %s degraded in %s (brownout: %s)", e.Brownout.Since.Sub(b.start).Seconds(), b.name(e.Endpoint), g.Name, why)
			case !e.Brownout.Degraded && was:
				b.recoveries++
				line = fmt.Sprintf("%7.1fs >> %s no longer degraded in %s", recoveredAt(e.Brownout.Since, time.Now()).Sub(b.start).Seconds(), b.name(e.Endpoint), g.Name)
				if e.Brownout.Since.IsZero() {
					line += " (its brownout state was reset: the endpoint or its group was reconfigured)"
				}
			}
			b.mu.Unlock()
			if line != "" {
				fmt.Fprintln(b.out, line)
			}
		}
	}
}

// recoveredAt is when an endpoint seen degraded was found no longer degraded: since, when its
// degraded state last changed, or now, the poll that saw it, when since is zero (the state was
// reset by a reconfiguration, which has no time of its own in Status).
func recoveredAt(since, now time.Time) time.Time {
	if since.IsZero() {
		return now
	}
	return since
}

// unjustified returns a line for each degradation of an endpoint on which no slow fault (a
// brownout, a frontend latency, a slow TCP path) was in force within degradeLookback before
// it.
func (b *brownoutLog) unjustified(tl *faultTimeline) (out []string) {
	b.mu.Lock()
	ds := append([]degradation(nil), b.degradations...)
	b.mu.Unlock()
	for _, d := range ds {
		if !tl.faultOn(d.endpoint, d.at.Add(-degradeLookback), d.at, Fault.slow) {
			out = append(out, fmt.Sprintf("%7.1fs %s degraded in %s with no brownout or latency fault on it in the %v before: %s",
				d.at.Sub(tl.start).Seconds(), d.endpoint, d.group, degradeLookback, d.why))
		}
	}
	return out
}

// summary is "2 degradations (e1 in default 1, e1 in west 1), 2 ended", or "none".
func (b *brownoutLog) summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.degradations) == 0 {
		return "no degradation"
	}
	counts := map[string]int{}
	for _, d := range b.degradations {
		counts[d.endpoint+" in "+d.group]++
	}
	var parts []string
	for k, n := range counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	noun := "degradations"
	if len(b.degradations) == 1 {
		noun = "degradation"
	}
	return fmt.Sprintf("%d %s (%s), %d ended", len(b.degradations), noun, strings.Join(parts, ", "), b.recoveries)
}

// instantOn reports whether an instant fault (reset, fe-restart, fe-partial-reset: it leaves
// nothing in force) hit endpoint from from to to.
func (tl *faultTimeline) instantOn(endpoint string, from, to time.Time) bool {
	for _, a := range tl.steps {
		if a.at.Before(from) || a.at.After(to) || a.step.Endpoint < 0 || !kinds[a.step.Kind].instant {
			continue
		}
		if endpointName(a.step.Endpoint) == endpoint {
			return true
		}
	}
	return false
}

// faultOn reports whether a fault for which is holds was in force, on either layer, on the
// endpoint named endpoint at some time from from to to; true for a name outside the topology
// (nothing to hold an event on it against).
func (tl *faultTimeline) faultOn(endpoint string, from, to time.Time, is func(Fault) bool) bool {
	e := -1
	for i := range NumEndpoints {
		if endpointName(i) == endpoint {
			e = i
		}
	}
	if e < 0 {
		return true
	}
	for _, s := range tl.during(from, to) {
		if is(s.TCP[e]) || is(s.Frontend[e]) {
			return true
		}
	}
	return false
}
