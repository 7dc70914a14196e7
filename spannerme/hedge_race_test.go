package spannerme

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
)

// rawHedgeRig is a hedgeRig with a session, for sending the Spanner API's requests as they
// are through the GCPMultiEndpoint.
type rawHedgeRig struct {
	*hedgeRig
	api     spannerpb.SpannerClient
	session string
}

func newRawHedgeRig(t *testing.T, h *HedgingSettings) *rawHedgeRig {
	t.Helper()
	r := &rawHedgeRig{hedgeRig: newHedgeRig(t, h)}
	r.api = spannerpb.NewSpannerClient(r.gme)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := r.api.CreateSession(ctx, &spannerpb.CreateSessionRequest{Database: fixtureDatabase(r)})
	if err != nil {
		t.Fatal(err)
	}
	r.session = s.Name
	r.e1.ResetStats()
	r.e2.ResetStats()
	return r
}

// fixtureDatabase is the rig's database: the one its Spanner client uses.
func fixtureDatabase(r *rawHedgeRig) string { return r.client.DatabaseName() }

var (
	roOptions = &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	singleUse = &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: roOptions}}
	beginRO   = &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: roOptions}}
)

func txnID(id []byte) *spannerpb.TransactionSelector {
	return &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: id}}
}

// query runs sql in sel and returns its first message's metadata and its rows' count.
func (r *rawHedgeRig) query(ctx context.Context, sql string, sel *spannerpb.TransactionSelector) (*spannerpb.ResultSetMetadata, int, error) {
	s, err := r.api.ExecuteStreamingSql(ctx, &spannerpb.ExecuteSqlRequest{Session: r.session, Sql: sql, Transaction: sel})
	if err != nil {
		return nil, 0, err
	}
	var md *spannerpb.ResultSetMetadata
	values := 0
	for {
		prs, err := s.Recv()
		if errors.Is(err, io.EOF) {
			if md == nil {
				return nil, 0, errors.New("no metadata")
			}
			return md, values / len(md.GetRowType().GetFields()), nil
		}
		if err != nil {
			return nil, 0, err
		}
		if md == nil {
			md = prs.GetMetadata()
		}
		values += len(prs.GetValues())
	}
}

// read reads every AccountId of Accounts in sel (sql is ignored), as query does.
func (r *rawHedgeRig) read(ctx context.Context, _ string, sel *spannerpb.TransactionSelector) (*spannerpb.ResultSetMetadata, int, error) {
	s, err := r.api.StreamingRead(ctx, &spannerpb.ReadRequest{Session: r.session, Table: "Accounts", Columns: []string{"AccountId"},
		KeySet: &spannerpb.KeySet{All: true}, Transaction: sel})
	if err != nil {
		return nil, 0, err
	}
	var md *spannerpb.ResultSetMetadata
	values := 0
	for {
		prs, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return md, values, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if md == nil {
			md = prs.GetMetadata()
		}
		values += len(prs.GetValues())
	}
}

func (r *rawHedgeRig) hedging(t *testing.T) HedgingStatus {
	t.Helper()
	h := groupOf(r.gme, "default").Hedging
	if h == nil {
		t.Fatal("the group's Status has no Hedging")
	}
	return *h
}

const countSQL = "SELECT AccountId FROM Accounts"

// Each case sets the frontends up, sends one single-use query (the stream that may be
// hedged), and states what the caller gets and what became of the hedge.
func TestHedgeRace(t *testing.T) {
	for _, c := range []struct {
		name  string
		h     HedgingSettings
		setup func(r *rawHedgeRig)
		read  bool          // a streaming read, not a query
		wait  time.Duration // the caller's deadline; 0: 30s
		code  codes.Code    // of the query
		want  HedgingStatus
		e2    int64 // streams E2 received
	}{
		{"slow first endpoint: the hedge wins", HedgingSettings{Delay: 20 * time.Millisecond},
			func(r *rawHedgeRig) { r.e1.SetLatency(time.Minute) }, false, 0, codes.OK,
			HedgingStatus{Hedgeable: 1, Sent: 1, Won: 1}, 1},
		{"slow first endpoint, streaming read: the hedge wins", HedgingSettings{Delay: 20 * time.Millisecond},
			func(r *rawHedgeRig) { r.e1.SetLatency(time.Minute) }, true, 0, codes.OK,
			HedgingStatus{Hedgeable: 1, Sent: 1, Won: 1}, 1},
		{"both fail retryably: the first endpoint's error", HedgingSettings{Delay: 5 * time.Millisecond},
			func(r *rawHedgeRig) {
				r.e1.SetLatency(100 * time.Millisecond)
				_ = r.e1.FailAll(codes.Unavailable)
				r.e2.SetLatency(200 * time.Millisecond)
				_ = r.e2.FailAll(codes.Unavailable)
			}, false, 0, codes.Unavailable,
			HedgingStatus{Hedgeable: 1, Sent: 1}, 1},
		{"the caller's deadline passes while both wait", HedgingSettings{Delay: 5 * time.Millisecond},
			func(r *rawHedgeRig) {
				r.e1.SetLatency(time.Minute)
				r.e2.SetLatency(time.Minute)
			}, false, 300 * time.Millisecond, codes.DeadlineExceeded,
			HedgingStatus{Hedgeable: 1, Sent: 1}, 1},
		{"answer before the delay: no hedge", HedgingSettings{Delay: time.Minute},
			func(*rawHedgeRig) {}, false, 0, codes.OK,
			HedgingStatus{Hedgeable: 1}, 0},
		{"slow hedge: the first endpoint wins, the hedge is lost", HedgingSettings{Delay: time.Nanosecond},
			func(r *rawHedgeRig) {
				r.e1.SetLatency(200 * time.Millisecond) // long enough for the hedge to reach E2
				r.e2.SetLatency(time.Minute)
			}, false, 0, codes.OK,
			HedgingStatus{Hedgeable: 1, Sent: 1, Lost: 1}, 1},
		{"hedge fails retryably: the first endpoint's answer is the call's", HedgingSettings{Delay: 5 * time.Millisecond},
			func(r *rawHedgeRig) {
				r.e1.SetLatency(300 * time.Millisecond)
				_ = r.e2.FailAll(codes.Unavailable)
			}, false, 0, codes.OK,
			HedgingStatus{Hedgeable: 1, Sent: 1, Lost: 1}, 1},
		{"hedge ends with a final status: it wins", HedgingSettings{Delay: 5 * time.Millisecond},
			func(r *rawHedgeRig) {
				r.e1.SetLatency(time.Minute)
				_ = r.e2.FailAll(codes.PermissionDenied)
			}, false, 0, codes.PermissionDenied,
			HedgingStatus{Hedgeable: 1, Sent: 1, Won: 1}, 1},
		{"first endpoint fails retryably while the hedge runs: the hedge's answer", HedgingSettings{Delay: 5 * time.Millisecond},
			func(r *rawHedgeRig) {
				r.e1.SetLatency(200 * time.Millisecond)
				_ = r.e1.FailAll(codes.Unavailable)
				r.e2.SetLatency(400 * time.Millisecond)
			}, false, 0, codes.OK,
			HedgingStatus{Hedgeable: 1, Sent: 1, Won: 1}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRawHedgeRig(t, &c.h)
			c.setup(r)
			wait := 30 * time.Second
			if c.wait > 0 {
				wait = c.wait
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			query := r.query
			if c.read {
				query = r.read
			}
			_, rows, err := query(ctx, countSQL, singleUse)
			if status.Code(err) != c.code {
				t.Fatalf("query: %v, want code %v", err, c.code)
			}
			if err == nil && rows == 0 {
				t.Error("query returned no rows")
			}
			c.want.Delay, c.want.MinDelay, c.want.Budget = c.h.Delay, hedge.DefaultMinDelay, hedge.DefaultBudget
			var last HedgingStatus
			eventually(t, 10*time.Second, "the hedge's outcome counted", func() bool {
				last = r.hedging(t)
				if last != c.want {
					t.Logf("hedging status %+v, want %+v", last, c.want)
				}
				return last == c.want
			})
			if got := r.hedging(t); got != c.want {
				t.Errorf("hedging status %+v, want %+v", got, c.want)
			}
			eventually(t, 10*time.Second, "E2's streams counted", func() bool { return streamsReceived(r.e2) == c.e2 })
			// The loser's CANCELED, and the frontends' injected failures of hedges, count for
			// nothing that ejects: both endpoints stay usable.
			for _, e := range groupOf(r.gme, "default").Endpoints {
				if e.Verdict != "usable" {
					t.Errorf("endpoint %s verdict %q, want usable", e.Endpoint, e.Verdict)
				}
			}
		})
	}
}

// A read-only transaction begun inline by a query: that query is not hedged (its hedge would
// begin a second transaction in the session; TestHedgedReadOnlyTransactionOfTheSpannerClient
// shows the emulator invalidating the first then), but the transaction's ID is learnt from
// its first message, so the next query, naming the transaction, is hedged while E1 holds
// queries, and the one after that, E1 answering again, is not; all read the same rows.
func TestHedgedInlineBeginIsNotHedged(t *testing.T) {
	r := newRawHedgeRig(t, &HedgingSettings{Delay: 20 * time.Millisecond, Budget: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md, first, err := r.query(ctx, countSQL, beginRO)
	if err != nil {
		t.Fatal(err)
	}
	id := md.GetTransaction().GetId()
	if id == nil {
		t.Fatal("the query that begins a read-only transaction returned no transaction ID")
	}
	if h := r.hedging(t); h.Hedgeable != 0 || h.Sent != 0 {
		t.Fatalf("hedging %+v: the inline begin counted as hedgeable", h)
	}
	if !r.gme.roTxns.Hedgeable(ctx, &spannerpb.ExecuteSqlRequest{Session: r.session, Transaction: txnID(id)}) {
		t.Fatal("a query naming the transaction begun inline is not hedgeable")
	}
	r.slowQueries.Store(true)
	_, second, err := r.query(ctx, countSQL, txnID(id))
	if err != nil {
		t.Fatalf("second query in the transaction: %v", err)
	}
	r.slowQueries.Store(false)
	_, third, err := r.query(ctx, countSQL, txnID(id))
	if err != nil {
		t.Fatalf("third query in the transaction: %v", err)
	}
	if first != second || second != third || first == 0 {
		t.Errorf("rows read in the transaction: %d, %d, %d; want the same, not 0", first, second, third)
	}
	if h := r.hedging(t); h.Hedgeable != 2 || h.Sent != 1 || h.Won != 1 {
		t.Errorf("hedging %+v, want 2 hedgeable, 1 sent and won", h)
	}
}

// The Spanner client's read-only transaction (begun by BeginTransaction, its default),
// whose first query E1 holds: the query is hedged and won by E2, the transaction goes on on
// E1 once it answers again, reads at one timestamp (a write committed between its two
// queries is not seen; spannertest does not isolate transactions, so only the emulator
// shows it), and ends; on spannertest and on the emulator. On the emulator, a second
// transaction begun inline in a session invalidates the first: why hedgeable refuses inline
// begins.
func TestHedgedReadOnlyTransactionOfTheSpannerClient(t *testing.T) {
	h := &HedgingSettings{Delay: 20 * time.Millisecond, Budget: 1}
	t.Run("spannertest", func(t *testing.T) {
		addr, db := startSeededSpannertest(t)
		hedgedReadOnlyTransaction(t, newHedgeRigOn(t, addr, db, h), writer(t, addr, db), false)
	})
	t.Run("emulator", func(t *testing.T) {
		schema, err := fixture.Schema()
		if err != nil {
			t.Fatal(err)
		}
		emu := emulator.StartTB(t, emulator.Options{DDL: schema})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w := writer(t, emu.Addr(), emu.DatabasePath())
		if err := fixture.Seed(ctx, w); err != nil {
			t.Fatal(err)
		}
		r := newHedgeRigOn(t, emu.Addr(), emu.DatabasePath(), h)
		hedgedReadOnlyTransaction(t, r, w, true)

		// Why the inline begin is not hedged: two begins in one session, and the first's
		// transaction is gone (NOT_FOUND in a session of CreateSession, FAILED_PRECONDITION
		// "Invalid transaction ID" in the client's multiplexed session).
		raw := &rawHedgeRig{hedgeRig: r, api: spannerpb.NewSpannerClient(r.gme)}
		s, err := raw.api.CreateSession(ctx, &spannerpb.CreateSessionRequest{Database: emu.DatabasePath()})
		if err != nil {
			t.Fatal(err)
		}
		raw.session = s.Name
		md, _, err := raw.query(ctx, countSQL, beginRO)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := raw.query(ctx, countSQL, beginRO); err != nil {
			t.Fatal(err)
		}
		_, _, err = raw.query(ctx, countSQL, txnID(md.GetTransaction().GetId()))
		t.Logf("the first of two read-only transactions begun in one session of the emulator: %v", err)
		if err == nil {
			t.Errorf("the emulator served the first of two transactions begun in one session (%v): revisit hedgeable's refusal of inline begins", err)
		}
	})
}

// writer is a plain client of the backend, for writes made by someone else (the emulator
// keeps one transaction per session: the rig's client's own write would end its read-only
// transaction).
func writer(t *testing.T, addr, db string) *spanner.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := fixture.NewClient(ctx, addr, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func hedgedReadOnlyTransaction(t *testing.T, r *hedgeRig, w *spanner.Client, isolated bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	balance := func(ro interface {
		Query(context.Context, spanner.Statement) *spanner.RowIterator
	}) (int64, error) {
		var b int64
		err := ro.Query(ctx, spanner.Statement{SQL: "SELECT Balance FROM Accounts WHERE AccountId = @id",
			Params: map[string]any{"id": "acct-0001"}}).Do(func(row *spanner.Row) error { return row.Column(0, &b) })
		return b, err
	}
	tx := r.client.ReadOnlyTransaction()
	defer tx.Close()
	r.slowQueries.Store(true)
	before, err := balance(tx)
	r.slowQueries.Store(false)
	if err != nil {
		t.Fatalf("first query of the transaction: %v", err)
	}
	if h := groupOf(r.gme, "default").Hedging; h == nil || h.Won != 1 {
		t.Fatalf("hedging %+v: the first query was not hedged and won", h)
	}
	if _, err := w.Apply(ctx, []*spanner.Mutation{spanner.Update("Accounts",
		[]string{"AccountId", "Balance"}, []any{"acct-0001", before + 1000})}); err != nil {
		t.Fatal(err)
	}
	again, err := balance(tx)
	if err != nil {
		t.Fatalf("second query of the transaction: %v", err)
	}
	tx.Close()
	after, err := balance(r.client.Single())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("balance in the transaction: %d, then %d; after it: %d", before, again, after)
	if isolated && again != before {
		t.Errorf("the transaction read %d, then %d: not one timestamp", before, again)
	}
	if after != before+1000 {
		t.Errorf("after the transaction the balance is %d, want %d", after, before+1000)
	}
	// The later queries are hedged only if they are slower than the delay, which a loaded
	// machine decides: what must hold is that every hedge sent was won or lost.
	if h := groupOf(r.gme, "default").Hedging; h.Sent < 1 || h.Won+h.Lost != h.Sent {
		t.Errorf("hedging %+v: want every hedge sent won or lost", h)
	}
}

// The caller's grpc.Header option gets the header of the stream it read: the hedge's when
// the hedge won, the first stream's otherwise.
func TestHedgeWinnersHeaderReachesTheCaller(t *testing.T) {
	r := newRawHedgeRig(t, &HedgingSettings{Delay: 20 * time.Millisecond, Budget: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func() string {
		t.Helper()
		var md metadata.MD
		s, err := r.api.ExecuteStreamingSql(ctx, &spannerpb.ExecuteSqlRequest{Session: r.session, Sql: countSQL, Transaction: singleUse}, grpc.Header(&md))
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := s.Recv(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				break
			}
		}
		return strings.Join(md.Get(servedByHeader), ",")
	}
	if got := read(); got != "e1" {
		t.Errorf("not hedged: header says served by %q, want e1", got)
	}
	r.slowQueries.Store(true)
	if got := read(); got != "e2" {
		t.Errorf("hedge won: header says served by %q, want e2", got)
	}
	if h := r.hedging(t); h.Won != 1 {
		t.Errorf("hedging %+v, want 1 won", h)
	}
}

// goleak: 1,000 hedged streams (E1 slow, every one hedged and won by E2) leave no goroutine
// behind once the client and the GCPMultiEndpoint are closed.
func TestHedgedStreamsLeaveNoGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(append(goleakOptions, before)...); err != nil {
			t.Errorf("goroutines left after 1,000 hedged streams: %v", err)
		}
	})
	r := newRawHedgeRig(t, &HedgingSettings{Delay: time.Millisecond, Budget: 1})
	r.e1.SetLatency(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const calls, workers = 1000, 8
	err := runConcurrently(ctx, workers, calls, func() error {
		_, _, err := r.query(ctx, countSQL, singleUse)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if h := r.hedging(t); h.Won != calls {
		t.Errorf("hedging %+v, want %d won", h, calls)
	}
}
