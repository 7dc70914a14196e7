package spannerme

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// requestShape is one kind of work the Spanner client does, and what may be done to each
// request it sends for it: hedge (internal/hedge) and resend at once after a failure before any
// message (internal/steer). A map gives the verdict per method; every captured call of a
// method not listed must get false, and every method listed must have been seen.
type requestShape struct {
	name         string
	emulatorOnly bool // spannertest has neither batch DML nor partitioned queries
	run          func(ctx context.Context, c *spanner.Client) error
	hedge        map[string]bool
	resend       map[string]bool
}

// drainRows reads it to its end.
func drainRows(it *spanner.RowIterator) error {
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

var (
	shapeQuery  = spanner.Statement{SQL: "SELECT AccountId, Balance FROM Accounts"}
	shapeUpdate = spanner.Statement{SQL: "UPDATE Accounts SET Balance = Balance WHERE AccountId = 'none'"}
	shapeCols   = []string{"AccountId", "Balance"}
)

// both is the same verdict for hedging and resending.
func both(m map[string]bool) (map[string]bool, map[string]bool) { return m, m }

// clientWork is the kinds of work of the table, from single-use reads to partitioned DML.
func clientWork() []requestShape {
	shape := func(name string, emulatorOnly bool, run func(context.Context, *spanner.Client) error, hedge, resend map[string]bool) requestShape {
		return requestShape{name, emulatorOnly, run, hedge, resend}
	}
	queryAndRead := func(ctx context.Context, tx interface {
		Query(context.Context, spanner.Statement) *spanner.RowIterator
		Read(context.Context, string, spanner.KeySet, []string) *spanner.RowIterator
	}) error {
		if err := drainRows(tx.Query(ctx, shapeQuery)); err != nil {
			return err
		}
		return drainRows(tx.Read(ctx, "Accounts", spanner.AllKeys(), shapeCols))
	}
	h, r := both(map[string]bool{spannerreq.MethodExecuteStreamingSQL: true})
	out := []requestShape{shape("single-use query", false, func(ctx context.Context, c *spanner.Client) error {
		return drainRows(c.Single().Query(ctx, shapeQuery))
	}, h, r)}
	h, r = both(map[string]bool{spannerreq.MethodStreamingRead: true})
	out = append(out, shape("single-use read", false, func(ctx context.Context, c *spanner.Client) error {
		return drainRows(c.Single().Read(ctx, "Accounts", spanner.AllKeys(), shapeCols))
	}, h, r), shape("single-use point read", false, func(ctx context.Context, c *spanner.Client) error {
		_, err := c.Single().ReadRow(ctx, "Accounts", spanner.Key{"acct-0001"}, shapeCols)
		return err
	}, h, r))
	h, r = both(map[string]bool{spannerreq.MethodExecuteStreamingSQL: true})
	out = append(out, shape("single-use stale query", false, func(ctx context.Context, c *spanner.Client) error {
		return drainRows(c.Single().WithTimestampBound(spanner.ExactStaleness(time.Second)).Query(ctx, shapeQuery))
	}, h, r))
	h, r = both(map[string]bool{spannerreq.MethodExecuteStreamingSQL: true, spannerreq.MethodStreamingRead: true})
	out = append(out, shape("read-only transaction", false, func(ctx context.Context, c *spanner.Client) error {
		tx := c.ReadOnlyTransaction()
		defer tx.Close()
		return queryAndRead(ctx, tx)
	}, h, r))
	out = append(out, shape("read-only transaction begun inline", false, func(ctx context.Context, c *spanner.Client) error {
		tx := c.ReadOnlyTransaction().WithBeginTransactionOption(spanner.InlinedBeginTransaction)
		defer tx.Close()
		return queryAndRead(ctx, tx)
	},
		// Hedging: the begin is not hedged; the read by ID is (its ID learnt from the begin's
		// first message).
		map[string]bool{spannerreq.MethodExecuteStreamingSQL: false, spannerreq.MethodStreamingRead: true},
		// Resending, in a group that does not hedge: the begin is resent; the read by ID is
		// not (only hedging reads a stream's first message for the transaction's ID).
		map[string]bool{spannerreq.MethodExecuteStreamingSQL: true, spannerreq.MethodStreamingRead: false}))
	h, r = both(map[string]bool{spannerreq.MethodExecuteStreamingSQL: false, spannerreq.MethodStreamingRead: false})
	out = append(out, shape("read-write transaction query and read", false, func(ctx context.Context, c *spanner.Client) error {
		_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return queryAndRead(ctx, tx) })
		return err
	}, h, r))
	h, r = both(map[string]bool{spannerreq.MethodExecuteSQL: false})
	out = append(out, shape("DML", false, func(ctx context.Context, c *spanner.Client) error {
		_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.Update(ctx, shapeUpdate)
			return err
		})
		return err
	}, h, r), shape("partitioned DML", false, func(ctx context.Context, c *spanner.Client) error {
		_, err := c.PartitionedUpdate(ctx, shapeUpdate)
		return err
	}, h, r))
	h, r = both(map[string]bool{spannerreq.Service + "Commit": false})
	out = append(out, shape("mutations", false, func(ctx context.Context, c *spanner.Client) error {
		_, err := c.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("Orders",
			[]string{"OrderId", "AccountId", "Amount"}, []any{"shape-order", "acct-0001", int64(1)})})
		return err
	}, h, r))
	h, r = both(map[string]bool{spannerreq.MethodExecuteStreamingSQL: false})
	out = append(out, shape("rolled back read-write transaction", false, func(ctx context.Context, c *spanner.Client) error {
		tx, err := spanner.NewReadWriteStmtBasedTransaction(ctx, c)
		if err != nil {
			return err
		}
		if err := drainRows(tx.Query(ctx, shapeQuery)); err != nil {
			return err
		}
		tx.Rollback(ctx)
		return nil
	}, h, r))
	h, r = both(map[string]bool{spannerreq.Service + "ExecuteBatchDml": false})
	out = append(out, shape("batch DML", true, func(ctx context.Context, c *spanner.Client) error {
		_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.BatchUpdate(ctx, []spanner.Statement{shapeUpdate})
			return err
		})
		return err
	}, h, r))
	h, r = both(map[string]bool{spannerreq.MethodExecuteStreamingSQL: false, spannerreq.Service + "PartitionQuery": false})
	out = append(out, shape("partitioned query (batch read-only transaction)", true, func(ctx context.Context, c *spanner.Client) error {
		tx, err := c.BatchReadOnlyTransaction(ctx, spanner.StrongRead())
		if err != nil {
			return err
		}
		defer tx.Close()
		parts, err := tx.PartitionQuery(ctx, shapeQuery, spanner.PartitionOptions{})
		if err != nil {
			return err
		}
		for _, p := range parts {
			if err := drainRows(tx.Execute(ctx, p)); err != nil {
				return err
			}
		}
		return nil
	}, h, r))
	return out
}

// The Spanner client's own requests, recorded at the pools while it runs each kind of
// work, decide the table of what may be hedged and what may be resent at once after a
// failure before any message: the streaming queries and reads of single-use and read-only
// transactions (the inline begin of a read-only transaction is resent but not hedged), and
// nothing of read-write transactions, DML, partitioned DML, batch DML, partitioned queries,
// mutations, Commit, Rollback or BeginTransaction. Hedging is judged in a group that hedges
// (never firing: the IDs of read-only transactions begun inline are learnt from the
// streams' first messages), resending in one that does not (hedged streams are never
// resent). Shapes that spannertest cannot serve run on the emulator; a few are added by hand.
func TestRequestShapesOfTheSpannerClient(t *testing.T) {
	hedging := &HedgingSettings{Delay: time.Hour}
	judge := map[string]func(r *hedgeRig, ctx context.Context, c capturedCall) bool{
		"hedge": func(r *hedgeRig, ctx context.Context, c capturedCall) bool {
			return c.stream && hedge.StreamMethod(c.method, &c.desc) && r.gme.roTxns.Hedgeable(ctx, c.req)
		},
		"resend": func(r *hedgeRig, ctx context.Context, c capturedCall) bool {
			// What pool.Stream asks the hook about: a server-streaming (only) stream's request.
			return c.stream && c.desc.ServerStreams && !c.desc.ClientStreams && r.gme.steering.Resendable(ctx, c.req)
		},
	}
	t.Run("spannertest", func(t *testing.T) {
		shapeTable(t, newHedgeRig(t, hedging), false, "hedge", judge["hedge"])
		shapeTable(t, newHedgeRig(t, nil), false, "resend", judge["resend"])
	})
	t.Run("emulator", func(t *testing.T) {
		addr, db := startSeededEmulator(t)
		shapeTable(t, newHedgeRigOn(t, addr, db, hedging), true, "hedge", judge["hedge"])
		shapeTable(t, newHedgeRigOn(t, addr, db, nil), true, "resend", judge["resend"])
	})
	t.Run("by hand", func(t *testing.T) {
		r := newHedgeRig(t, nil)
		ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
		rw := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}
		singleUse := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: ro}}
		beginRO := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: ro}}
		beginRW := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: rw}}
		bg := context.Background()
		leader := metadata.NewOutgoingContext(bg, metadata.Pairs(spannerreq.RouteToLeaderHeader, "true"))
		for _, c := range []struct {
			name          string
			ctx           context.Context
			req           any
			hedge, resend bool
		}{
			{"partitioned query", bg, &spannerpb.ExecuteSqlRequest{Transaction: singleUse, PartitionToken: []byte("p")}, false, false},
			{"partitioned read", bg, &spannerpb.ReadRequest{Transaction: singleUse, PartitionToken: []byte("p")}, false, false},
			{"partitioned query beginning read-only", bg, &spannerpb.ExecuteSqlRequest{Transaction: beginRO, PartitionToken: []byte("p")}, false, false},
			{"single-use query with route-to-leader", leader, &spannerpb.ExecuteSqlRequest{Transaction: singleUse}, false, false},
			{"read-only inline begin with route-to-leader", leader, &spannerpb.ReadRequest{Transaction: beginRO}, false, false},
			{"read-only inline begin", bg, &spannerpb.ReadRequest{Transaction: beginRO}, false, true},
			{"read-write inline begin", bg, &spannerpb.ExecuteSqlRequest{Transaction: beginRW}, false, false},
			{"single-use read-write (invalid, never sent)", bg, &spannerpb.ExecuteSqlRequest{Transaction: &spannerpb.TransactionSelector{
				Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: rw}}}, false, false},
			{"query naming an unknown transaction", bg, &spannerpb.ExecuteSqlRequest{
				Transaction: &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: []byte("unseen")}}}, false, false},
			{"no selector (temporary read-only)", bg, &spannerpb.ExecuteSqlRequest{}, true, true},
			{"nil query", bg, (*spannerpb.ExecuteSqlRequest)(nil), false, false},
			{"commit", bg, &spannerpb.CommitRequest{}, false, false},
			{"batch DML", bg, &spannerpb.ExecuteBatchDmlRequest{}, false, false},
			{"batch write", bg, &spannerpb.BatchWriteRequest{}, false, false},
		} {
			if got := r.gme.roTxns.Hedgeable(c.ctx, c.req); got != c.hedge {
				t.Errorf("%s: hedgeable = %v, want %v", c.name, got, c.hedge)
			}
			if got := r.gme.steering.Resendable(c.ctx, c.req); got != c.resend {
				t.Errorf("%s: resendable = %v, want %v", c.name, got, c.resend)
			}
		}
	})
}

// shapeTable runs each request shape through r's Spanner client and checks what judge says
// of each request it sent against the shape's column (hedge or resend); emulatorOnly shapes
// run when full is set.
func shapeTable(t *testing.T, r *hedgeRig, full bool, column string, judge func(*hedgeRig, context.Context, capturedCall) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var table []string
	for _, sh := range clientWork() {
		if sh.emulatorOnly && !full {
			continue
		}
		want := sh.hedge
		if column == "resend" {
			want = sh.resend
		}
		r.log.take()
		if err := sh.run(ctx, r.client); err != nil {
			if status.Code(err) == codes.Unimplemented {
				t.Logf("%s: the backend cannot serve it: %v", sh.name, err)
				continue
			}
			t.Fatalf("%s: %v", sh.name, err)
		}
		seen := map[string]bool{}
		for _, c := range r.log.take() {
			got := judge(r, metadata.NewOutgoingContext(context.Background(), c.md), c)
			name := strings.TrimPrefix(c.method, spannerreq.Service)
			table = append(table, fmt.Sprintf("%-48s %-20s %s=%v", sh.name, name, column, got))
			w, listed := want[c.method]
			if listed {
				seen[c.method] = true
			}
			if got != (listed && w) {
				t.Errorf("%s: %s (%v) %s = %v, want %v", sh.name, name, c.req, column, got, listed && w)
			}
		}
		for m := range want {
			if !seen[m] {
				t.Errorf("%s: the Spanner client sent no %s", sh.name, m)
			}
		}
	}
	t.Logf("requests the Spanner client sent, and %s:\n%s", column, strings.Join(table, "\n"))
}
