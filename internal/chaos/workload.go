package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// opKind is what one call of a worker does.
type opKind int

const (
	opTransfer  opKind = iota // read-write transaction: move money between two accounts, insert its Orders row
	opInsert                  // read-write transaction: insert one Inserts row with a unique RequestId
	opPointRead               // strong single-row read of an account
	opSum                     // strong query: SUM(Balance) and COUNT(*) of Accounts
	opStream                  // streaming query of every Events row, checked row by row
	// opHeavy: a query over Events marked with heavyQueryHeader: the one the database refuses
	// during a query-overload (RESOURCE_EXHAUSTED without RetryInfo, at every endpoint).
	opHeavy
	numOpKinds
)

var opNames = [numOpKinds]string{"transfer", "insert", "point read", "sum query", "stream query", "heavy query"}

func (k opKind) String() string { return opNames[k] }

// isWrite reports whether k commits.
func (k opKind) isWrite() bool { return k == opTransfer || k == opInsert }

// workerSpec is one goroutine of the load: what it does, through which group, and the
// deadline of each of its calls.
type workerSpec struct {
	name     string
	kind     opKind
	group    string
	deadline time.Duration
	pause    time.Duration // between calls
	// accounts are the indexes of the seed accounts a transfer worker moves money between:
	// no two workers share one (see workers).
	accounts []int
}

// workers is the load. Every worker has its own deadline: short ones show calls that a
// failover must not keep waiting, long ones ride out recoveries. Workers on "west" route
// their calls with spannerme.NewMEContext.
//
// The transfer workers move money between accounts of their own: spannertest has no
// isolation between concurrent read-write transactions (their reads take no locks and Commit
// writes blindly), so two workers on one account would lose updates there without any fault.
// One worker's calls are sequential, so its accounts see one transaction at a time on every
// backend.
var workers = []workerSpec{
	{"transfer/default", opTransfer, GroupDefault, 10 * time.Second, 5 * time.Millisecond, []int{0, 1, 2, 3}},
	{"transfer/west", opTransfer, GroupWest, 20 * time.Second, 5 * time.Millisecond, []int{4, 5, 6, 7}},
	{"insert/default", opInsert, GroupDefault, 15 * time.Second, 5 * time.Millisecond, nil},
	{"insert/west", opInsert, GroupWest, 6 * time.Second, 5 * time.Millisecond, nil},
	{"read/default", opPointRead, GroupDefault, 3 * time.Second, 2 * time.Millisecond, nil},
	{"read/west", opPointRead, GroupWest, 4 * time.Second, 2 * time.Millisecond, nil},
	{"sum/default", opSum, GroupDefault, 5 * time.Second, 10 * time.Millisecond, nil},
	{"stream/default", opStream, GroupDefault, 20 * time.Second, 20 * time.Millisecond, nil},
	{"stream/west", opStream, GroupWest, 8 * time.Second, 20 * time.Millisecond, nil},
	// The tiered group (groupTiers): its calls are spread over its top tier's members.
	{"read/tiered", opPointRead, GroupTiered, 3 * time.Second, 2 * time.Millisecond, nil},
	{"insert/tiered", opInsert, GroupTiered, 6 * time.Second, 5 * time.Millisecond, nil},
	{"stream/tiered", opStream, GroupTiered, 8 * time.Second, 20 * time.Millisecond, nil},
	// The heavy query, every 50ms (issue 40's case): refused everywhere during a
	// query-overload, served otherwise. Workers are appended, so that the earlier ones keep
	// their draws (worker i draws from (seed, i)).
	{"heavy/default", opHeavy, GroupDefault, 3 * time.Second, 50 * time.Millisecond, nil},
	// Four more readers on the tiered group, 100ms apart: a member's share of its tier is
	// judged in windows of a second holding at least shareMin of the tier's calls, and after an
	// outage of every endpoint the emulator answers each call in 0.5-1s: the three workers
	// above then gave the tier fewer than 5 calls a second for 6s, and a member's way back ran
	// on unjudged while the client spread correctly. These add about 3.5 to 6.5 calls a
	// second there (a call and a 100ms pause each), and about 40 in memory. Their deadline,
	// 5s, leaves a slow backend room: a call past it with no fault in force fails the run.
	{"read/tiered-2", opPointRead, GroupTiered, 5 * time.Second, 100 * time.Millisecond, nil},
	{"read/tiered-3", opPointRead, GroupTiered, 5 * time.Second, 100 * time.Millisecond, nil},
	{"read/tiered-4", opPointRead, GroupTiered, 5 * time.Second, 100 * time.Millisecond, nil},
	{"read/tiered-5", opPointRead, GroupTiered, 5 * time.Second, 100 * time.Millisecond, nil},
}

// The Events rows the stream queries read: eventRows rows of eventPayload bytes each.
const (
	eventRows    = 400
	eventPayload = 512
)

// outcome is one call of a worker.
type outcome struct {
	worker     string
	kind       opKind
	group      string
	id         string // the write's unique ID (OrderId or RequestId)
	start, end time.Time
	err        error
	// committing: the write's transaction function returned nil on its last attempt, so its
	// Commit was sent: a failed call may have committed all the same (unknown outcome).
	committing bool
	// attempts, for a failed call, is what the client did with it (attemptsText).
	attempts string
}

func (o outcome) code() codes.Code { return spanner.ErrCode(o.err) }

// transferRec is what a transfer meant to do, kept to recompute every balance at the end.
type transferRec struct {
	from, to string
	amount   int64
	acked    bool
}

// insertRec is one insert's outcome.
type insertRec struct{ acked bool }

// load runs the workers and records every outcome.
type load struct {
	client   *spanner.Client
	accounts []fixture.Account
	total    int64 // the sum of the seed balances
	// writeSlot, when not nil, serializes read-write transactions (the emulator fails
	// concurrent ones with "Transaction not found", even for a plain client).
	writeSlot chan struct{}
	// atomicReads says that a read never sees part of a commit, so every sum query must see
	// the seed total. False on spannertest, which applies a commit's mutations one by one
	// while reads run.
	atomicReads bool

	stop context.CancelFunc
	wg   sync.WaitGroup

	ok, failed [numOpKinds]atomic.Int64
	// groupCalls counts each group's calls ended, failed or not (in groupNames order).
	groupCalls [numGroups]atomic.Int64

	mu        sync.Mutex // guards the fields below
	failures  []outcome  // every failed call
	transfers map[string]transferRec
	inserts   map[string]insertRec
	anomalies []string // wrong answers to reads

	// name gives an endpoint's name (e1, e2, e3) for its address (topology.name).
	name func(addr string) string
}

func newLoad(client *spanner.Client, accounts []fixture.Account, emulator bool, name func(string) string) *load {
	l := &load{client: client, accounts: accounts, transfers: map[string]transferRec{}, inserts: map[string]insertRec{}, atomicReads: emulator, name: name}
	for _, a := range accounts {
		l.total += a.Balance
	}
	if emulator {
		l.writeSlot = make(chan struct{}, 1)
	}
	return l
}

// start runs every worker until halt; worker w draws its choices from (seed, w).
func (l *load) start(seed uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	for i, w := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
		l.wg.Go(func() {
			for n := 1; ctx.Err() == nil; n++ {
				l.call(ctx, w, rng, n)
				select {
				case <-ctx.Done():
				case <-time.After(w.pause):
				}
			}
		})
	}
}

// halt stops the workers and waits for their calls in flight (each bounded by its deadline).
func (l *load) halt() {
	l.stop()
	l.wg.Wait()
}

// call runs one call of worker w and records its outcome.
func (l *load) call(ctx context.Context, w workerSpec, rng *rand.Rand, n int) {
	if w.kind.isWrite() && l.writeSlot != nil {
		select {
		case l.writeSlot <- struct{}{}:
			defer func() { <-l.writeSlot }()
		case <-ctx.Done():
			return
		}
	}
	// The call is not cut short by halt: it ends by itself or at its own deadline.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.deadline)
	defer cancel()
	if w.group != GroupDefault {
		cctx = spannerme.NewMEContext(cctx, w.group)
	}
	cctx = metadata.AppendToOutgoingContext(cctx, groupHeader, w.group) // for the failover table
	// Where each attempt went, for a failed call's line in the report.
	var info spannerme.CallInfo
	cctx = spannerme.WithCallInfo(cctx, &info)
	o := outcome{worker: w.name, kind: w.kind, group: w.group, start: time.Now()}
	var anomaly string
	switch w.kind {
	case opTransfer:
		o.id = fmt.Sprintf("chaos-t-%s-%d", w.name, n)
		n := len(w.accounts)
		from := rng.IntN(n)
		to := (from + 1 + rng.IntN(n-1)) % n
		rec := transferRec{from: l.accounts[w.accounts[from]].AccountID, to: l.accounts[w.accounts[to]].AccountID, amount: 1 + rng.Int64N(100)}
		o.committing, o.err = l.transfer(cctx, o.id, rec, w.name)
		if errors.Is(o.err, fixture.ErrInsufficientFunds) {
			return // declined by the workload's own rule: neither a success nor a failure
		}
		rec.acked = o.err == nil
		l.mu.Lock()
		l.transfers[o.id] = rec
		l.mu.Unlock()
	case opInsert:
		o.id = fmt.Sprintf("chaos-i-%s-%d", w.name, n)
		o.committing, o.err = l.insert(cctx, o.id, w.name)
		l.mu.Lock()
		l.inserts[o.id] = insertRec{acked: o.err == nil}
		l.mu.Unlock()
	case opPointRead:
		anomaly, o.err = l.pointRead(cctx, l.accounts[rng.IntN(len(l.accounts))].AccountID)
	case opSum:
		anomaly, o.err = l.sum(cctx)
	case opStream:
		anomaly, o.err = l.stream(cctx)
	case opHeavy:
		anomaly, o.err = l.heavy(cctx)
	}
	o.end = time.Now()
	if g := slices.Index(groupNames[:], w.group); g >= 0 {
		l.groupCalls[g].Add(1)
	}
	if o.err != nil {
		l.failed[w.kind].Add(1)
		o.attempts = attemptsText(info.Attempts(), o.start, l.name)
		l.mu.Lock()
		l.failures = append(l.failures, o)
		l.mu.Unlock()
		return
	}
	l.ok[w.kind].Add(1)
	if anomaly != "" {
		l.mu.Lock()
		l.anomalies = append(l.anomalies, fmt.Sprintf("%s at %s: %s", w.name, o.end.Format("15:04:05.000"), anomaly))
		l.mu.Unlock()
	}
}

// transfer runs fixture.TransferInTx in a read-write transaction; committing reports whether
// its last attempt reached Commit.
func (l *load) transfer(ctx context.Context, id string, r transferRec, writer string) (committing bool, err error) {
	_, err = l.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		committing = false
		if err := fixture.TransferInTx(ctx, tx, id, r.from, r.to, r.amount, writer); err != nil {
			return err
		}
		committing = true
		return nil
	})
	return committing, err
}

// insert writes one Inserts row for requestID in a read-write transaction, with a RowId new
// for every attempt, so that a transaction that committed twice leaves two rows.
func (l *load) insert(ctx context.Context, requestID, writer string) (committing bool, err error) {
	attempt := 0
	_, err = l.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		attempt++
		committing = false
		if err := tx.BufferWrite([]*spanner.Mutation{spanner.Insert(fixture.TableInserts,
			[]string{"RowId", "RequestId", "Writer"},
			[]any{fmt.Sprintf("%s#%d", requestID, attempt), requestID, writer})}); err != nil {
			return err
		}
		committing = true
		return nil
	})
	return committing, err
}

// pointRead reads one account; a negative balance is an anomaly.
func (l *load) pointRead(ctx context.Context, id string) (anomaly string, err error) {
	row, err := l.client.Single().ReadRow(ctx, fixture.TableAccounts, spanner.Key{id}, []string{"Balance"})
	if err != nil {
		return "", err
	}
	var bal int64
	if err := row.Column(0, &bal); err != nil {
		return "", err
	}
	if bal < 0 {
		return fmt.Sprintf("account %s has balance %d", id, bal), nil
	}
	return "", nil
}

// sum reads the total balance and the number of accounts: every strong read must see every
// account and, where reads are atomic (atomicReads), the seed total.
func (l *load) sum(ctx context.Context) (anomaly string, err error) {
	var sum spanner.NullInt64
	var n int64
	err = l.client.Single().Query(ctx, spanner.Statement{SQL: "SELECT SUM(Balance), COUNT(*) FROM " + fixture.TableAccounts}).Do(
		func(r *spanner.Row) error { return r.Columns(&sum, &n) })
	if err != nil {
		return "", err
	}
	if (l.atomicReads && sum.Int64 != l.total) || n != int64(len(l.accounts)) {
		return fmt.Sprintf("SUM(Balance) %d over %d accounts, want %d over %d", sum.Int64, n, l.total, len(l.accounts)), nil
	}
	return "", nil
}

// stream reads every Events row with a streaming query and checks each one.
func (l *load) stream(ctx context.Context) (anomaly string, err error) {
	it := l.client.Single().Query(ctx, spanner.Statement{SQL: "SELECT EventId, Payload FROM " + fixture.TableEvents + " ORDER BY EventId"})
	err = fixture.CheckEvents(it, eventRows, eventPayload)
	if errors.Is(err, fixture.ErrWrongEvents) {
		return err.Error(), nil
	}
	return "", err
}

// heavy runs the heavy query (opHeavy), marked with heavyQueryHeader: every Events row counted.
func (l *load) heavy(ctx context.Context) (anomaly string, err error) {
	ctx = metadata.AppendToOutgoingContext(ctx, heavyQueryHeader, "1")
	var n int64
	err = l.client.Single().Query(ctx, spanner.Statement{SQL: "SELECT COUNT(*) FROM " + fixture.TableEvents}).Do(
		func(r *spanner.Row) error { return r.Columns(&n) })
	if err != nil {
		return "", err
	}
	if n != eventRows {
		return fmt.Sprintf("COUNT(*) of %s %d, want %d", fixture.TableEvents, n, eventRows), nil
	}
	return "", nil
}

// reads returns the reads (point reads, sum and stream queries) ended so far, failed or not.
func (l *load) reads() int64 {
	var n int64
	for _, k := range []opKind{opPointRead, opSum, opStream} {
		n += l.ok[k].Load() + l.failed[k].Load()
	}
	return n
}

// totals returns the calls so far: succeeded and failed, all kinds together.
func (l *load) totals() (ok, failed int64) {
	for k := range numOpKinds {
		ok += l.ok[k].Load()
		failed += l.failed[k].Load()
	}
	return ok, failed
}
