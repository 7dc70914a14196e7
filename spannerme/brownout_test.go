package spannerme

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// timedLoad runs queries on workers goroutines until end, each with its own deadline, and
// keeps when each one started, how long it took and its error.
type timedLoad struct {
	mu      sync.Mutex // guards runs
	runs    []timedQuery
	stop    context.CancelFunc
	done    sync.WaitGroup
	endOnce sync.Once
}

type timedQuery struct {
	start time.Time
	took  time.Duration
	err   error
}

func startTimedLoad(t *testing.T, client *spanner.Client, workers int, deadline time.Duration) *timedLoad {
	l := &timedLoad{}
	ctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	for range workers {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			for ctx.Err() == nil {
				qctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				_, err := countAccounts(qctx, client)
				took := time.Since(start)
				cancel()
				l.mu.Lock()
				l.runs = append(l.runs, timedQuery{start: start, took: took, err: err})
				l.mu.Unlock()
				if err != nil {
					select { // a failing query must not spin
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

// end stops the load and waits for its queries. Idempotent.
func (l *timedLoad) end() { l.endOnce.Do(func() { l.stop(); l.done.Wait() }) }

// since returns the median duration and the errors of the queries started at or after from.
func (l *timedLoad) since(from time.Time) (n int, median time.Duration, failed []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var took []time.Duration
	for _, q := range l.runs {
		if q.start.Before(from) {
			continue
		}
		if q.err != nil {
			failed = append(failed, q.err)
		}
		took = append(took, q.took)
	}
	if len(took) == 0 {
		return 0, 0, failed
	}
	slices.Sort(took)
	return len(took), took[len(took)/2], failed
}

// failures returns the errors of every query so far.
func (l *timedLoad) failures() []error {
	_, _, failed := l.since(time.Time{})
	return failed
}

// share counts the queries the two frontends received during d from now.
func share(e1, e2 *spannermetest.Frontend, d time.Duration) (on1, on2 int64) {
	q1, q2 := queries(e1), queries(e2)
	time.Sleep(d) // a measuring window, not a wait for a state
	return queries(e1) - q1, queries(e2) - q2
}

// brownoutOf returns the brownout status of endpoint in group.
func brownoutOf(gme *GCPMultiEndpoint, group, endpoint string) (*BrownoutStatus, EndpointState) {
	for _, e := range groupOf(gme, group).Endpoints {
		if e.Endpoint == endpoint {
			return e.Brownout, e.State
		}
	}
	return nil, Unavailable
}

// F26: a brownout. E1 answers every call, probes included, 400ms late; E2 20ms late. With
// the default brownout settings (Ratio 4, Margin 200ms, Window 10s, latency probes every
// 2s), E1 is degraded and the group moves to E2: from 20s on at least 90% of the queries
// are served by E2 and the median query takes at most 150ms; no query fails. Once E1 heals
// (20ms), at least 90% of the queries are back on E1 within 30s.
//
// The defaults are used, not shorter ones: this is the case the defaults must handle
// (degraded after about Window + 2 probe intervals, then RecoveryTimeout).
func TestCase_F26_Brownout(t *testing.T) {
	const (
		rt, sd  = time.Second, time.Second
		slow    = 400 * time.Millisecond
		fast    = 20 * time.Millisecond
		workers = 4
	)
	b := startFrontendBackend(t, 2)
	e1, e2 := b.fes[0], b.fes[1]
	e1.SetLatency(slow)
	e2.SetLatency(fast)
	fault := time.Now()
	tl := newEventLog()
	s := tl.settings(fastSettings(nil)) // Health and Brownout: every default
	client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(rt, sd, e1.Addr(), e2.Addr()),
	}), s)
	l := startTimedLoad(t, client, workers, 5*time.Second)

	_, switchedAt := tl.waitSwitch(t, e2.Addr(), 0, 25*time.Second)
	bs, state := brownoutOf(gme, "default", e1.Addr())
	if bs == nil || !bs.Degraded || state == Available || bs.Fallback != e2.Addr() || bs.Latency < slow || bs.FallbackLatency >= slow {
		t.Fatalf("after the switch to E2, E1 in the group: %v, brownout %+v; want degraded against E2\n%s", state, bs, tl)
	}
	from := fault.Add(20 * time.Second)
	time.Sleep(time.Until(from))
	on1, on2 := share(e1, e2, 5*time.Second)
	n, med, failed := l.since(from)
	if on2*10 < (on1+on2)*9 || med > 150*time.Millisecond || len(failed) != 0 {
		t.Fatalf("from 20s into the brownout: %d queries on E1, %d on E2 (want >= 90%% on E2); median of %d queries %v "+
			"(want <= 150ms); %d failed %v\n%s", on1, on2, n, med, len(failed), errors.Join(failed...), tl)
	}

	e1.SetLatency(fast) // E1 heals
	healed := time.Now()
	_, _, idx, _ := tl.switchTo(e2.Addr(), 0)
	_, backAt := tl.waitSwitch(t, e1.Addr(), idx+1, 28*time.Second)
	back1, back2 := share(e1, e2, 2*time.Second)
	backWithin := time.Since(healed)
	if back1*10 < (back1+back2)*9 || backWithin > 30*time.Second {
		t.Fatalf("after E1 healed: %d queries on E1, %d on E2 in the 2s ending %v after (want >= 90%% on E1 within 30s)\n%s",
			back1, back2, backWithin.Round(time.Millisecond), tl)
	}
	if bs, _ := brownoutOf(gme, "default", e1.Addr()); bs == nil || bs.Degraded {
		t.Fatalf("E1 healed and served again, brownout %+v, want not degraded", bs)
	}
	l.end()
	if failed := l.failures(); len(failed) != 0 {
		t.Fatalf("%d queries failed: %v\n%s", len(failed), errors.Join(failed...), tl)
	}
	t.Logf("F26 figures (E1 %v, E2 %v; RecoveryTimeout %v, SwitchingDelay %v, brownout defaults): switched to E2 %v after "+
		"the fault; from 20s: %d queries on E1, %d on E2, median query %v; E1 healed: traffic back %v later, then %d on E1, "+
		"%d on E2 in 2s; no query failed\n%s", slow, fast, rt, sd, switchedAt.Round(time.Millisecond), on1, on2, med,
		(backAt - healed.Sub(tl.start)).Round(time.Millisecond), back1, back2, tl)
}
