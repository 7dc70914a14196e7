package spannerme

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/retry"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// attemptCall makes one unary call of group g as the Spanner client's front does, with the
// request ID of attempt n of request req.
func attemptCall(gme *GCPMultiEndpoint, g string, req, n int) error {
	id := fmt.Sprintf("1.feedbeef.1.1.%d.%d", req, n)
	ctx, cancel := context.WithTimeout(spannerreq.WithHeader(NewMEContext(context.Background(), g), id), 5*time.Second)
	defer cancel()
	return gme.invoke(ctx, "/grpc.testing.TestService/UnaryCall", &testpb.SimpleRequest{}, &testpb.SimpleResponse{}, id, nil)
}

// attemptsServedBy returns the frontend (by address) that received each attempt, by request ID,
// from the frontends' records.
func attemptsServedBy(fes ...*spannermetest.Frontend) map[string]string {
	out := map[string]string{}
	for _, fe := range fes {
		for _, a := range fe.Attempts() {
			out[a.RequestID] = a.Frontend
		}
	}
	return out
}

// An attempt after the first of a request whose previous attempt failed on E1 with a code
// the Spanner client retries goes to E2; a first attempt, a retry after a code the client
// does not retry (or a RESOURCE_EXHAUSTED without RetryInfo: the query's, internal/steer
// NoteOverload), and a retry with no other endpoint available stay on E1.
func TestRetryElsewhere_Steers(t *testing.T) {
	e1, e2 := twoFrontends(t)
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g":    group(time.Hour, time.Second, e1.Addr(), e2.Addr()),
		"solo": group(time.Hour, time.Second, e1.Addr()),
	}), fastSettings(nil))
	waitConnected(t, gme, e1.Addr())
	waitConnected(t, gme, e2.Addr())
	eventually(t, 5*time.Second, "E1 current", func() bool { return groupOf(gme, "g").Current == e1.Addr() })
	eventually(t, 5*time.Second, "E2 usable", func() bool { return verdictIn(gme, "g", e2.Addr()) == "usable" })

	for _, tc := range []struct {
		name  string
		group string
		code  codes.Code
		delay time.Duration // the RetryInfo of E1's error; 0: none
		want  string        // the frontend of attempt 2
	}{
		{"UNAVAILABLE: retried elsewhere", "g", codes.Unavailable, 0, e2.Addr()},
		{"RESOURCE_EXHAUSTED with RetryInfo: retried elsewhere", "g", codes.ResourceExhausted, time.Second, e2.Addr()},
		{"RESOURCE_EXHAUSTED without RetryInfo: the query's, not steered", "g", codes.ResourceExhausted, 0, e1.Addr()},
		{"ABORTED: the client's retry is a new transaction, not steered", "g", codes.Aborted, 0, e1.Addr()},
		{"no other endpoint in the group", "solo", codes.Unavailable, 0, e1.Addr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := int(tc.code)*100 + len(tc.group) + int(tc.delay/time.Second)*10
			e1.SetRetryDelay(tc.delay)
			defer e1.SetRetryDelay(0)
			if err := e1.FailAll(tc.code); err != nil {
				t.Fatal(err)
			}
			if err := attemptCall(gme, tc.group, req, 1); status.Code(err) != tc.code {
				t.Fatalf("attempt 1: %v, want %v", err, tc.code)
			}
			e1.Pass()
			if err := attemptCall(gme, tc.group, req, 2); err != nil {
				t.Fatalf("attempt 2: %v", err)
			}
			got := attemptsServedBy(e1, e2)
			id := func(n int) string { return fmt.Sprintf("1.feedbeef.1.1.%d.%d", req, n) }
			if got[id(1)] != e1.Addr() || got[id(2)] != tc.want {
				t.Fatalf("attempt 1 served by %s, attempt 2 by %s; want %s then %s", got[id(1)], got[id(2)], e1.Addr(), tc.want)
			}
			endCooldown(gme, e1.Addr()) // RESOURCE_EXHAUSTED's, so that the next case starts afresh
		})
	}
	// A first attempt goes where the group sends it.
	if err := attemptCall(gme, "g", 999, 1); err != nil {
		t.Fatal(err)
	}
	if got := attemptsServedBy(e1, e2)["1.feedbeef.1.1.999.1"]; got != e1.Addr() {
		t.Fatalf("a first attempt was served by %s, want E1", got)
	}
	if st := gme.Status().Retries; st.Steered != 2 || st.Refused != 0 {
		t.Fatalf("Status.Retries = %+v, want 2 steered", st)
	}
}

// endCooldown ends endpoint's overload cooldown now, as its timer would.
func endCooldown(gme *GCPMultiEndpoint, endpoint string) { gme.steering.Cooldowns().EndNow(endpoint) }

// With the budget spent, a retry stays on the endpoint where its request failed, and is
// counted as refused.
func TestRetryElsewhere_BudgetRefuses(t *testing.T) {
	e1, e2 := twoFrontends(t)
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(time.Hour, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	waitConnected(t, gme, e1.Addr())
	waitConnected(t, gme, e2.Addr())
	eventually(t, 5*time.Second, "E2 usable", func() bool { return verdictIn(gme, "g", e2.Addr()) == "usable" })
	for range retry.MaxTokens {
		gme.steering.Budget().Failure()
	}
	if err := e1.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	_ = attemptCall(gme, "g", 1, 1)
	e1.Pass()
	if err := attemptCall(gme, "g", 1, 2); err != nil {
		t.Fatal(err)
	}
	if got := attemptsServedBy(e1, e2)["1.feedbeef.1.1.1.2"]; got != e1.Addr() {
		t.Fatalf("with the budget spent attempt 2 was served by %s, want E1", got)
	}
	if st := gme.Status().Retries; st.Steered != 0 || st.Refused != 1 || st.Tokens >= retry.MaxTokens/2 {
		t.Fatalf("Status.Retries = %+v, want 1 refused", st)
	}
}

// A retry that succeeds on E2 after its request failed on E1 counts, for E1's health, as the
// failure it would have met there again, once.
func TestRetryElsewhere_CountsForHealth(t *testing.T) {
	e1, e2 := twoFrontends(t)
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(time.Hour, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	waitConnected(t, gme, e1.Addr())
	waitConnected(t, gme, e2.Addr())
	eventually(t, 5*time.Second, "E2 usable", func() bool { return verdictIn(gme, "g", e2.Addr()) == "usable" })
	failures := func() int64 { p, _ := poolOf(gme, e1.Addr()); return p.Health.Failures }
	if err := e1.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	_ = attemptCall(gme, "g", 1, 1)
	if got := failures(); got != 1 {
		t.Fatalf("E1 failures after one failed attempt: %d", got)
	}
	if err := attemptCall(gme, "g", 1, 2); err != nil { // steered to E2, which serves it
		t.Fatal(err)
	}
	if got := failures(); got != 2 {
		t.Fatalf("E1 failures after the retry succeeded on E2: %d, want 2", got)
	}
	e1.Pass()
	if err := attemptCall(gme, "g", 1, 3); err != nil { // nothing remembered any more: on E1
		t.Fatal(err)
	}
	if got := failures(); got != 2 {
		t.Fatalf("E1 failures after a further success: %d, want 2", got)
	}
}

// A first attempt of a Spanner request costs no allocation in Steerer.Steer and Steerer.CallEnded (the call
// path's benchmarks keep their allocations; these are the parts a request ID reaches).
func TestRetryElsewhere_FirstAttemptAllocatesNothing(t *testing.T) {
	e1, e2 := twoFrontends(t)
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(time.Hour, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	waitConnected(t, gme, e1.Addr())
	s := gme.snap.Load()
	me, p := s.Group("g"), s.Pools[e1.Addr()]
	const id = "1.feedbeef.1.1.42.1"
	if n := testing.AllocsPerRun(1000, func() {
		if !p.Acquire() {
			t.Fatal("acquire")
		}
		q := gme.steering.Steer(p, me, id)
		gme.steering.CallEnded(q, id, 0, "/grpc.testing.TestService/UnaryCall", nil)
		q.Release()
	}); n != 0 {
		t.Fatalf("Steer and CallEnded of a first attempt allocate %v times", n)
	}
}
