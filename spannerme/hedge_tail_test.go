package spannerme

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
)

// tailRun is what one run of the tail workload measured.
type tailRun struct {
	queries, failed int64
	p50, p99        time.Duration
	e2Streams       int64 // streaming queries E2 received
	hedging         *HedgingStatus
}

// runTail runs workers single-use queries in a loop for d on r, E1 making 5% of its calls
// 400ms slower, and measures them.
func runTail(t *testing.T, r *hedgeRig, workers int, d time.Duration) tailRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+60*time.Second)
	defer cancel()
	stmt := spanner.Statement{SQL: "SELECT Balance FROM Accounts WHERE AccountId = 'acct-0001'"}
	query := func() error {
		return r.client.Single().Query(ctx, stmt).Do(func(*spanner.Row) error { return nil })
	}
	for range 20 { // warm up: the session, the connections
		if err := query(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.e1.SetLatencyFraction(0.05, 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	r.e2.ResetStats()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failed    atomic.Int64
		firstErr  atomic.Pointer[error]
		wg        sync.WaitGroup
	)
	end := time.Now().Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(end) {
				start := time.Now()
				if err := query(); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		t.Errorf("%d queries failed; first: %v", failed.Load(), *e)
	}
	slices.Sort(latencies)
	at := func(q float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(q*float64(len(latencies))))]
	}
	return tailRun{queries: int64(len(latencies)) + failed.Load(), failed: failed.Load(), p50: at(0.5), p99: at(0.99),
		e2Streams: streamsReceived(r.e2), hedging: groupOf(r.gme, "default").Hedging}
}

// The tail (issue 27): E1 and E2 in one group, 5% of E1's calls 400ms slower, 8 workers of
// single-use queries for 20s (4s with -short), hedging off then on (fixed 50ms delay, the
// default 5% budget). The latencies are reported, not asserted (a loaded machine moves
// them); what is asserted is structural: no query fails, and the extra calls on E2 (the
// hedges) stay within the budget: at most 5% of the hedgeable calls plus the 10 saved up.
func TestHedgingCutsTheTail(t *testing.T) {
	d := 20 * time.Second
	if testing.Short() {
		d = 4 * time.Second
	}
	const workers = 8
	off := runTail(t, newHedgeRig(t, nil), workers, d)
	on := runTail(t, newHedgeRig(t, &HedgingSettings{Delay: 50 * time.Millisecond}), workers, d)
	t.Logf("hedging off: %d queries, %d failed, p50 %v, p99 %v, E2 received %d", off.queries, off.failed, off.p50, off.p99, off.e2Streams)
	t.Logf("hedging on:  %d queries, %d failed, p50 %v, p99 %v, E2 received %d (%.2f%% extra), hedging %+v",
		on.queries, on.failed, on.p50, on.p99, on.e2Streams, 100*float64(on.e2Streams)/float64(max(on.queries, 1)), *on.hedging)
	if off.e2Streams != 0 {
		t.Errorf("hedging off: E2 received %d streams, want none", off.e2Streams)
	}
	// E2 may receive a few more streams than the hedges counted sent: a hedge still being
	// opened when the primary answers is abandoned (cancelled, counted neither sent, won nor
	// lost), sometimes after it reached E2 (1,006 against 1,005 in a loaded -race run). The
	// budget bounds every stream E2 receives, abandoned ones included.
	if h := on.hedging; on.e2Streams < h.Won {
		t.Errorf("E2 received %d streams, fewer than the %d hedges that won there", on.e2Streams, h.Won)
	}
	if limit := int64(float64(on.hedging.Hedgeable)*hedge.DefaultBudget) + int64(hedge.Bucket); on.e2Streams > limit {
		t.Errorf("E2 received %d streams: more than the budget allows (%d of %d hedgeable calls)", on.e2Streams, limit, on.hedging.Hedgeable)
	}
	if on.hedging.Won == 0 {
		t.Error("no hedge won")
	}
}

// The tail under a crowd: as TestHedgingCutsTheTail, hedging on, and besides the 5% of E1's
// calls 400ms slower, 3% more take 55 to 75ms: 8% of the streams pass the 50ms delay, more
// than the 5% budget allows (as on a loaded client, where the usual query often passes the
// delay). The budget keeps the last saved-up hedges for the streams that have waited
// longest (HedgingSettings.Budget), so the 400ms ones get most of the hedges. The p99 is
// reported, not asserted (measured: 401ms when every stream asked once, 123ms with the
// asks at 1, 1.25, 1.5 and 1.75 delays); asserted: no query fails, E2's extra calls stay
// within the budget.
func TestHedgingCutsTheTailUnderACrowd(t *testing.T) {
	d := 10 * time.Second
	if testing.Short() {
		d = 4 * time.Second
	}
	r := newHedgeRig(t, &HedgingSettings{Delay: 50 * time.Millisecond})
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	crowd := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < 0.03 {
			return 55*time.Millisecond + time.Duration(rng.IntN(20))*time.Millisecond
		}
		return 0
	}
	r.crowd.Store(&crowd)
	on := runTail(t, r, 8, d)
	t.Logf("hedging on, 3%% of E1's calls 55-75ms, 5%% 400ms: %d queries, %d failed, p50 %v, p99 %v, E2 received %d (%.2f%% extra), hedging %+v",
		on.queries, on.failed, on.p50, on.p99, on.e2Streams, 100*float64(on.e2Streams)/float64(max(on.queries, 1)), *on.hedging)
	if limit := int64(float64(on.hedging.Hedgeable)*hedge.DefaultBudget) + int64(hedge.Bucket); on.e2Streams > limit {
		t.Errorf("E2 received %d streams: more than the budget allows (%d of %d hedgeable calls)", on.e2Streams, limit, on.hedging.Hedgeable)
	}
}
