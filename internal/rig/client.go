package rig

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// WaitReady polls gme's status every 20ms until at least n pools are READY, so
// that a run starts from a warm state. Errors: ctx ends first (wrapped).
func WaitReady(ctx context.Context, gme *spannerme.GCPMultiEndpoint, n int) error {
	for {
		ready := 0
		for _, p := range gme.Status().Pools {
			if p.Connectivity == "READY" {
				ready++
			}
		}
		if ready >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rig: %d of %d endpoints ready: %w", ready, n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// SwitchLog collects a client's switch events (give [SwitchLog.Add] to
// spannerme.Settings.OnSwitch). The zero value is ready to use.
type SwitchLog struct {
	mu     sync.Mutex // guards events and notify
	events []spannerme.SwitchEvent
	notify chan struct{} // closed and replaced by every Add
}

// Add records ev and wakes the waiters of WaitFor.
func (l *SwitchLog) Add(ev spannerme.SwitchEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
	if l.notify != nil {
		close(l.notify)
		l.notify = nil
	}
}

// Events returns a copy of the events so far, in order.
func (l *SwitchLog) Events() []spannerme.SwitchEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]spannerme.SwitchEvent(nil), l.events...)
}

// WaitFor waits up to timeout for an event at or after since that match
// accepts, and returns it. Errors: the wait ends first (context error).
func (l *SwitchLog) WaitFor(ctx context.Context, timeout time.Duration, since time.Time, match func(spannerme.SwitchEvent) bool) (spannerme.SwitchEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		l.mu.Lock()
		for _, ev := range l.events {
			if !ev.At.Before(since) && match(ev) {
				l.mu.Unlock()
				return ev, nil
			}
		}
		if l.notify == nil {
			l.notify = make(chan struct{})
		}
		wake := l.notify
		l.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return spannerme.SwitchEvent{}, ctx.Err()
		}
	}
}

// LockedWriter serializes writes to W, so that lines written with one Write
// each from several goroutines never interleave.
type LockedWriter struct {
	mu sync.Mutex // guards W
	W  io.Writer
}

// Write writes p to W under the lock.
func (l *LockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(p)
}
