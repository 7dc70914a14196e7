package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// load runs readers (queries) and writers (read-write transfer transactions) through the
// default MultiEndpoint, and one reader through "west", until stopped.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	readsOK, readsFailed, writesOK, writesFailed, routedOK, routedFailed atomic.Int64
	// ambiguous counts writes whose commit returned an error although it had been applied.
	ambiguous atomic.Int64

	mu       sync.Mutex
	acked    []string // order IDs of acknowledged commits
	firstErr error
}

type loadTotals struct {
	readsOK, readsFailed, writesOK, writesFailed, routedOK, routedFailed, ambiguous int64
	firstErr                                                                        error
}

func (t loadTotals) ops() int64 { return t.readsOK + t.writesOK + t.routedOK + t.failed() }
func (t loadTotals) failed() int64 {
	return t.readsFailed + t.writesFailed + t.routedFailed
}

func startLoad(ctx context.Context, client *spanner.Client, accounts []fixture.Account, readers, writers int) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel}
	op := func(ok, failed *atomic.Int64, f func(context.Context) error) {
		// A generous per-operation deadline: the Spanner client retries UNAVAILABLE while an
		// endpoint recovers, and an operation that fails after that is a real failure.
		octx, c := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer c()
		if err := f(octx); err != nil {
			failed.Add(1)
			l.mu.Lock()
			if l.firstErr == nil {
				l.firstErr = err
			}
			l.mu.Unlock()
			return
		}
		ok.Add(1)
	}
	loop := func(pause time.Duration, f func()) {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				f()
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	for range readers {
		loop(5*time.Millisecond, func() {
			op(&l.readsOK, &l.readsFailed, func(c context.Context) error { _, err := countAccounts(c, client); return err })
		})
	}
	loop(100*time.Millisecond, func() {
		op(&l.routedOK, &l.routedFailed, func(c context.Context) error {
			_, err := countAccounts(spannerme.NewMEContext(c, "west"), client)
			return err
		})
	})
	for w := range writers {
		n := 0
		loop(10*time.Millisecond, func() {
			n++
			from, to := accounts[w%len(accounts)].AccountID, accounts[(w+1)%len(accounts)].AccountID
			if n%2 == 0 {
				from, to = to, from // back and forth: balances stay put
			}
			id := fmt.Sprintf("demo-w%d-%06d", w, n)
			op(&l.writesOK, &l.writesFailed, func(c context.Context) error {
				if err := fixture.Transfer(c, client, id, from, to, 1, fmt.Sprintf("writer-%d", w)); err != nil {
					// A commit cut off by a dropped connection has an unknown outcome: the
					// client may retry a Commit that had landed, and the in-memory Spanner
					// answers such a retry "unknown transaction". The order's unique ID
					// settles it, as an application with idempotency keys does.
					if found, ferr := fixture.OrderExists(c, client, id); ferr != nil || !found {
						return err
					}
					l.ambiguous.Add(1)
				}
				l.mu.Lock()
				l.acked = append(l.acked, id)
				l.mu.Unlock()
				return nil
			})
		})
	}
	return l
}

func (l *load) stop() { l.cancel(); l.wg.Wait() }

func (l *load) totals() loadTotals {
	l.mu.Lock()
	defer l.mu.Unlock()
	return loadTotals{l.readsOK.Load(), l.readsFailed.Load(), l.writesOK.Load(), l.writesFailed.Load(),
		l.routedOK.Load(), l.routedFailed.Load(), l.ambiguous.Load(), l.firstErr}
}

// verifyWrites counts the demo's Orders rows: every acknowledged commit must be there exactly
// once (OrderId is the primary key), and no unacknowledged one may be.
func (l *load) verifyWrites(ctx context.Context, client *spanner.Client) (found int64, err error) {
	l.mu.Lock()
	acked := append([]string(nil), l.acked...)
	l.mu.Unlock()
	err = client.Single().Query(ctx, spanner.Statement{
		SQL: "SELECT COUNT(*) FROM Orders WHERE STARTS_WITH(OrderId, 'demo-')"}).Do(func(r *spanner.Row) error {
		return r.Column(0, &found)
	})
	if err != nil {
		return 0, err
	}
	var present int64
	keys := spanner.KeySetFromKeys()
	for _, id := range acked {
		keys = spanner.KeySets(keys, spanner.Key{id})
	}
	err = client.Single().Read(ctx, "Orders", keys, []string{"OrderId"}).Do(func(*spanner.Row) error {
		present++
		return nil
	})
	if err != nil {
		return found, err
	}
	if present != int64(len(acked)) || found != present {
		return found, fmt.Errorf("%d acknowledged writes, %d of them present, %d demo rows in all", len(acked), present, found)
	}
	return found, nil
}
