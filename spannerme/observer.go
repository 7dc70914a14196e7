package spannerme

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// observer turns what a GCPMultiEndpoint sees into log lines (one per transition of an
// endpoint, never one per call), metrics and the history of switches. It is fed by:
//
//   - each pool's connWatch (connError): connection attempts that fail, ready connections
//     that close;
//   - each pool's monitor (poolAvailability): the pool became available or not;
//   - the groups (switched): a group's current endpoint changed;
//   - the call path (callBegin, callEnd; metrics.go);
//   - outcome-based health (ejected, readmitted): one call per ejection and readmission.
//
// Its methods are safe for concurrent use, take no lock across a user callback (log lines
// go through a queue delivered on a goroutine of the observer's own) and never block.
type observer struct {
	clock   clock.Clock
	started time.Time
	logs    *logQueue
	metrics *metrics
	history *switchHistory
}

func newObserver(log *slog.Logger, clk clock.Clock, m *metrics) *observer {
	return &observer{clock: clk, started: clk.Now(), logs: newLogQueue(log.Handler()), metrics: m, history: newSwitchHistory()}
}

func (o *observer) now() time.Time { return o.clock.Now() }

// close delivers the log lines queued so far, stops the metrics' callbacks, and returns once
// the log goroutine has ended. Later events are dropped. Idempotent.
func (o *observer) close() {
	o.metrics.close()
	o.logs.close()
}

// connError is the connWatch's report of a connection error. While the endpoint is not
// available it logs the error, once per kind until the endpoint is available again (a
// standby that keeps being refused logs one line, not one per retry). A channel of an
// available pool that fails is no transition of the endpoint: its error shows in Status only.
func (o *observer) connError(w *connWatch, e *ConnError) {
	w.mu.Lock()
	log := !w.up && !w.logged[e.Kind]
	if log {
		w.noteLoggedLocked(e.Kind)
	}
	never := w.upAt.IsZero()
	w.mu.Unlock()
	if !log {
		return
	}
	msg := "spannerme: endpoint unreachable: connection attempt failed"
	if never {
		msg = "spannerme: endpoint unreachable: it has never connected"
	}
	o.logs.add(slog.LevelWarn, e.At, msg, "endpoint", w.endpoint, "kind", string(e.Kind), "error", e.Message)
}

// noteLoggedLocked records that a connection error of kind was logged. w.mu must be held.
func (w *connWatch) noteLoggedLocked(kind ConnErrorKind) {
	if w.logged == nil {
		w.logged = make(map[ConnErrorKind]bool)
	}
	w.logged[kind] = true
}

// poolAvailability logs an endpoint's transition after its pool's monitor reported a change
// of availability (or its first failed connection attempt).
func (o *observer) poolAvailability(p *pool) {
	w := p.watch
	if w == nil {
		return
	}
	ready := p.ready.Load()
	now := o.now()
	w.mu.Lock()
	switch {
	case ready && !w.up:
		w.up, w.upAt, w.logged = true, now, nil
		downAt := w.downAt
		w.mu.Unlock()
		args := []any{"endpoint", p.endpoint}
		if !downAt.IsZero() {
			args = append(args, "down_for", now.Sub(downAt).Round(time.Millisecond))
		}
		o.logs.add(slog.LevelInfo, now, "spannerme: endpoint up: connected", args...)
	case !ready && w.up:
		w.up, w.downAt = false, now
		reason := w.last.Load()
		if reason != nil && reason.At.Before(w.upAt) {
			reason = nil // older than the last connection: not why it went down
		}
		kind, msg := ConnErrorKind("unknown"), "no connection error was reported"
		if reason != nil {
			kind, msg = reason.Kind, reason.Message
		}
		w.logged = nil
		w.noteLoggedLocked(kind)
		w.mu.Unlock()
		o.logs.add(slog.LevelWarn, now, "spannerme: endpoint down: no ready connection", "endpoint", p.endpoint, "kind", string(kind), "error", msg)
	case !ready && len(w.logged) == 0:
		// Its first connection attempt failed and no error was recorded (a caller's dial
		// options replaced this package's load-balancing policy): say so without a reason.
		w.noteLoggedLocked("unknown")
		w.mu.Unlock()
		o.logs.add(slog.LevelWarn, now, "spannerme: endpoint unreachable: its first connection attempt failed", "endpoint", p.endpoint,
			"kind", "unknown", "error", "no connection error was reported")
	default:
		w.mu.Unlock()
	}
}

// switched records a change of a group's current endpoint (the event queue logs it).
func (o *observer) switched(ev SwitchEvent) {
	o.history.add(ev)
	o.metrics.switched(ev)
}

// ejected records that outcome-based health took endpoint out of service until the given
// time (zero: unknown), for reason (an EjectionReason's String: "consecutive failures",
// "failure percentage", "timeouts" or "probe failed"; it is a metric attribute, so the set
// stays small): a log line and the ejections metric.
func (o *observer) ejected(endpoint, reason, detail string, until time.Time, ejections int) {
	now := o.now()
	args := []any{"endpoint", endpoint, "reason", reason, "detail", detail, "ejections", ejections}
	if !until.IsZero() {
		args = append(args, "for", until.Sub(now).Round(time.Millisecond))
	}
	o.logs.add(slog.LevelWarn, now, "spannerme: endpoint ejected: its calls fail or stall; groups count it as not available", args...)
	o.metrics.ejected(endpoint, reason)
}

// readmitted records that outcome-based health put endpoint back in service.
func (o *observer) readmitted(endpoint, ejectedFor string) {
	o.logs.add(slog.LevelInfo, o.now(), "spannerme: endpoint readmitted: its probe passed", "endpoint", endpoint, "ejected_for", ejectedFor)
}

// logQueue delivers log records to a slog.Handler in order, on a goroutine of its own, so
// that gRPC's goroutines and the pools' monitors never wait for a slow handler. Records keep
// the time of the event, not of the delivery.
type logQueue struct {
	h slog.Handler

	mu     sync.Mutex // guards queue and closed
	queue  []slog.Record
	closed bool
	wake   chan struct{} // capacity 1: there is something to deliver
	done   chan struct{} // closed when the goroutine has ended
}

func newLogQueue(h slog.Handler) *logQueue {
	q := &logQueue{h: h, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// add queues a record. It never blocks; records added after close are dropped.
func (q *logQueue) add(level slog.Level, at time.Time, msg string, args ...any) {
	r := slog.NewRecord(at, level, msg, 0)
	r.Add(args...)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.queue = append(q.queue, r)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *logQueue) run() {
	defer close(q.done)
	for range q.wake {
		for {
			q.mu.Lock()
			if len(q.queue) == 0 {
				closed := q.closed
				q.mu.Unlock()
				if closed {
					return
				}
				break
			}
			r := q.queue[0]
			q.queue = q.queue[1:]
			q.mu.Unlock()
			if ctx := context.Background(); q.h.Enabled(ctx, r.Level) {
				_ = q.h.Handle(ctx, r)
			}
		}
	}
}

// close delivers what is queued and waits for the goroutine to end. Idempotent.
func (q *logQueue) close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	q.mu.Unlock()
	<-q.done
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
