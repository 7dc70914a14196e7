package spannerme

import (
	"log/slog"
	"sync"
	"sync/atomic"
)

// eventQueue hands switch and health events to the logger and to Settings.OnSwitch and
// Settings.OnHealth on a goroutine of its own, in the order they were emitted. The state
// machines, the health detectors and the update path push without waiting, so a slow or
// re-entrant callback (one that calls UpdateMultiEndpoints or Close) can neither block them
// nor deadlock.
type eventQueue struct {
	log      *slog.Logger
	onSwitch func(SwitchEvent)
	onHealth func(HealthEvent)

	mu     sync.Mutex // guards queue and closed
	queue  []queuedEvent
	closed bool
	wake   chan struct{} // capacity 1: there is something to deliver; closed by close
	done   chan struct{} // closed when the delivering goroutine has ended
}

// queuedEvent is a switch event, or a health event when health is not nil.
type queuedEvent struct {
	sw     SwitchEvent
	health *HealthEvent
}

func newEventQueue(log *slog.Logger, onSwitch func(SwitchEvent), onHealth func(HealthEvent)) *eventQueue {
	q := &eventQueue{log: log, onSwitch: onSwitch, onHealth: onHealth, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// push queues ev. It never blocks. Events pushed after close are dropped.
func (q *eventQueue) push(ev SwitchEvent) { q.add(queuedEvent{sw: ev}) }

// pushHealth queues ev like push.
func (q *eventQueue) pushHealth(ev HealthEvent) { q.add(queuedEvent{health: &ev}) }

func (q *eventQueue) add(ev queuedEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.queue = append(q.queue, ev)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *eventQueue) run() {
	defer close(q.done)
	for range q.wake {
		for {
			q.mu.Lock()
			if q.closed || len(q.queue) == 0 {
				closed := q.closed
				q.mu.Unlock()
				if closed {
					return
				}
				break
			}
			qe := q.queue[0]
			q.queue = q.queue[1:]
			q.mu.Unlock()
			if qe.health != nil {
				q.deliverHealth(*qe.health)
				continue
			}
			ev := qe.sw
			q.log.Info("spannerme: current endpoint changed",
				"multiendpoint", ev.Name, "from", ev.From, "to", ev.To, "reason", ev.Reason.String())
			if q.onSwitch != nil && q.open() {
				// Close after the check finds this call already started, as documented.
				q.onSwitch(ev)
			}
		}
	}
}

// open reports, under q.mu, that close has not been called: the logger may have taken long,
// and an event not yet handed to OnSwitch at close is dropped.
func (q *eventQueue) open() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.closed
}

// close drops undelivered events, those being logged included, and ends the goroutine once
// the callback in progress, if any, returns: after close returns, OnSwitch starts no more. It does not wait for that callback, so that OnSwitch may call Close.
// Idempotent.
func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed, q.queue = true, nil
		close(q.wake)
	}
}

// broadcast wakes every waiter at once: wait returns a channel that the next signal closes.
// wait takes no lock (it is on the call path); signal is serialized.
type broadcast struct {
	mu sync.Mutex // serializes signal
	ch atomic.Pointer[chan struct{}]
}

func newBroadcast() *broadcast {
	b := &broadcast{}
	ch := make(chan struct{})
	b.ch.Store(&ch)
	return b
}

func (b *broadcast) wait() <-chan struct{} { return *b.ch.Load() }

func (b *broadcast) signal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := make(chan struct{})
	old := b.ch.Swap(&next)
	close(*old)
}
