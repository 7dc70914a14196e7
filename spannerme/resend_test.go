package spannerme

// Resend at once (resend.go) through the Spanner client: which of its requests are resent,
// that a stream that delivered a message never is, and that read-write work is untouched.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// The Spanner client's own requests, recorded at the pools while it runs each kind of
// transaction, decide the table: resendable are the streaming queries and reads of
// single-use and read-only transactions, the inline begin of a read-only transaction
// included, and nothing of read-write transactions, DML, partitioned DML, mutations,
// Commit, Rollback or BeginTransaction (unary calls are never resent).
func TestResendableRequestsOfTheSpannerClient(t *testing.T) {
	r := newHedgeRig(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	drain := func(it *spanner.RowIterator) error {
		defer it.Stop()
		for {
			if _, err := it.Next(); err != nil {
				if errors.Is(err, iterator.Done) {
					return nil
				}
				return err
			}
		}
	}
	query := spanner.Statement{SQL: "SELECT AccountId, Balance FROM Accounts"}
	cols := []string{"AccountId", "Balance"}
	update := spanner.Statement{SQL: "UPDATE Accounts SET Balance = Balance WHERE AccountId = 'none'"}
	shapes := []struct {
		name string
		run  func() error
		// want: resendable per method; every captured call of a method not listed must be
		// not resendable, and every method listed must have been seen.
		want map[string]bool
	}{
		{"single-use query", func() error { return drain(r.client.Single().Query(ctx, query)) },
			map[string]bool{spannerreq.MethodExecuteStreamingSQL: true}},
		{"single-use read", func() error { return drain(r.client.Single().Read(ctx, "Accounts", spanner.AllKeys(), cols)) },
			map[string]bool{spannerreq.MethodStreamingRead: true}},
		{"single-use point read", func() error {
			_, err := r.client.Single().ReadRow(ctx, "Accounts", spanner.Key{"acct-0001"}, cols)
			return err
		}, map[string]bool{spannerreq.MethodStreamingRead: true}},
		{"single-use stale query", func() error {
			return drain(r.client.Single().WithTimestampBound(spanner.ExactStaleness(time.Second)).Query(ctx, query))
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: true}},
		{"read-only transaction", func() error {
			tx := r.client.ReadOnlyTransaction()
			defer tx.Close()
			if err := drain(tx.Query(ctx, query)); err != nil {
				return err
			}
			return drain(tx.Read(ctx, "Accounts", spanner.AllKeys(), cols))
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: true, spannerreq.MethodStreamingRead: true}},
		{"read-only transaction begun inline", func() error {
			tx := r.client.ReadOnlyTransaction().WithBeginTransactionOption(spanner.InlinedBeginTransaction)
			defer tx.Close()
			if err := drain(tx.Query(ctx, query)); err != nil {
				return err
			}
			return drain(tx.Read(ctx, "Accounts", spanner.AllKeys(), cols))
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: true, // the begin
			// The read by ID: a group that does not hedge does not read a stream's first message
			// for the transaction's ID (hedge.go does), so the transaction is unknown here.
			spannerreq.MethodStreamingRead: false}},
		{"read-write transaction query and read", func() error {
			_, err := r.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				if err := drain(tx.Query(ctx, query)); err != nil {
					return err
				}
				return drain(tx.Read(ctx, "Accounts", spanner.AllKeys(), cols))
			})
			return err
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: false, spannerreq.MethodStreamingRead: false}},
		{"DML", func() error {
			_, err := r.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				_, err := tx.Update(ctx, update)
				return err
			})
			return err
		}, map[string]bool{spannerreq.MethodExecuteSQL: false}},
		{"mutations", func() error {
			_, err := r.client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("Orders",
				[]string{"OrderId", "AccountId", "Amount"}, []any{"resend-order", "acct-0001", int64(1)})})
			return err
		}, map[string]bool{spannerreq.Service + "Commit": false}},
		{"rolled back read-write transaction", func() error {
			tx, err := spanner.NewReadWriteStmtBasedTransaction(ctx, r.client)
			if err != nil {
				return err
			}
			if err := drain(tx.Query(ctx, query)); err != nil {
				return err
			}
			tx.Rollback(ctx)
			return nil
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: false}},
		{"partitioned DML", func() error {
			_, err := r.client.PartitionedUpdate(ctx, update)
			return err
		}, map[string]bool{spannerreq.MethodExecuteSQL: false}},
	}
	var table []string
	for _, sh := range shapes {
		r.log.take()
		if err := sh.run(); err != nil {
			if status.Code(err) == codes.Unimplemented {
				t.Logf("%s: spannertest cannot serve it: %v", sh.name, err)
				continue
			}
			t.Fatalf("%s: %v", sh.name, err)
		}
		seen := map[string]bool{}
		for _, c := range r.log.take() {
			ctx := metadata.NewOutgoingContext(context.Background(), c.md)
			// What pool.Stream asks the hook about: a server-streaming (only) stream's request.
			got := c.stream && c.desc.ServerStreams && !c.desc.ClientStreams && r.gme.resendable(ctx, c.req)
			name := strings.TrimPrefix(c.method, spannerreq.Service)
			table = append(table, fmt.Sprintf("%-40s %-20s resendable=%v", sh.name, name, got))
			want, listed := sh.want[c.method]
			if listed {
				seen[c.method] = true
			}
			if got != (listed && want) {
				t.Errorf("%s: %s (%v) resendable = %v, want %v", sh.name, name, c.req, got, listed && want)
			}
		}
		for m := range sh.want {
			if !seen[m] {
				t.Errorf("%s: the Spanner client sent no %s", sh.name, m)
			}
		}
	}
	t.Logf("requests the Spanner client sent, and whether they are resent at once after a failure before any message:\n%s", strings.Join(table, "\n"))

	// Shapes spannertest cannot serve, and the header: by hand.
	ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	rw := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}
	singleUse := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: ro}}
	beginRO := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: ro}}
	beginRW := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: rw}}
	leader := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(spannerreq.RouteToLeaderHeader, "true"))
	for _, c := range []struct {
		name string
		ctx  context.Context
		req  any
		want bool
	}{
		{"partitioned query", context.Background(), &spannerpb.ExecuteSqlRequest{Transaction: singleUse, PartitionToken: []byte("p")}, false},
		{"partitioned read", context.Background(), &spannerpb.ReadRequest{Transaction: singleUse, PartitionToken: []byte("p")}, false},
		{"partitioned query beginning read-only", context.Background(), &spannerpb.ExecuteSqlRequest{Transaction: beginRO, PartitionToken: []byte("p")}, false},
		{"single-use query with route-to-leader", leader, &spannerpb.ExecuteSqlRequest{Transaction: singleUse}, false},
		{"read-only inline begin with route-to-leader", leader, &spannerpb.ReadRequest{Transaction: beginRO}, false},
		{"read-only inline begin", context.Background(), &spannerpb.ReadRequest{Transaction: beginRO}, true},
		{"read-write inline begin", context.Background(), &spannerpb.ExecuteSqlRequest{Transaction: beginRW}, false},
		{"query naming an unknown transaction", context.Background(), &spannerpb.ExecuteSqlRequest{
			Transaction: &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: []byte("unseen")}}}, false},
		{"no selector (temporary read-only)", context.Background(), &spannerpb.ExecuteSqlRequest{}, true},
		{"nil query", context.Background(), (*spannerpb.ExecuteSqlRequest)(nil), false},
		{"commit", context.Background(), &spannerpb.CommitRequest{}, false},
		{"batch DML", context.Background(), &spannerpb.ExecuteBatchDmlRequest{}, false},
		{"batch write", context.Background(), &spannerpb.BatchWriteRequest{}, false},
	} {
		if got := r.gme.resendable(c.ctx, c.req); got != c.want {
			t.Errorf("%s: resendable = %v, want %v", c.name, got, c.want)
		}
	}
}

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
	if hedgeMethodIndex(info.FullMethod) < 0 {
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
		off.gme.resendHook = nil // set before any stream: nothing reads it yet
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
