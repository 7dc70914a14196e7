package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// loadSpec says what a load runs.
type loadSpec struct {
	readers int      // goroutines querying through the default group
	routed  []string // one more reader per group name (NewMEContext)
	writers int      // goroutines running fixture.Transfer through the default group
	prefix  string   // OrderId prefix of this load's writes
	// opTimeout returns the deadline of the next operation; nil means 30s, far above any
	// failover, so that an error is the client's answer, not the test's impatience.
	opTimeout func() time.Duration
}

// load runs readers and writers until stopped, and records every outcome.
type load struct {
	spec   loadSpec
	client *spanner.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup

	reads, writes atomic.Int64 // successes
	// maxRead and maxWrite are the longest successful read and write, in nanoseconds.
	maxRead, maxWrite atomic.Int64

	mu       sync.Mutex
	acked    []string  // order IDs of acknowledged commits
	failures []failure // every failed operation
}

// failure is one failed operation.
type failure struct {
	kind         string // "read", "read:<group>", "write"
	orderID      string // for writes
	start, ended time.Time
	err          error
}

func (f failure) String() string {
	return fmt.Sprintf("%s %s started %s, took %v: %v", f.kind, f.orderID, f.start.Format("15:04:05.000"), ms(f.ended.Sub(f.start)), f.err)
}

func startLoad(client *spanner.Client, spec loadSpec) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{spec: spec, client: client, cancel: cancel}
	loop := func(pause time.Duration, op func(ctx context.Context, n int)) {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 1; ctx.Err() == nil; n++ {
				op(ctx, n)
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	read := func(kind string, rctx func(context.Context) context.Context) func(context.Context, int) {
		return func(ctx context.Context, _ int) {
			start := time.Now()
			octx, cancel := context.WithTimeout(rctx(context.WithoutCancel(ctx)), l.timeout())
			err := countAccounts(octx, client)
			cancel()
			if err != nil {
				l.fail(failure{kind: kind, start: start, ended: time.Now(), err: err})
				return
			}
			l.reads.Add(1)
			storeMax(&l.maxRead, time.Since(start))
		}
	}
	for range spec.readers {
		loop(5*time.Millisecond, read("read", func(c context.Context) context.Context { return c }))
	}
	for _, g := range spec.routed {
		loop(5*time.Millisecond, read("read:"+g, func(c context.Context) context.Context { return spannerme.NewMEContext(c, g) }))
	}
	for w := range spec.writers {
		a, b := seedAccounts[2*w].AccountID, seedAccounts[2*w+1].AccountID
		loop(10*time.Millisecond, func(ctx context.Context, n int) {
			from, to := a, b
			if n%2 == 0 {
				from, to = b, a // back and forth: balances stay put
			}
			id := fmt.Sprintf("%s-w%d-%06d", spec.prefix, w, n)
			start := time.Now()
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout())
			err := fixture.Transfer(octx, client, id, from, to, 1, fmt.Sprintf("writer-%d", w))
			cancel()
			if err != nil {
				l.fail(failure{kind: "write", orderID: id, start: start, ended: time.Now(), err: err})
				return
			}
			l.writes.Add(1)
			storeMax(&l.maxWrite, time.Since(start))
			l.mu.Lock()
			l.acked = append(l.acked, id)
			l.mu.Unlock()
		})
	}
	return l
}

func storeMax(m *atomic.Int64, d time.Duration) {
	for {
		old := m.Load()
		if int64(d) <= old || m.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

func (l *load) timeout() time.Duration {
	if l.spec.opTimeout != nil {
		return l.spec.opTimeout()
	}
	return 30 * time.Second
}

func (l *load) fail(f failure) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, f)
}

// stop ends the load and waits for its operations in flight.
func (l *load) stop() { l.cancel(); l.wg.Wait() }

// failed returns the failures that match keep (all of them for nil).
func (l *load) failed(keep func(failure) bool) []failure {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []failure
	for _, f := range l.failures {
		if keep == nil || keep(f) {
			out = append(out, f)
		}
	}
	return out
}

// waitOps waits until at least reads more reads and writes more writes than now succeeded.
func (l *load) waitOps(h *harness, within time.Duration, what string, reads, writes int64) {
	h.t.Helper()
	r0, w0 := l.reads.Load(), l.writes.Load()
	if l.spec.writers == 0 {
		writes = 0
	}
	h.waitFor(within, what, func() bool { return l.reads.Load() >= r0+reads && l.writes.Load() >= w0+writes })
}

// summary is one line of figures for the test log.
func (l *load) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	rf, wf := 0, 0
	for _, f := range l.failures {
		if f.kind == "write" {
			wf++
		} else {
			rf++
		}
	}
	return fmt.Sprintf("reads ok %d failed %d (slowest ok %s), writes ok %d failed %d (slowest ok %s)",
		l.reads.Load(), rf, ms(time.Duration(l.maxRead.Load())), l.writes.Load(), wf, ms(time.Duration(l.maxWrite.Load())))
}

// reportFailures fails t for every failure that matches keep, listing them.
func reportFailures(t *testing.T, what string, fs []failure) {
	t.Helper()
	if len(fs) == 0 {
		return
	}
	var b strings.Builder
	for i, f := range fs {
		if i == 20 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(fs)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %v", f)
	}
	t.Errorf("%d %s:%s", len(fs), what, b.String())
}

// ambiguousCommit reports whether a failed write is an ambiguous commit: its Commit reached
// the backend and committed, the response was lost with the connection (a fault injected by
// the test), the Spanner client retried Commit (gax retries it on UNAVAILABLE), and the
// backend, which forgets a transaction once committed, answered NotFound: spannertest says
// "unknown transaction ID". The row may well be there; verifyWrites tells.
func ambiguousCommit(f failure) bool {
	return f.kind == "write" && spanner.ErrCode(f.err) == codes.NotFound &&
		strings.Contains(strings.ToLower(f.err.Error()), "transaction")
}

// verifyWrites checks, after stop, that every acknowledged commit is in Orders exactly once
// (OrderId is the key, so present means once) and that the load wrote nothing else: the rows
// with the load's prefix are the acknowledged commits plus the failed writes that committed
// anyway, and each of those must be an ambiguous commit (see ambiguousCommit), never a write
// the client reported as cleanly failed.
func (l *load) verifyWrites(t *testing.T, client *spanner.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l.mu.Lock()
	acked := append([]string(nil), l.acked...)
	failedWrites := map[string]failure{}
	var failedIDs []string
	for _, f := range l.failures {
		if f.kind == "write" {
			failedWrites[f.orderID] = f
			failedIDs = append(failedIDs, f.orderID)
		}
	}
	l.mu.Unlock()
	var total int64
	err := client.Single().Query(ctx, spanner.Statement{
		SQL:    "SELECT COUNT(*) FROM Orders WHERE STARTS_WITH(OrderId, @p)",
		Params: map[string]any{"p": l.spec.prefix + "-"},
	}).Do(func(r *spanner.Row) error { return r.Column(0, &total) })
	if err != nil {
		t.Fatalf("counting the load's Orders rows: %v", err)
	}
	present := func(ids []string) (map[string]bool, error) {
		found := map[string]bool{}
		if len(ids) == 0 {
			return found, nil
		}
		keys := make([]spanner.KeySet, len(ids))
		for i, id := range ids {
			keys[i] = spanner.Key{id}
		}
		err := client.Single().Read(ctx, fixture.TableOrders, spanner.KeySets(keys...), []string{"OrderId"}).Do(func(r *spanner.Row) error {
			var id string
			if err := r.Column(0, &id); err != nil {
				return err
			}
			if found[id] {
				return fmt.Errorf("OrderId %s read twice", id)
			}
			found[id] = true
			return nil
		})
		return found, err
	}
	foundAcked, err := present(acked)
	if err != nil {
		t.Fatalf("reading the acknowledged Orders rows: %v", err)
	}
	foundFailed, err := present(failedIDs)
	if err != nil {
		t.Fatalf("reading the failed writes' Orders rows: %v", err)
	}
	t.Logf("writes: %d acknowledged, %d present; %d rows with prefix %q; %d failed writes, %d of them committed anyway (ambiguous commits)",
		len(acked), len(foundAcked), total, l.spec.prefix, len(failedIDs), len(foundFailed))
	if len(foundAcked) != len(acked) {
		var missing []string
		for _, id := range acked {
			if !foundAcked[id] {
				missing = append(missing, id)
			}
		}
		t.Errorf("%d acknowledged commits missing: %v", len(missing), missing)
	}
	for id := range foundFailed {
		if f := failedWrites[id]; !ambiguousCommit(f) {
			t.Errorf("write %s failed with an unambiguous error, yet committed: %v", id, f.err)
		}
	}
	if want := int64(len(acked) + len(foundFailed)); total != want {
		t.Errorf("%d rows with prefix %q, want %d (%d acknowledged commits + %d ambiguous commits that committed)",
			total, l.spec.prefix, want, len(acked), len(foundFailed))
	}
	if sum, err := fixture.TotalBalance(ctx, client); err != nil {
		t.Errorf("total balance: %v", err)
	} else if want := seedTotal(); sum != want {
		t.Errorf("total balance %d, want %d (transfers move money, never make it)", sum, want)
	}
}

func seedTotal() int64 {
	var sum int64
	for _, a := range seedAccounts {
		sum += a.Balance
	}
	return sum
}
