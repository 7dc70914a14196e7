package hedge

import (
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// Scheduler fires the hedges of a Hedger's armed streams: one timer for all of
// them instead of one per stream. An armed stream is queued (a min-heap by fire time: with a
// fixed delay the order is the order of arrival, with the adaptive delay it is not), and
// leaves the queue when its first message or end arrives (remove) or when it is due; the one
// timer is set for the head of the queue. A removed head does not move the timer: it fires
// at the old time, finds nothing due and is set again for the new head, so that a stream
// costs a push and a removal (no allocation once the queue has grown to the streams in
// flight), and the timer is set at most once per firing or per new earliest stream.
//
// A due stream's hedge is sent on a goroutine of its own (Stream.fire), so that a slow
// NewStream of one hedge does not delay another. The zero value, with clock set, is ready (Hedger.Init sets it);
// after close nothing is queued and no timer is pending. Safe for concurrent use. Lock order:
// a stream's mu, then the scheduler's; fire is called with neither held.
type Scheduler struct {
	clock clock.Clock
	// fire sends a due stream's hedge; nil means (*Stream).fire (tests: to record).
	fire func(*Stream)

	mu     sync.Mutex
	queue  []*Stream   // a min-heap by due; a queued stream's schedPos is its index + 1
	timer  clock.Timer // the timer set for timerAt; nil when none is pending
	at     int64       // when timer fires, Unix nanoseconds of clock
	gen    uint64      // the generation of timer: a stopped timer's late call is ignored
	closed bool
}

// add queues s to fire after d. It allocates nothing when the queue has room and the timer
// needs no change (s is not due before the timer fires). After close it does nothing.
func (h *Scheduler) add(s *Stream, d time.Duration) {
	now := h.clock.Now().UnixNano()
	due := now + int64(d)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || s.schedPos != 0 {
		return
	}
	s.schedDue = due
	h.queue = append(h.queue, s)
	s.schedPos = len(h.queue)
	h.up(len(h.queue) - 1)
	if h.timer == nil || due < h.at {
		h.arm(now, due)
	}
}

// remove takes s out of the queue, if it is there.
func (h *Scheduler) remove(s *Stream) {
	h.mu.Lock()
	if s.schedPos != 0 {
		h.removeAt(s.schedPos - 1)
	}
	h.mu.Unlock()
}

// arm sets the timer for due (now is the clock's time), replacing the pending one. h.mu is
// held.
func (h *Scheduler) arm(now, due int64) {
	if h.timer != nil {
		h.timer.Stop()
	}
	h.gen++
	gen := h.gen
	h.at = due
	h.timer = h.clock.AfterFunc(time.Duration(due-now), func() { h.run(gen) })
}

// run is the timer's call: it sends the hedge of every due stream and sets the timer for the
// next one.
func (h *Scheduler) run(gen uint64) {
	h.mu.Lock()
	if h.closed || gen != h.gen { // stopped too late: the timer set since then will run
		h.mu.Unlock()
		return
	}
	h.timer = nil
	now := h.clock.Now().UnixNano()
	for len(h.queue) > 0 && h.queue[0].schedDue <= now {
		s := h.queue[0]
		h.removeAt(0)
		if h.fire != nil {
			go h.fire(s)
		} else {
			go s.fire()
		}
	}
	if len(h.queue) > 0 {
		h.arm(now, h.queue[0].schedDue)
	}
	h.mu.Unlock()
}

// close stops the timer and empties the queue: no hedge is sent from then on.
func (h *Scheduler) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	for _, s := range h.queue {
		s.schedPos = 0
	}
	clear(h.queue)
	h.queue = nil
}

// removeAt removes the stream at index i of the heap. h.mu is held.
func (h *Scheduler) removeAt(i int) {
	last := len(h.queue) - 1
	h.queue[i].schedPos = 0
	if i != last {
		h.queue[i] = h.queue[last]
		h.queue[i].schedPos = i + 1
	}
	h.queue[last] = nil
	h.queue = h.queue[:last]
	if i < last {
		h.down(i)
		h.up(i)
	}
}

func (h *Scheduler) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.queue[p].schedDue <= h.queue[i].schedDue {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *Scheduler) down(i int) {
	n := len(h.queue)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && h.queue[r].schedDue < h.queue[c].schedDue {
			c = r
		}
		if h.queue[i].schedDue <= h.queue[c].schedDue {
			return
		}
		h.swap(i, c)
		i = c
	}
}

func (h *Scheduler) swap(i, j int) {
	h.queue[i], h.queue[j] = h.queue[j], h.queue[i]
	h.queue[i].schedPos = i + 1
	h.queue[j].schedPos = j + 1
}
