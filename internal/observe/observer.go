package observe

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
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/ordered"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// Observer turns what a GCPMultiEndpoint sees into log lines (one per transition of an
// endpoint, never one per call), metrics and the history of switches. It is fed by:
//
//   - each pool, through its events (spannerme's poolEvents): connection attempts that fail while
//     the endpoint is down, the endpoint up and down, ejections and readmissions, the end of
//     calls;
//   - the groups (Switched): a group's current endpoint changed;
//   - the call path (CallBegin, CallEnd).
//
// Its methods are safe for concurrent use, take no lock across a user callback (log lines
// go through a queue delivered on a goroutine of the observer's own) and never block.
type Observer struct {
	clock   clock.Clock
	started time.Time
	logs    *ordered.Async[slog.Record]
	metrics *Metrics
	history *switchHistory
}

func New(log *slog.Logger, clk clock.Clock, m *Metrics) *Observer {
	h := log.Handler()
	logs := ordered.NewAsync(func(r slog.Record) {
		if ctx := context.Background(); h.Enabled(ctx, r.Level) {
			_ = h.Handle(ctx, r)
		}
	})
	return &Observer{clock: clk, started: clk.Now(), logs: logs, metrics: m, history: newSwitchHistory()}
}

func (o *Observer) Now() time.Time { return o.clock.Now() }

// log queues a log line; it keeps the time of the event, not of its delivery.
func (o *Observer) log(level slog.Level, at time.Time, msg string, args ...any) {
	r := slog.NewRecord(at, level, msg, 0)
	r.Add(args...)
	o.logs.Push(r)
}

// Close delivers the log lines queued so far, stops the metrics' callbacks, and returns once
// the log goroutine has ended. Later events are dropped. Idempotent.
func (o *Observer) Close() {
	o.metrics.Close()
	o.logs.Drain()
}

// Unreachable logs a connection error of endpoint while it is not available (the pool
// reports each kind once until the endpoint is available again). A channel of an available
// pool that fails is no transition of the endpoint: its error shows in Status only.
func (o *Observer) Unreachable(endpoint, name string, e pool.ConnError, how pool.Unreachability) {
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

// Up logs that endpoint became available, after downFor (negative: it had never been up).
func (o *Observer) Up(endpoint, name string, at time.Time, downFor time.Duration) {
	args := endpointArgs(endpoint, name)
	if downFor >= 0 {
		args = append(args, "down_for", downFor.Round(time.Millisecond))
	}
	o.log(slog.LevelInfo, at, "spannerme: endpoint up: connected", args...)
}

// Down logs that endpoint lost its last ready connection, with the error that explains it.
func (o *Observer) Down(endpoint, name string, at time.Time, reason pool.ConnError) {
	o.log(slog.LevelWarn, at, "spannerme: endpoint down: no ready connection",
		endpointArgs(endpoint, name, "kind", string(reason.Kind), "error", reason.Message)...)
}

// Switched records ev, a change of a group's current endpoint for reason (a
// spannerme.SwitchReason's String), whose new current endpoint is named toName ("" for none):
// the metric and the history. The GCPMultiEndpoint's event queue logs it.
func (o *Observer) Switched(ev multiendpoint.Event, reason, toName string) {
	o.history.add(ev)
	o.metrics.switched(ev.Name, reason, ev.To, toName)
}

// History returns a copy of group's recent switches, oldest first (at most MaxSwitchHistory);
// nil if it has none.
func (o *Observer) History(group string) []multiendpoint.Event { return o.history.of(group) }

// RetainHistory forgets the switches of the groups keep refuses (groups an update removed).
func (o *Observer) RetainHistory(keep func(group string) bool) { o.history.retain(keep) }

// Metrics returns the instruments, for what is counted outside the observer's events.
func (o *Observer) Metrics() *Metrics { return o.metrics }

// Started returns when the observer was made (the GCPMultiEndpoint's creation).
func (o *Observer) Started() time.Time { return o.started }

// Ejected records that outcome-based health took endpoint out of service until the given
// time (zero: unknown), for reason (an EjectionReason's String: "consecutive failures",
// "failure percentage", "timeouts" or "probe failed"; it is a metric attribute, so the set
// stays small) of the calls of class: a log line and the ejections metric.
func (o *Observer) Ejected(endpoint, name, reason, class, detail string, until time.Time, ejections int) {
	now := o.Now()
	args := endpointArgs(endpoint, name, "reason", reason, "class", class, "detail", detail, "ejections", ejections)
	if !until.IsZero() {
		args = append(args, "for", until.Sub(now).Round(time.Millisecond))
	}
	o.log(slog.LevelWarn, now, "spannerme: endpoint ejected: its calls fail or stall; groups count it as not available", args...)
	o.metrics.ejected(endpoint, name, reason)
}

// Readmitted records that outcome-based health put endpoint back in service.
func (o *Observer) Readmitted(endpoint, name, ejectedFor string) {
	o.log(slog.LevelInfo, o.Now(), "spannerme: endpoint readmitted: its probe passed", endpointArgs(endpoint, name, "ejected_for", ejectedFor)...)
}

// MaxSwitchHistory is how many recent switches are kept per group.
const MaxSwitchHistory = 32

// switchHistory keeps each group's most recent switches, for Status and the status page.
type switchHistory struct {
	mu     sync.Mutex                       // guards groups
	groups map[string][]multiendpoint.Event // oldest first, at most MaxSwitchHistory each
}

func newSwitchHistory() *switchHistory {
	return &switchHistory{groups: make(map[string][]multiendpoint.Event)}
}

func (h *switchHistory) add(ev multiendpoint.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	evs := h.groups[ev.Name]
	if len(evs) == MaxSwitchHistory {
		evs = append(evs[:0], evs[1:]...)
	}
	h.groups[ev.Name] = append(evs, ev)
}

// of returns a copy of group's history, nil if it has none.
func (h *switchHistory) of(group string) []multiendpoint.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	evs := h.groups[group]
	if len(evs) == 0 {
		return nil
	}
	return append([]multiendpoint.Event(nil), evs...)
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

// CallBegin marks a call of group sent to endpoint, named name ("" for none): the call's
// span, if it is recording, gets the group and the endpoint (and its name, if it has one) as
// attributes, and the start
// time is returned if the metrics record anything (zero otherwise: the call is not measured).
func (o *Observer) CallBegin(ctx context.Context, endpoint, name, group string) time.Time {
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

// CallEnd records the end of a call that CallBegin measured from start, with its error
// (nil: OK), under the attribute sets a.
func (o *Observer) CallEnd(ctx context.Context, a *CallAttrs, start time.Time, err error) {
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

// Brownout logs one change of an endpoint's degraded state in a group: WARN when it becomes
// degraded, INFO when it is no longer. It queues the line and never blocks.
func (o *Observer) Brownout(c brownout.Change) {
	v := c.Verdict
	args := []any{"multiendpoint", c.Group, "endpoint", v.Endpoint, "latency", v.Latency.Round(time.Millisecond),
		"fallback", v.Fallback, "fallback_latency", v.FallbackLatency.Round(time.Millisecond)}
	if v.Degraded {
		o.log(slog.LevelWarn, c.At, "spannerme: endpoint degraded (brownout): far slower than its fallback", args...)
		return
	}
	o.log(slog.LevelInfo, c.At, "spannerme: endpoint no longer degraded (brownout)", args...)
}

// VerdictChanged logs that endpoint's verdict in group changed from was to now, when the
// change is the group's own finding: to or from a last resort (DegradedLastResort,
// EjectedEverywhere, CoolingLastResort), which no line of the endpoint's tells. The other changes follow a line
// of the endpoint's own (up, down, ejected, readmitted, degraded), which is not repeated per
// group. WARN when the endpoint becomes a last resort, INFO when it stops being one. One line
// per group and change, never per call.
func (o *Observer) VerdictChanged(group, endpoint, name string, was, now verdict.Reason) {
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
	o.log(level, o.Now(), msg,
		append([]any{"multiendpoint", group}, endpointArgs(endpoint, name, "verdict", now.String(), "was", was.String())...)...)
}

// Cooling logs and counts the start of endpoint's overload cooldown.
func (o *Observer) Cooling(endpoint, name string, d time.Duration, fromInfo bool, repeats int) {
	o.log(slog.LevelWarn, o.Now(), "spannerme: endpoint cooling down after RESOURCE_EXHAUSTED; new calls go to another available endpoint, and its groups move once another endpoint answers",
		endpointArgs(endpoint, name, "for", d.Round(time.Millisecond), "from_retry_info", fromInfo, "repeats", repeats)...)
	o.metrics.cooldowns.Add(context.Background(), 1, metric.WithAttributes(endpointAttrs(endpoint, name)...))
}

// CooldownAnswered logs that endpoint by answered a call during endpoint's cooldown: a group
// of endpoint that would use by instead now moves away from it.
func (o *Observer) CooldownAnswered(endpoint, name, by string) {
	o.log(slog.LevelInfo, o.Now(), "spannerme: another endpoint answered during the cooldown; groups that would use it move to it",
		endpointArgs(endpoint, name, "answered_by", by)...)
}

// Cooled logs the end of endpoint's overload cooldown of length d.
func (o *Observer) Cooled(endpoint, name string, d time.Duration) {
	o.log(slog.LevelInfo, o.Now(), "spannerme: endpoint cooldown over", endpointArgs(endpoint, name, "cooled_for", d.Round(time.Millisecond))...)
}
