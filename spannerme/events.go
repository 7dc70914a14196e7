package spannerme

import (
	"log/slog"

	"github.com/spannerme/spanner-multiendpoint/internal/ordered"
)

// eventQueue hands switch and health events to the logger and to Settings.OnSwitch and
// Settings.OnHealth on a goroutine of its own, in the order they were emitted. The state
// machines, the health detectors and the update path push without waiting, so a slow or
// re-entrant callback (one that calls UpdateMultiEndpoints or Close) can neither block them
// nor deadlock. close drops the events not yet delivered and does not wait for a callback in
// progress (it may be the one calling Close).
type eventQueue struct {
	q *ordered.Async[queuedEvent]
}

// queuedEvent is a switch event, with the names of its endpoints ("" for none), or a
// health event when health is not nil.
type queuedEvent struct {
	sw               SwitchEvent
	fromName, toName string
	health           *HealthEvent
}

func newEventQueue(log *slog.Logger, onSwitch func(SwitchEvent), onHealth func(HealthEvent)) *eventQueue {
	e := &eventQueue{}
	e.q = ordered.NewAsync(func(qe queuedEvent) {
		if qe.health != nil {
			if onHealth != nil {
				onHealth(*qe.health)
			}
			return
		}
		ev := qe.sw
		args := []any{"multiendpoint", ev.Name, "from", ev.From}
		if qe.fromName != "" {
			args = append(args, "from_name", qe.fromName)
		}
		args = append(args, "to", ev.To)
		if qe.toName != "" {
			args = append(args, "to_name", qe.toName)
		}
		log.Info("spannerme: current endpoint changed", append(args, "reason", ev.Reason.String())...)
		// The logger may have taken long: an event not yet handed to OnSwitch at close is
		// dropped, as documented.
		if onSwitch != nil && !e.q.Stopped() {
			onSwitch(ev)
		}
	})
	return e
}

// push queues ev, whose endpoints are named fromName and toName ("" for none). It never
// blocks. Events pushed after close are dropped.
func (e *eventQueue) push(ev SwitchEvent, fromName, toName string) {
	e.q.Push(queuedEvent{sw: ev, fromName: fromName, toName: toName})
}

// pushHealth queues ev like push (the observer has logged it).
func (e *eventQueue) pushHealth(ev HealthEvent) { e.q.Push(queuedEvent{health: &ev}) }

// close drops undelivered events; after it returns no callback starts. Idempotent.
func (e *eventQueue) close() { e.q.Stop() }
