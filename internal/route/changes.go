package route

import (
	"sync"
	"sync/atomic"
)

// Changes wakes every waiter at once when a pool's state or a group's current endpoint
// changes: Wait returns a channel that the next Signal closes. Wait takes no lock (it is on
// the call path: a call that waits for a connecting pool takes the channel before its pick,
// so that no news between them is lost); Signal is serialized. Make one with NewChanges.
type Changes struct {
	mu sync.Mutex // serializes Signal
	ch atomic.Pointer[chan struct{}]
}

// NewChanges returns a Changes with no waiter.
func NewChanges() *Changes {
	b := &Changes{}
	ch := make(chan struct{})
	b.ch.Store(&ch)
	return b
}

// Wait returns the channel that the next Signal closes.
func (b *Changes) Wait() <-chan struct{} { return *b.ch.Load() }

// Signal wakes every waiter.
func (b *Changes) Signal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	next := make(chan struct{})
	old := b.ch.Swap(&next)
	close(*old)
}
