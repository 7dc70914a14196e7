package cooldown

import (
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A RetryInfo delay is the cooldown's length; its end is told once; an overload during a
// cooldown is no repeat but a longer RetryInfo extends it; a replaced timer does nothing;
// after Close nothing starts or ends.
func TestSetCoolsAndEnds(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	var mu sync.Mutex
	var ended []time.Duration
	c := New(clk, func(e string, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if e != "a" {
			t.Errorf("ended %q", e)
		}
		ended = append(ended, d)
	})
	if c.Cooling("a") || c.Active() != 0 {
		t.Fatal("cooling before any overload")
	}
	if started, d, r := c.Note("a", 3*time.Second, true); !started || d != 3*time.Second || r != 1 {
		t.Fatalf("Note = %v, %v, %d", started, d, r)
	}
	if started, _, _ := c.Note("a", time.Second, true); started {
		t.Fatal("an overload during a cooldown started another")
	}
	clk.Advance(time.Second)
	c.Note("a", 4*time.Second, true) // extends to +5s from the start
	clk.Advance(2500 * time.Millisecond)
	if !c.Cooling("a") {
		t.Fatal("the first timer (replaced) ended the extended cooldown")
	}
	clk.Advance(1600 * time.Millisecond)
	mu.Lock()
	got := append([]time.Duration(nil), ended...)
	mu.Unlock()
	if c.Cooling("a") || c.Active() != 0 || len(got) != 1 || got[0] != 4*time.Second {
		t.Fatalf("after the extension: cooling %v, ended %v", c.Cooling("a"), got)
	}
	st, ok := c.StatusOf("a")
	if !ok || st.Total != 1 || st.Repeats != 1 || !st.FromRetryInfo {
		t.Fatalf("StatusOf = %+v, %v", st, ok)
	}
	// Without RetryInfo: a drawn length, doubled at the repeat, capped.
	started, d, r := c.Note("a", 0, false)
	if !started || r != 2 || d < 2*Min || d >= 2*Max {
		t.Fatalf("second cooldown: %v, %v, repeat %d; want [%v, %v)", started, d, r, 2*Min, 2*Max)
	}
	if _, d, _ := c.Note("b", time.Hour, true); d != Cap {
		t.Fatalf("an hour's RetryInfo: %v, want %v", d, Cap)
	}
	c.Close()
	clk.Advance(Cap)
	if started, _, _ := c.Note("c", time.Second, true); started {
		t.Fatal("a cooldown started after Close")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ended) != 1 {
		t.Fatalf("ends told after Close: %v", ended)
	}
	var none *Set
	if none.Cooling("a") || none.Active() != 0 {
		t.Fatal("a nil Set cools")
	}
}

// An overload is shared when another endpoint had one within SharedWindow; it stays shared
// while overloads come less than SharedWindow apart, for at most ShareHold after the last
// confirmation by another endpoint; EndAll ends the cooldowns in progress, telling ended.
func TestSharedOverload(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	var ended []string
	c := New(clk, func(ep string, _ time.Duration) { ended = append(ended, ep) })
	defer c.Close()
	if c.Shared("e1") {
		t.Fatal("the first overload of all is shared")
	}
	c.Note("e1", time.Second, true)
	clk.Advance(500 * time.Millisecond)
	if !c.Shared("e2") {
		t.Fatal("e2's overload 500ms after e1's is not shared")
	}
	c.EndAll()
	if len(ended) != 1 || ended[0] != "e1" || c.Cooling("e1") || c.Active() != 0 {
		t.Fatalf("after EndAll: ended %v, e1 cooling %v", ended, c.Cooling("e1"))
	}
	// e1 alone, every second: still shared until ShareHold after the last confirmation by
	// another endpoint (e1's at 1.5s, the last within SharedWindow of e2's at 0.5s).
	for i := range 9 {
		clk.Advance(time.Second)
		if !c.Shared("e1") {
			t.Fatalf("e1's overload %ds after the confirmation is not shared", i+1)
		}
	}
	clk.Advance(2 * time.Second) // 11.5s: 10s after the last confirmation: tested anew
	if c.Shared("e1") {
		t.Fatal("still shared at ShareHold without a confirmation")
	}
	// A gap longer than SharedWindow ends it too.
	clk.Advance(time.Second)
	if !c.Shared("e2") {
		t.Fatal("e2's overload a second after e1's is not shared")
	}
	clk.Advance(SharedWindow + time.Second)
	if c.Shared("e2") {
		t.Fatal("shared after a quiet SharedWindow, with no other endpoint's overload")
	}
	var none *Set
	if none.Shared("e1") {
		t.Fatal("a nil Set judges shared")
	}
	none.EndAll()
}

// A cooldown hears answers from other endpoints, never from its own; it is confirmed only by
// one of the endpoints asked about; an answer is recorded once, and once every cooldown has
// it, it takes no lock; a new cooldown starts having heard none; after its end nothing is
// confirmed.
func TestSetConfirmedByTheEndpointsThatAnswered(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	c := New(clk, nil)
	defer c.Close()
	if got := c.Served("b"); got != nil || c.ConfirmedBy("a", []string{"b"}) {
		t.Fatalf("before any overload: Served = %v", got)
	}
	c.Note("a", 3*time.Second, true)
	c.Note("c", 3*time.Second, true)
	if got := c.Served("a"); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("a's answer reached %v, want [c] (not a's own cooldown)", got)
	}
	if c.ConfirmedBy("a", []string{"a", "b"}) || !c.ConfirmedBy("c", []string{"a"}) || c.ConfirmedBy("c", []string{"b"}) {
		t.Fatal("after a's answer: a confirmed by itself, or c not by a, or c by b")
	}
	if got := c.Served("b"); len(got) != 2 {
		t.Fatalf("b's answer reached %v, want a and c", got)
	}
	if !c.ConfirmedBy("a", []string{"d", "b"}) || c.ConfirmedBy("a", []string{"d"}) || c.ConfirmedBy("a", nil) {
		t.Fatal("a's cooldown: want confirmed by b only")
	}
	if st, _ := c.StatusOf("a"); !slices.Equal(st.AnsweredBy, []string{"b"}) {
		t.Fatalf("StatusOf(a) = %+v, want answered by b", st)
	}
	if got := c.Served("b"); got != nil {
		t.Fatalf("a second answer of b reached %v again", got)
	}
	if h := c.heard.Load(); h == nil || len(*h) != 2 {
		t.Fatalf("heard %v, want a and b (no lock for their next answers)", h)
	}
	// A new cooldown has heard none: b's next answer reaches it.
	clk.Advance(time.Second)
	c.Note("d", 3*time.Second, true)
	if got := c.Served("b"); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("b's answer after d's cooldown began reached %v, want [d]", got)
	}
	clk.Advance(3 * time.Second)
	if c.ConfirmedBy("a", []string{"b"}) || c.Active() != 0 {
		t.Fatal("confirmed after the cooldown's end")
	}
	if st, _ := c.StatusOf("a"); st.AnsweredBy != nil {
		t.Fatalf("StatusOf(a) after its end = %+v, want none", st)
	}
	if got := c.Served("b"); got != nil {
		t.Fatalf("an answer with nothing cooling reached %v", got)
	}
	// A cooldown started again hears anew.
	c.Note("a", 3*time.Second, true)
	if c.ConfirmedBy("a", []string{"b"}) {
		t.Fatal("a new cooldown kept the last one's answers")
	}
}
