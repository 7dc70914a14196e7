package ordered

import "sync"

// Async hands events of type E to a callback on a goroutine of its own, in the order they
// were pushed, so that pushers (gRPC's goroutines, state machines holding their locks) never
// wait for a slow or re-entrant callback. Create it with NewAsync; stop it with Stop or
// Drain. All methods are safe for concurrent use.
type Async[E any] struct {
	f func(E)

	mu      sync.Mutex // guards q, closed and dropped
	q       Queue[E]
	closed  bool          // no more pushes
	dropped bool          // events still queued are not delivered
	wake    chan struct{} // capacity 1: there is something to deliver, or it was closed
	done    chan struct{} // closed when the goroutine has ended
}

// NewAsync starts the goroutine that calls f for each event pushed.
func NewAsync[E any](f func(E)) *Async[E] {
	a := &Async[E]{f: f, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go a.run()
	return a
}

// Push queues ev. It never blocks; events pushed after Stop or Drain are dropped.
func (a *Async[E]) Push(ev E) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.q.Push(ev)
	a.signalLocked()
}

func (a *Async[E]) signalLocked() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Stopped reports whether Stop was called: a callback that takes long may check it before
// handing an event further on.
func (a *Async[E]) Stopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.dropped
}

// Stop drops the events not yet delivered, and ends the goroutine once the callback in
// progress, if any, returns: after Stop returns, no new callback starts. It does not wait
// for that callback, so that the callback may itself cause Stop. Idempotent.
func (a *Async[E]) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed, a.dropped = true, true
	a.q.Drop()
	a.signalLocked()
}

// Drain delivers the events queued so far, drops later ones, and waits for the goroutine to
// end. It must not be called from the callback. Idempotent (after Stop it only waits).
func (a *Async[E]) Drain() {
	a.mu.Lock()
	a.closed = true
	a.signalLocked()
	a.mu.Unlock()
	<-a.done
}

// Done returns a channel closed when the goroutine has ended (after Stop or Drain).
func (a *Async[E]) Done() <-chan struct{} { return a.done }

func (a *Async[E]) run() {
	defer close(a.done)
	stopped := func() bool { return a.dropped } // called with a.mu held
	for range a.wake {
		a.q.Deliver(&a.mu, stopped, a.f)
		a.mu.Lock()
		end := a.closed && (a.dropped || a.q.Len() == 0)
		a.mu.Unlock()
		if end {
			return
		}
	}
}
