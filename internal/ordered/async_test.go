package ordered

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Drain delivers every event pushed before it, in order, and drops later ones.
func TestAsyncDrainDeliversInOrder(t *testing.T) {
	var mu sync.Mutex
	var got []int
	a := NewAsync(func(n int) { mu.Lock(); got = append(got, n); mu.Unlock() })
	for i := range 100 {
		a.Push(i)
	}
	a.Drain()
	a.Push(100) // after Drain: dropped
	mu.Lock()
	defer mu.Unlock()
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want 0..99 in order", got)
	}
}

// Stop drops what is queued, does not wait for the callback in progress (which may itself
// cause Stop), and no callback starts after it returns.
func TestAsyncStopDropsAndDoesNotWait(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var got []int
	var a *Async[int]
	a = NewAsync(func(n int) {
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
		if n == 0 {
			close(started)
			<-release
			a.Stop() // re-entrant: must not deadlock
		}
	})
	a.Push(0)
	a.Push(1)
	<-started
	a.Stop() // returns although the callback is blocked
	if !a.Stopped() {
		t.Fatal("Stopped() = false after Stop")
	}
	close(release)
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the goroutine did not end after Stop")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []int{0}) {
		t.Fatalf("delivered %v, want only 0 (1 was queued at Stop)", got)
	}
}
