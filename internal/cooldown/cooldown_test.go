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
