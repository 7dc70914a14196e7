package retry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
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

// What the memory keeps of a failed attempt's error is bounded, whatever the server sent: an
// 8 MB message is cut to bounded.ServerText bytes, and the code, the RetryInfo and the
// message's start (internal/health classifies by them) are kept.
func TestMemoryKeepsErrorsBounded(t *testing.T) {
	big := "stream terminated by RST_STREAM with error code: INTERNAL_ERROR " + strings.Repeat("x", 8<<20)
	st, err := status.New(codes.Internal, big).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var r Memory
	r.Record("k", Failed{Endpoint: "E", Err: st.Err()})
	f, ok := r.Take("k")
	if !ok {
		t.Fatal("nothing remembered")
	}
	s, isStatus := status.FromError(f.Err)
	if !isStatus || s.Code() != codes.Internal || len(s.Details()) != 1 || !strings.HasPrefix(s.Message(), "stream terminated by RST_STREAM") {
		t.Fatalf("kept %v %q… with %d details, want INTERNAL, the message's start and the RetryInfo", s.Code(), s.Message()[:40], len(s.Details()))
	}
	if n := len(f.Err.Error()) + len(s.Message()); n > 2*(bounded.ServerText+len("…[cut: 8388716 bytes in all]")) {
		t.Fatalf("the kept error holds %d bytes of text", n)
	}
	if got := health.Classify(f.Err, false, false); got != health.Failure {
		t.Fatalf("the kept error classifies as %v, want %v as the server's", got, health.Failure)
	}
}
