package retry

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The retry budget (gRFC A6): failures everywhere empty it to half within MaxTokens/2
// failures, after which retries are not steered (counted as refused); successes refill it.
func TestBudget(t *testing.T) {
	var b Budget
	if !b.Allows() || b.Tokens() != MaxTokens {
		t.Fatalf("a new budget: %v tokens, allows %v", b.Tokens(), b.Allows())
	}
	n := 0
	for b.Allows() {
		b.Failure()
		n++
	}
	if n != MaxTokens/2 {
		t.Fatalf("the budget refused after %d failures, want %d", n, MaxTokens/2)
	}
	for range 2 * MaxTokens {
		b.Failure()
	}
	if b.Tokens() != 0 {
		t.Fatalf("tokens after many failures: %v, want 0", b.Tokens())
	}
	// Back above half after (maxTokens/2)/tokenRatio successes, and not before.
	need := int(MaxTokens / 2 / TokenRatio)
	for range need {
		b.Success()
	}
	if b.Allows() {
		t.Fatalf("allows after %d successes at %v tokens", need, b.Tokens())
	}
	b.Success()
	if !b.Allows() {
		t.Fatalf("refuses after %d successes at %v tokens", need+1, b.Tokens())
	}
	for range int(10 * MaxTokens / TokenRatio) {
		b.Success()
	}
	if b.Tokens() != MaxTokens {
		t.Fatalf("tokens after many successes: %v, want %d", b.Tokens(), MaxTokens)
	}
	if n := testing.AllocsPerRun(100, b.Success); n != 0 {
		t.Fatalf("a success allocates %v times", n)
	}
}

// The memory of failed attempts keeps the last MaxMemory requests.
func TestMemoryBounded(t *testing.T) {
	var r Memory
	for i := range MaxMemory + 10 {
		r.Record(fmt.Sprint(i), Failed{Endpoint: "E"})
	}
	if len(r.m) != MaxMemory {
		t.Fatalf("%d entries, want %d", len(r.m), MaxMemory)
	}
	if _, ok := r.FailedOn("0"); ok {
		t.Fatal("the oldest entry was kept")
	}
	if e, ok := r.FailedOn(fmt.Sprint(MaxMemory + 9)); !ok || e != "E" {
		t.Fatal("the newest entry was lost")
	}
	r.Record(fmt.Sprint(MaxMemory+9), Failed{Endpoint: "F"}) // an update is no new entry
	if e, _ := r.FailedOn(fmt.Sprint(MaxMemory + 9)); e != "F" || len(r.m) != MaxMemory {
		t.Fatalf("update: %q, %d entries", e, len(r.m))
	}
}
