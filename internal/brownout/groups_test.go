package brownout

import (
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// Groups keeps each group's verdicts apart, stamps the time Degraded changed, reports each
// change once (to the callback and in the result), forgets groups on Retain, and finds
// nothing when off.
func TestGroupsKeepVerdictsPerGroup(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	rule := Rule{Ratio: 4, Margin: 200 * time.Millisecond, Window: time.Second}
	b := NewGroups(true, rule)
	slow := []Sample{
		{Endpoint: "a", Latency: 20 * time.Millisecond, Known: true, Available: true},
		{Endpoint: "b", Latency: 400 * time.Millisecond, Known: true, Available: true},
	}
	var told []Change
	tell := func(c Change) { told = append(told, c) }
	if got := b.Evaluate("g", clk, slow, tell); len(got) != 0 {
		t.Fatalf("first evaluation: %v changed, want nothing before Window", got)
	}
	clk.Advance(time.Second)
	got := b.Evaluate("g", clk, slow, tell)
	if len(got) != 1 || got[0].Group != "g" || got[0].Endpoint != "b" || !got[0].Degraded || !got[0].At.Equal(clk.Now()) {
		t.Fatalf("after Window: %+v, want b degraded in g at %v", got, clk.Now())
	}
	if len(told) != 1 || told[0] != got[0] {
		t.Errorf("told %+v, want the change once", told)
	}
	if !b.Degraded("g", "b") || b.Degraded("g", "a") || b.Degraded("other", "b") {
		t.Error("Degraded: want b in g only")
	}
	st, ok := b.StatusOf("g", "b")
	if !ok || !st.Degraded || !st.Known || !st.Since.Equal(clk.Now()) || st.Fallback != "a" {
		t.Errorf("StatusOf(g, b) = %+v, %v", st, ok)
	}
	if set := b.DegradedSet(); !set["g"]["b"] || set["g"]["a"] {
		t.Errorf("DegradedSet = %v", set)
	}
	b.Retain(func(string) bool { return false })
	if b.Degraded("g", "b") {
		t.Error("a forgotten group is still degraded")
	}

	off := NewGroups(false, rule)
	clk.Advance(time.Second)
	if off.Evaluate("g", clk, slow, tell) != nil || off.Degraded("g", "b") || off.DegradedSet() != nil || off.On() {
		t.Error("off: something was evaluated")
	}
	var none *Groups
	if none.On() || none.Degraded("g", "b") {
		t.Error("nil Groups: something is degraded")
	}
}
