package ordered

import (
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// owner is the smallest user of a Queue: a mutex, a state it guards, and the queue.
type owner struct {
	mu      sync.Mutex
	n       int
	stopped bool
	q       Queue[int]
	got     []int // written only by the callback: one deliverer at a time
}

// change makes the next state change and queues its event, then delivers.
func (o *owner) change(f func(int)) {
	o.mu.Lock()
	o.n++
	o.q.Push(o.n)
	o.mu.Unlock()
	o.q.Deliver(&o.mu, func() bool { return o.stopped }, f)
}

func TestDeliverInOrderWithoutLock(t *testing.T) {
	tests := []struct {
		name string
		// reenter is how many further changes the callback makes while it handles the
		// first event.
		reenter int
		want    []int
	}{
		{"one event", 0, []int{1}},
		{"the callback causes two more, delivered after it returns", 2, []int{1, 2, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &owner{}
			var f func(int)
			f = func(ev int) {
				if !o.mu.TryLock() {
					t.Fatal("the owner's mutex is held during the callback")
				}
				o.mu.Unlock()
				o.got = append(o.got, ev)
				if ev == 1 {
					for range tc.reenter {
						o.change(f) // returns at once: this goroutine is delivering
					}
					if len(o.got) != 1 {
						t.Fatalf("an event delivered inside the callback: %v", o.got)
					}
				}
			}
			o.change(f)
			if !slices.Equal(o.got, tc.want) {
				t.Fatalf("delivered %v, want %v", o.got, tc.want)
			}
		})
	}
}

// Events queued by many goroutines are delivered once each, in the order they were queued
// (the order of the state changes), one callback at a time.
func TestDeliverConcurrentOnePerEventInOrder(t *testing.T) {
	const goroutines, each = 8, 500
	o := &owner{}
	var inCallback sync.Mutex
	f := func(ev int) {
		if !inCallback.TryLock() {
			t.Error("two callbacks at once")
			return
		}
		o.got = append(o.got, ev)
		inCallback.Unlock()
	}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				o.change(f)
			}
		})
	}
	wg.Wait()
	want := make([]int, goroutines*each)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(o.got, want) {
		t.Fatalf("delivered %d events, not 1..%d in order", len(o.got), len(want))
	}
}

func TestDeliverStopsAndDrop(t *testing.T) {
	o := &owner{}
	var got []int
	f := func(ev int) {
		got = append(got, ev)
		if ev == 1 {
			o.mu.Lock()
			o.stopped = true
			o.q.Push(2)
			o.mu.Unlock()
		}
	}
	o.change(f)
	if !slices.Equal(got, []int{1}) {
		t.Fatalf("delivered %v after stop, want [1]", got)
	}
	o.mu.Lock()
	o.stopped = false
	o.q.Drop()
	o.mu.Unlock()
	o.q.Deliver(&o.mu, func() bool { return o.stopped }, f)
	if !slices.Equal(got, []int{1}) {
		t.Fatalf("a dropped event was delivered: %v", got)
	}
}

// A callback that panics: the panic reaches the goroutine that delivered, which may recover;
// the owner's mutex is unlocked, and the next Deliver goes on with the events left.
func TestDeliverAfterPanickingCallback(t *testing.T) {
	o := &owner{}
	var got []int
	f := func(ev int) {
		got = append(got, ev)
		if ev == 1 {
			o.mu.Lock()
			o.n++
			o.q.Push(o.n) // queued behind the event that panics
			o.mu.Unlock()
			panic("callback failed")
		}
	}
	func() {
		defer func() {
			if r := recover(); r != "callback failed" {
				t.Fatalf("recovered %v, want the callback's panic", r)
			}
		}()
		o.change(f)
	}()
	if !o.mu.TryLock() {
		t.Fatal("the owner's mutex is still held after the panic")
	}
	o.mu.Unlock()
	o.q.Deliver(&o.mu, func() bool { return o.stopped }, f)
	if !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("delivered %v, want [1 2]", got)
	}
}
