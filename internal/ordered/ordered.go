// Package ordered hands events to a callback in the order they were queued, with no lock held
// while the callback runs, so that the callback may call back into the queue's owner.
//
// The owner keeps a Queue beside the state its mutex guards, pushes events while it holds
// that mutex (so that their order is the order of the state changes), and calls Deliver once
// it has let go of the mutex. Only one goroutine delivers at a time: a goroutine that finds
// another delivering leaves its events to it and returns at once, so a callback that causes
// new events (re-entrantly, or on another goroutine) never waits for itself and never sees
// them out of order.
package ordered

import "sync"

// Queue is a queue of events of type E, guarded by its owner's mutex. The zero value is an
// empty queue, ready to use.
type Queue[E any] struct {
	events     []E
	delivering bool
}

// Push queues ev. The caller holds the owner's mutex.
func (q *Queue[E]) Push(ev E) { q.events = append(q.events, ev) }

// Drop forgets every queued event. The caller holds the owner's mutex.
func (q *Queue[E]) Drop() { q.events = nil }

// Deliver hands the queued events to f, oldest first, with mu unlocked during each call of f,
// until the queue is empty or stopped (called with mu held) reports true; events still queued
// then stay queued. If another goroutine is delivering, Deliver returns at once and that
// goroutine delivers the events. The caller must not hold mu. If f panics, the panic goes on
// to Deliver's caller with mu unlocked, and the events still queued are delivered by the next
// Deliver.
func (q *Queue[E]) Deliver(mu *sync.Mutex, stopped func() bool, f func(E)) {
	mu.Lock()
	if q.delivering {
		mu.Unlock()
		return
	}
	q.delivering = true
	for len(q.events) > 0 && !stopped() {
		ev := q.events[0]
		var zero E
		q.events[0] = zero // the backing array does not keep delivered events alive
		q.events = q.events[1:]
		mu.Unlock()
		q.call(mu, f, ev)
		mu.Lock()
	}
	q.delivering = false
	mu.Unlock()
}

// call calls f(ev), mu unlocked. If f panics, it ends the delivery before the panic goes on.
func (q *Queue[E]) call(mu *sync.Mutex, f func(E), ev E) {
	returned := false
	defer func() {
		if !returned {
			mu.Lock()
			q.delivering = false
			mu.Unlock()
		}
	}()
	f(ev)
	returned = true
}

// Len returns the number of events queued. The caller holds the owner's mutex.
func (q *Queue[E]) Len() int { return len(q.events) }
