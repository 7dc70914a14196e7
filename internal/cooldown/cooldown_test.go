package cooldown

import (
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

// A cooldown is confirmed by another endpoint's answer, never by its own endpoint's; a
// confirmation is reported once; a new cooldown starts unconfirmed; a cooldown that ends
// (its time, EndAll) unconfirmed leaves nothing to confirm, so an answer takes no lock.
func TestSetConfirmedByAnotherEndpointsAnswer(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	c := New(clk, nil)
	defer c.Close()
	if got := c.Served("b"); got != nil || c.Confirmed("a") {
		t.Fatalf("before any overload: Served = %v, Confirmed = %v", got, c.Confirmed("a"))
	}
	c.Note("a", 3*time.Second, true)
	c.Note("c", 3*time.Second, true)
	if got := c.Served("a"); len(got) != 1 || got[0] != "c" {
		t.Fatalf("a's answer confirmed %v, want [c] (not a's own cooldown)", got)
	}
	if c.Confirmed("a") || !c.Confirmed("c") || !c.Cooling("a") {
		t.Fatalf("after a's answer: Confirmed a %v, c %v; Cooling a %v", c.Confirmed("a"), c.Confirmed("c"), c.Cooling("a"))
	}
	if st, _ := c.StatusOf("a"); st.Confirmed {
		t.Fatalf("StatusOf(a) = %+v, want unconfirmed", st)
	}
	if got := c.Served("b"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("b's answer confirmed %v, want [a]", got)
	}
	if st, _ := c.StatusOf("a"); !st.Confirmed || !c.Confirmed("a") {
		t.Fatalf("StatusOf(a) = %+v, want confirmed", st)
	}
	if got := c.Served("b"); got != nil || c.unconfirmed.Load() != 0 {
		t.Fatalf("a second answer confirmed %v again; %d unconfirmed", got, c.unconfirmed.Load())
	}
	clk.Advance(3 * time.Second)
	if c.Confirmed("a") || c.Active() != 0 {
		t.Fatal("confirmed after the cooldown's end")
	}
	if st, _ := c.StatusOf("a"); st.Confirmed {
		t.Fatalf("StatusOf(a) after its end = %+v, want unconfirmed", st)
	}
	// A new cooldown starts unconfirmed, and one that ends unconfirmed leaves no count.
	c.Note("a", 3*time.Second, true)
	if c.Confirmed("a") || c.unconfirmed.Load() != 1 {
		t.Fatalf("a new cooldown: Confirmed %v, %d unconfirmed", c.Confirmed("a"), c.unconfirmed.Load())
	}
	c.EndAll()
	if c.unconfirmed.Load() != 0 || c.Served("b") != nil {
		t.Fatalf("after EndAll: %d unconfirmed", c.unconfirmed.Load())
	}
	c.Note("a", 3*time.Second, true)
	clk.Advance(3 * time.Second)
	if c.unconfirmed.Load() != 0 {
		t.Fatalf("after a cooldown ended unconfirmed: %d unconfirmed", c.unconfirmed.Load())
	}
}
