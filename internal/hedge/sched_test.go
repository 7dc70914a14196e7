package hedge

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// The hedge scheduler, on a fake clock: a stream is fired once its delay has passed, not
// before, in order of fire time whatever the order of arrival; a removed stream is never
// fired; one timer is pending at most, set for the earliest queued stream.
func TestHedgeSchedulerFiresDueStreams(t *testing.T) {
	type op struct {
		add     string        // queue this stream with delay d
		d       time.Duration // add: the delay; advance: how far
		remove  string        // take this stream out
		advance bool          // move the clock by d, then expect want fired
		want    []string
	}
	ms := time.Millisecond
	tests := []struct {
		name string
		ops  []op
	}{
		{"fixed delay: in arrival order", []op{
			{add: "a", d: 50 * ms}, {advance: true, d: 10 * ms}, {add: "b", d: 50 * ms},
			{advance: true, d: 39 * ms}, {advance: true, d: ms, want: []string{"a"}},
			{advance: true, d: 9 * ms}, {advance: true, d: ms, want: []string{"b"}},
		}},
		{"removed before due: never fired", []op{
			{add: "a", d: 50 * ms}, {add: "b", d: 50 * ms}, {remove: "a"},
			{advance: true, d: 50 * ms, want: []string{"b"}}, {advance: true, d: time.Second},
		}},
		{"removed head: the next one fires on time", []op{
			{add: "a", d: 20 * ms}, {advance: true, d: 10 * ms}, {add: "b", d: 20 * ms}, {remove: "a"},
			{advance: true, d: 10 * ms}, {advance: true, d: 9 * ms}, {advance: true, d: ms, want: []string{"b"}},
		}},
		{"adaptive delay: an earlier stream moves the timer", []op{
			{add: "a", d: 100 * ms}, {add: "b", d: 10 * ms}, {add: "c", d: 60 * ms},
			{advance: true, d: 10 * ms, want: []string{"b"}}, {advance: true, d: 50 * ms, want: []string{"c"}},
			{advance: true, d: 40 * ms, want: []string{"a"}},
		}},
		{"all due at once", []op{
			{add: "a", d: 30 * ms}, {add: "b", d: 10 * ms}, {add: "c", d: 20 * ms}, {add: "d", d: time.Hour},
			{advance: true, d: time.Minute, want: []string{"a", "b", "c"}},
		}},
		{"removed twice, added twice", []op{
			{add: "a", d: 10 * ms}, {add: "a", d: 5 * ms}, {remove: "a"}, {remove: "a"}, {add: "b", d: 10 * ms},
			{advance: true, d: 10 * ms, want: []string{"b"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(time.Time{})
			fired := make(chan *Stream, 16)
			h := &Scheduler{clock: clk, fire: func(s *Stream) { fired <- s }}
			defer h.close()
			streams := map[string]*Stream{}
			names := map[*Stream]string{}
			stream := func(name string) *Stream {
				if streams[name] == nil {
					streams[name] = &Stream{}
					names[streams[name]] = name
				}
				return streams[name]
			}
			for i, o := range tt.ops {
				switch {
				case o.add != "":
					h.add(stream(o.add), o.d)
				case o.remove != "":
					h.remove(stream(o.remove))
				case o.advance:
					clk.Advance(o.d)
					got := receiveFired(t, fired, len(o.want), names)
					if !slices.Equal(got, o.want) {
						t.Fatalf("op %d: advance %v fired %v, want %v", i, o.d, got, o.want)
					}
				}
				if n := clk.Pending(); n > 1 {
					t.Fatalf("op %d: %d timers pending, want at most 1", i, n)
				}
				h.mu.Lock()
				queued := len(h.queue)
				h.mu.Unlock()
				if queued > 0 && clk.Pending() != 1 {
					t.Fatalf("op %d: %d streams queued and no timer pending", i, queued)
				}
			}
			select {
			case s := <-fired:
				t.Fatalf("%s fired, not expected", names[s])
			default:
			}
		})
	}
}

// receiveFired waits (bounded) for n fired streams and returns their names, sorted.
func receiveFired(t *testing.T, fired <-chan *Stream, n int, names map[*Stream]string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := []string{}
	for len(got) < n {
		select {
		case s := <-fired:
			got = append(got, names[s])
		case <-ctx.Done():
			t.Fatalf("fired %v, want %d streams", got, n)
		}
	}
	slices.Sort(got)
	return got
}

// After close, nothing is queued, no timer is pending and add does nothing.
func TestHedgeSchedulerClose(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	h := &Scheduler{clock: clk, fire: func(*Stream) { t.Error("fired after close") }}
	a, b := &Stream{}, &Stream{}
	h.add(a, time.Second)
	h.close()
	h.add(b, time.Millisecond)
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d timers pending after close", n)
	}
	if a.schedPos != 0 || b.schedPos != 0 || len(h.queue) != 0 {
		t.Errorf("queued after close: a at %d, b at %d, queue %d", a.schedPos, b.schedPos, len(h.queue))
	}
	clk.Advance(time.Hour)
	h.remove(a) // harmless
}
