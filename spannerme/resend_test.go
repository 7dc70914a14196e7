package spannerme

// Resend at once (internal/steer) through the Spanner client: which of its requests are resent,
// that a stream that delivered a message never is, and that read-write work is untouched.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// failAfterFirstMessage is a frontend's server interceptor: while on is set, a streaming
// query or read that delivered at least one message and would end well ends with
// UNAVAILABLE instead, once per call of arm.
type failAfterFirstMessage struct {
	armed  atomic.Int32
	failed atomic.Int32
}

type countingServerStream struct {
	grpc.ServerStream
	sent atomic.Int32
}

func (s *countingServerStream) SendMsg(m any) error {
	s.sent.Add(1)
	return s.ServerStream.SendMsg(m)
}

func (f *failAfterFirstMessage) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !hedge.Method(info.FullMethod) {
		return handler(srv, ss)
	}
	cs := &countingServerStream{ServerStream: ss}
	err := handler(srv, cs)
	if err == nil && cs.sent.Load() > 0 && f.armed.Add(-1) >= 0 {
		f.failed.Add(1)
		return status.Error(codes.Unavailable, "spannerme test: UNAVAILABLE after the first message")
	}
	return err
}

// A streaming read whose stream delivered a message and then failed with UNAVAILABLE is
// never resent: the Spanner client sees the failure and retries it itself (its attempt 2,
// steered to E2 by retry elsewhere), and the failed attempt reached E1 alone.
func TestResendNeverAfterAMessage(t *testing.T) {
	addr, db := startSeededSpannertest(t)
	f := &failAfterFirstMessage{}
	b := &frontendBackend{addr: addr, database: db}
	b.fes = append(b.fes,
		spannermetest.NewFrontendTB(t, addr, spannermetest.WithAttemptRecording(10_000), spannermetest.WithServerOptions(grpc.StreamInterceptor(f.intercept))),
		spannermetest.NewFrontendTB(t, addr, spannermetest.WithAttemptRecording(10_000)))
	e1, e2 := b.fes[0], b.fes[1]
	client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(10*time.Second, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	waitConnected(t, gme, e2.Addr())
	before := gme.Status().Retries
	e1.ResetStats()
	e2.ResetStats()
	const reads = 5
	f.armed.Store(reads)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range reads {
		if _, err := client.Single().ReadRow(ctx, "Accounts", spanner.Key{fmt.Sprintf("acct-%04d", 1+i)}, []string{"Balance"}); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	if n := f.failed.Load(); n != reads {
		t.Fatalf("%d streams failed after their first message, want %d: the test exercised nothing", n, reads)
	}
	after := gme.Status().Retries
	if n := after.Resent - before.Resent; n != 0 {
		t.Errorf("Status.Retries.Resent grew by %d, want 0: a stream that delivered a message was resent", n)
	}
	ids := map[string][]string{}
	for _, fe := range b.fes {
		for _, a := range fe.Attempts() {
			if a.Method == methodRead {
				ids[a.RequestID] = append(ids[a.RequestID], a.Frontend+" "+a.Code.String())
			}
		}
	}
	// The frontend records E1's attempts as OK: the interceptor fails them after it.
	onE1 := 0
	for id, at := range ids {
		if len(at) != 1 {
			t.Errorf("attempt %s reached the frontends %d times (%v), want once", id, len(at), at)
		}
		if strings.HasPrefix(at[0], e1.Addr()+" ") {
			onE1++
			key, n := attemptNumber(id)
			if next := ids[fmt.Sprintf("%s.%d", key, n+1)]; len(next) != 1 || !strings.HasPrefix(next[0], e2.Addr()+" ") {
				t.Errorf("attempt %s failed on E1 after a message; the client's next attempt: %v, want one on E2", id, next)
			}
		}
	}
	if onE1 != reads {
		t.Errorf("%d reads reached E1, want the %d that failed there after a message: %v", onE1, reads, ids)
	}
}

// A workload of read-write transactions, DML and mutations sends exactly the same requests
// with resending on as off (no fault: the same calls to E1, none to E2); and with E1 failing
// a fifth of its calls with UNAVAILABLE and resending on, no write is resent: no attempt (its
// request ID, attempt number included) reaches the frontends twice, and Status.Retries.Resent
// stays 0.
func TestResendLeavesWritesAlone(t *testing.T) {
	workload := func(t *testing.T, r *hedgeRig, tolerate bool) []capturedCall {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r.log.take()
		for i := range 5 {
			_, err := r.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				it := tx.Query(ctx, spanner.Statement{SQL: "SELECT Balance FROM Accounts WHERE AccountId = 'acct-0001'"})
				if err := it.Do(func(*spanner.Row) error { return nil }); err != nil {
					return err
				}
				if _, err := tx.Update(ctx, spanner.Statement{SQL: "UPDATE Accounts SET Balance = Balance + 1 WHERE AccountId = 'acct-0001'"}); err != nil {
					return err
				}
				return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("Orders",
					[]string{"OrderId", "AccountId", "Amount"}, []any{fmt.Sprintf("rw-%d", i), "acct-0001", int64(i)})})
			})
			if err != nil && !tolerate {
				t.Fatal(err)
			}
			if _, err := r.client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("Orders",
				[]string{"OrderId", "AccountId", "Amount"}, []any{fmt.Sprintf("ap-%d", i), "acct-0001", int64(i)})}); err != nil && !tolerate {
				t.Fatal(err)
			}
		}
		return r.log.take()
	}
	t.Run("no fault: on as off", func(t *testing.T) {
		off := newHedgeRig(t, nil)
		off.gme.steering.Resend = nil // set before any stream: nothing reads it yet
		a := workload(t, off, false)
		on := newHedgeRig(t, nil)
		b := workload(t, on, false)
		if x, y := requestShapes(a), requestShapes(b); !slices.Equal(x, y) {
			t.Errorf("requests with resending on:\n%v\nwant those with resending off:\n%v", y, x)
		}
		if n := on.e2.Stats().Received; n != 0 {
			t.Errorf("E2 received %d calls, want none", n)
		}
	})
	t.Run("E1 failing: nothing resent", func(t *testing.T) {
		r := newHedgeRig(t, nil)
		before := r.gme.Status().Retries
		if err := r.e1.FailFraction(0.2, codes.Unavailable); err != nil {
			t.Fatal(err)
		}
		calls := workload(t, r, true)
		r.e1.Pass()
		if n := r.gme.Status().Retries.Resent - before.Resent; n != 0 {
			t.Errorf("Status.Retries.Resent grew by %d during read-write work, want 0", n)
		}
		seen := map[string]string{}
		for _, c := range calls {
			id := firstOf(c.md.Get(spannermetest.RequestIDHeader))
			if id == "" {
				continue
			}
			if m, dup := seen[id]; dup {
				t.Errorf("attempt %s sent twice (%s, then %s)", id, m, c.method)
			}
			seen[id] = c.method
		}
		failed := int64(0)
		for _, m := range r.e1.Stats().Methods {
			failed += m.Failed
		}
		if failed == 0 {
			t.Fatal("E1 failed no call: the test exercised nothing")
		}
		t.Logf("read-write work with E1 failing 20%% UNAVAILABLE: %d calls, %d failed on E1, none resent", len(calls), failed)
	})
}

// firstOf returns the first of v, "" for none.
func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
