package spannerme

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/ordered"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// observer turns what a GCPMultiEndpoint sees into log lines (one per transition of an
// endpoint, never one per call), metrics and the history of switches. It is fed by:
//
//   - each pool, through its poolEvents (poolevents.go): connection attempts that fail while
//     the endpoint is down, the endpoint up and down, ejections and readmissions, the end of
//     calls;
//   - the groups (switched): a group's current endpoint changed;
//   - the call path (callBegin, callEnd).
//
// Its methods are safe for concurrent use, take no lock across a user callback (log lines
// go through a queue delivered on a goroutine of the observer's own) and never block.
type observer struct {
	clock   clock.Clock
	started time.Time
	logs    *ordered.Async[slog.Record]
	metrics *metrics
	history *switchHistory
}

func newObserver(log *slog.Logger, clk clock.Clock, m *metrics) *observer {
	h := log.Handler()
	logs := ordered.NewAsync(func(r slog.Record) {
		if ctx := context.Background(); h.Enabled(ctx, r.Level) {
			_ = h.Handle(ctx, r)
		}
	})
	return &observer{clock: clk, started: clk.Now(), logs: logs, metrics: m, history: newSwitchHistory()}
}

func (o *observer) now() time.Time { return o.clock.Now() }

// log queues a log line; it keeps the time of the event, not of its delivery.
func (o *observer) log(level slog.Level, at time.Time, msg string, args ...any) {
	r := slog.NewRecord(at, level, msg, 0)
	r.Add(args...)
	o.logs.Push(r)
}

// close delivers the log lines queued so far, stops the metrics' callbacks, and returns once
// the log goroutine has ended. Later events are dropped. Idempotent.
func (o *observer) close() {
	o.metrics.close()
	o.logs.Drain()
}

// unreachable logs a connection error of endpoint while it is not available (the pool
// reports each kind once until the endpoint is available again). A channel of an available
// pool that fails is no transition of the endpoint: its error shows in Status only.
func (o *observer) unreachable(endpoint, name string, e pool.ConnError, how pool.Unreachability) {
	msg := "spannerme: endpoint unreachable: connection attempt failed"
	switch how {
	case pool.NeverConnected:
		msg = "spannerme: endpoint unreachable: it has never connected"
	case pool.FirstAttemptFailed:
		msg = "spannerme: endpoint unreachable: its first connection attempt failed"
	}
	o.log(slog.LevelWarn, e.At, msg, endpointArgs(endpoint, name, "kind", string(e.Kind), "error", e.Message)...)
}

// endpointArgs returns the log attributes naming an endpoint, "endpoint" and, when it has a
// name (EndpointOptions.Name), "endpoint_name", followed by more.
func endpointArgs(endpoint, name string, more ...any) []any {
	args := make([]any, 0, 4+len(more))
	args = append(args, "endpoint", endpoint)
	if name != "" {
		args = append(args, "endpoint_name", name)
	}
	return append(args, more...)
}

// up logs that endpoint became available, after downFor (negative: it had never been up).
func (o *observer) up(endpoint, name string, at time.Time, downFor time.Duration) {
	args := endpointArgs(endpoint, name)
	if downFor >= 0 {
		args = append(args, "down_for", downFor.Round(time.Millisecond))
	}
	o.log(slog.LevelInfo, at, "spannerme: endpoint up: connected", args...)
}

// down logs that endpoint lost its last ready connection, with the error that explains it.
func (o *observer) down(endpoint, name string, at time.Time, reason pool.ConnError) {
	o.log(slog.LevelWarn, at, "spannerme: endpoint down: no ready connection",
		endpointArgs(endpoint, name, "kind", string(reason.Kind), "error", reason.Message)...)
}

// switched records a change of a group's current endpoint, whose new current endpoint is
// named toName ("" for none); the event queue logs it.
func (o *observer) switched(ev SwitchEvent, toName string) {
	o.history.add(ev)
	o.metrics.switched(ev, toName)
}

// ejected records that outcome-based health took endpoint out of service until the given
// time (zero: unknown), for reason (an EjectionReason's String: "consecutive failures",
// "failure percentage", "timeouts" or "probe failed"; it is a metric attribute, so the set
// stays small) of the calls of class: a log line and the ejections metric.
func (o *observer) ejected(endpoint, name, reason, class, detail string, until time.Time, ejections int) {
	now := o.now()
	args := endpointArgs(endpoint, name, "reason", reason, "class", class, "detail", detail, "ejections", ejections)
	if !until.IsZero() {
		args = append(args, "for", until.Sub(now).Round(time.Millisecond))
	}
	o.log(slog.LevelWarn, now, "spannerme: endpoint ejected: its calls fail or stall; groups count it as not available", args...)
	o.metrics.ejected(endpoint, name, reason)
}

// readmitted records that outcome-based health put endpoint back in service.
func (o *observer) readmitted(endpoint, name, ejectedFor string) {
	o.log(slog.LevelInfo, o.now(), "spannerme: endpoint readmitted: its probe passed", endpointArgs(endpoint, name, "ejected_for", ejectedFor)...)
}

// maxSwitchHistory is how many recent switches are kept per group.
const maxSwitchHistory = 32

// switchHistory keeps each group's most recent switches, for Status and the status page.
type switchHistory struct {
	mu     sync.Mutex               // guards groups
	groups map[string][]SwitchEvent // oldest first, at most maxSwitchHistory each
}

func newSwitchHistory() *switchHistory {
	return &switchHistory{groups: make(map[string][]SwitchEvent)}
}

func (h *switchHistory) add(ev SwitchEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	evs := h.groups[ev.Name]
	if len(evs) == maxSwitchHistory {
		evs = append(evs[:0], evs[1:]...)
	}
	h.groups[ev.Name] = append(evs, ev)
}

// of returns a copy of group's history, nil if it has none.
func (h *switchHistory) of(group string) []SwitchEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	evs := h.groups[group]
	if len(evs) == 0 {
		return nil
	}
	return append([]SwitchEvent(nil), evs...)
}

// retain forgets the groups that keep says are gone.
func (h *switchHistory) retain(keep func(group string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for g := range h.groups {
		if !keep(g) {
			delete(h.groups, g)
		}
	}
}

// callBegin marks a call of group sent to endpoint, named name ("" for none): the call's
// span, if it is recording, gets the group and the endpoint (and its name, if it has one) as
// attributes, and the start
// time is returned if the metrics record anything (zero otherwise: the call is not measured).
func (o *observer) callBegin(ctx context.Context, endpoint, name, group string) time.Time {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String(AttrMultiEndpoint, group))
		span.SetAttributes(endpointAttrs(endpoint, name)...)
	}
	m := o.metrics
	if m.calls.Enabled(ctx) || m.duration.Enabled(ctx) {
		return time.Now()
	}
	return time.Time{}
}

// callEnd records the end of a call that callBegin measured from start, with its error
// (nil: OK), under the attribute sets a.
func (o *observer) callEnd(ctx context.Context, a *callAttrs, start time.Time, err error) {
	code := codes.OK
	if err != nil {
		code = status.Code(err)
		if int(code) >= numCodes {
			code = codes.Unknown
		}
	}
	m := o.metrics
	m.calls.Add(ctx, 1, a.add[code]...)
	if code != codes.OK {
		m.failures.Add(ctx, 1, a.add[code]...)
	}
	m.duration.Record(ctx, time.Since(start).Seconds(), a.record[code]...)
}

// brownout logs one change of an endpoint's degraded state in a group: WARN when it becomes
// degraded, INFO when it is no longer. It queues the line and never blocks.
func (o *observer) brownout(c brownout.Change) {
	v := c.Verdict
	args := []any{"multiendpoint", c.Group, "endpoint", v.Endpoint, "latency", v.Latency.Round(time.Millisecond),
		"fallback", v.Fallback, "fallback_latency", v.FallbackLatency.Round(time.Millisecond)}
	if v.Degraded {
		o.log(slog.LevelWarn, c.At, "spannerme: endpoint degraded (brownout): far slower than its fallback", args...)
		return
	}
	o.log(slog.LevelInfo, c.At, "spannerme: endpoint no longer degraded (brownout)", args...)
}

// verdictChanged logs that endpoint's verdict in group changed from was to now, when the
// change is the group's own finding: to or from a last resort (DegradedLastResort,
// EjectedEverywhere, CoolingLastResort), which no line of the endpoint's tells. The other changes follow a line
// of the endpoint's own (up, down, ejected, readmitted, degraded), which is not repeated per
// group. WARN when the endpoint becomes a last resort, INFO when it stops being one. One line
// per group and change, never per call.
func (o *observer) verdictChanged(group, endpoint, name string, was, now verdict.Reason) {
	lastResort := func(r verdict.Reason) bool {
		return r == verdict.DegradedLastResort || r == verdict.EjectedEverywhere || r == verdict.CoolingLastResort
	}
	if !lastResort(was) && !lastResort(now) {
		return
	}
	level, msg := slog.LevelInfo, "spannerme: endpoint no longer a last resort"
	if lastResort(now) {
		level, msg = slog.LevelWarn, "spannerme: endpoint used as a last resort: no endpoint of the group is usable"
	}
	o.log(level, o.now(), msg,
		append([]any{"multiendpoint", group}, endpointArgs(endpoint, name, "verdict", now.String(), "was", was.String())...)...)
}

// cooling logs and counts the start of endpoint's overload cooldown.
func (o *observer) cooling(endpoint, name string, d time.Duration, fromInfo bool, repeats int) {
	o.log(slog.LevelWarn, o.now(), "spannerme: endpoint cooling down after RESOURCE_EXHAUSTED; groups skip it while another endpoint is available",
		endpointArgs(endpoint, name, "for", d.Round(time.Millisecond), "from_retry_info", fromInfo, "repeats", repeats)...)
	o.metrics.cooldowns.Add(context.Background(), 1, metric.WithAttributes(endpointAttrs(endpoint, name)...))
}

// cooled logs the end of endpoint's overload cooldown of length d.
func (o *observer) cooled(endpoint, name string, d time.Duration) {
	o.log(slog.LevelInfo, o.now(), "spannerme: endpoint cooldown over", endpointArgs(endpoint, name, "cooled_for", d.Round(time.Millisecond))...)
}
