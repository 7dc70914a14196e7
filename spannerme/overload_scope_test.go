package spannerme

import (
	"context"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	sppb "cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// refusingSpanner is a fake Spanner database that refuses, on whichever endpoint it is
// reached, every query whose SQL contains refusedSQL with RESOURCE_EXHAUSTED without a
// RetryInfo (a query over one of its limits), and sheds the fraction shed (in millionths)
// of the other queries with RESOURCE_EXHAUSTED and a RetryInfo of shedDelay (an overloaded
// database).
type refusingSpanner struct {
	fakeSpanner
	shed      atomic.Int64
	shedDelay time.Duration
	mu        sync.Mutex // guards rng
	rng       *rand.Rand
}

const refusedSQL = "SELECT 'over a limit'"

func (s *refusingSpanner) ExecuteStreamingSql(req *sppb.ExecuteSqlRequest, stream sppb.Spanner_ExecuteStreamingSqlServer) error {
	if strings.Contains(req.GetSql(), refusedSQL) {
		return status.Error(codes.ResourceExhausted, "the query exceeded a limit")
	}
	if f := s.shed.Load(); f > 0 {
		s.mu.Lock()
		shed := s.rng.Int64N(1_000_000) < f
		s.mu.Unlock()
		if shed {
			st, err := status.New(codes.ResourceExhausted, "the database is overloaded").
				WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(s.shedDelay)})
			if err != nil {
				return err
			}
			return st.Err()
		}
	}
	return stream.Send(fakeResult)
}

// overloadRig is a client over [E1 E2], two frontends in front of ONE refusingSpanner, with
// the query streams each endpoint's pool starts counted.
type overloadRig struct {
	db      *refusingSpanner
	e1, e2  *spannermetest.Frontend
	client  *spanner.Client
	gme     *GCPMultiEndpoint
	tl      *eventLog
	streams *streamCounter
}

func newOverloadRig(t *testing.T) *overloadRig {
	t.Helper()
	r := &overloadRig{db: &refusingSpanner{shedDelay: 300 * time.Millisecond, rng: rand.New(rand.NewPCG(1, 2))},
		tl: newEventLog(), streams: &streamCounter{started: map[string]int{}}}
	srv := grpc.NewServer()
	sppb.RegisterSpannerServer(srv, r.db)
	backend := serveOn(t, srv)
	r.e1 = spannermetest.NewFrontendTB(t, backend)
	r.e2 = spannermetest.NewFrontendTB(t, backend)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	r.client, r.gme, err = NewMultiEndpointClientWithSettings(ctx, fixture.SpannertestDatabase, fixture.ClientConfig(),
		options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(time.Second, time.Second, r.e1.Addr(), r.e2.Addr())}),
		r.tl.settings(fastSettings(nil)), append(clientOptions(), r.streams.option())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.client.Close(); r.gme.Close() })
	waitConnected(t, r.gme, r.e1.Addr())
	waitConnected(t, r.gme, r.e2.Addr())
	return r
}

// query runs sql once with a 10 s deadline.
func (r *overloadRig) query(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.client.Single().Query(ctx, spanner.Statement{SQL: sql}).Do(func(*spanner.Row) error { return nil })
}

// workers runs n workers of "SELECT 1" until ctx ends and returns the counts of queries that
// succeeded and failed, once they have stopped.
func (r *overloadRig) workers(ctx context.Context, n int) (ok, failed *atomic.Int64, wait func()) {
	ok, failed = new(atomic.Int64), new(atomic.Int64)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := r.query("SELECT 1"); err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	return ok, failed, wg.Wait
}

// A query that the database refuses with RESOURCE_EXHAUSTED without RetryInfo, on every
// endpoint, sent every 50 ms beside 4 workers of other queries: each refused query fails with
// RESOURCE_EXHAUSTED after one frontend call (the Spanner client does not retry it, and no
// endpoint cools for it), the other queries stay on E1 and none fails, and the group does not
// switch.
func TestOverloadOfOneQueryMovesNothing(t *testing.T) {
	r := newOverloadRig(t)
	r.streams.take()
	before := r.e1.Stats().Methods[methodQuery].Received + r.e2.Stats().Methods[methodQuery].Received
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	ok, failed, wait := r.workers(ctx, 4)
	refused, wrong := 0, 0
	tick := time.NewTicker(50 * time.Millisecond)
	for ctx.Err() == nil {
		err := r.query(refusedSQL)
		if spanner.ErrCode(err) == codes.ResourceExhausted {
			refused++
		} else {
			wrong++
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	tick.Stop()
	wait()
	calls := r.e1.Stats().Methods[methodQuery].Received + r.e2.Stats().Methods[methodQuery].Received - before
	n := r.streams.take(r.e1.Addr(), r.e2.Addr())
	t.Logf("%d refused queries (%d answered otherwise); %d frontend query calls for them and %d others; streams on E1 %d, E2 %d; other queries %d ok, %d failed",
		refused, wrong, calls-int64(ok.Load()+failed.Load()), ok.Load()+failed.Load(), n[0], n[1], ok.Load(), failed.Load())
	if refused == 0 || wrong != 0 {
		t.Fatalf("%d refused queries failed with RESOURCE_EXHAUSTED, %d otherwise", refused, wrong)
	}
	if perQuery := float64(calls-ok.Load()-failed.Load()) / float64(refused); perQuery > 1.5 {
		t.Errorf("%.2f frontend calls per refused query, want at most 1.5", perQuery)
	}
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Errorf("other queries: %d failed, %d succeeded", failed.Load(), ok.Load())
	}
	if share := float64(n[1]) / float64(n[0]+n[1]); share > 0.05 {
		t.Errorf("%.1f%% of the query streams went to E2, want at most 5%%", 100*share)
	}
	if _, _, _, switched := r.tl.switchTo(r.e2.Addr(), 0); switched {
		t.Error("the group switched to E2")
	}
	if c := r.gme.steering.Counts(); c.OverloadQuery == 0 {
		t.Errorf("counts %+v: no RESOURCE_EXHAUSTED counted as the query's", c)
	}
}

// The same refused query sent again and again with nothing else ending on E1 between (as when
// the endpoint's other calls are slow, or go elsewhere): after steer.OverloadStreak refusals
// in a row E1 is probed, the probe is answered, and E1 never cools: each query fails after
// one frontend call, and the next other query still goes to E1.
func TestOverloadOfOneQueryAloneCoolsNothing(t *testing.T) {
	r := newOverloadRig(t)
	r.streams.take()
	before := r.e1.Stats().Methods[methodQuery].Received + r.e2.Stats().Methods[methodQuery].Received
	const n = 30
	for i := range n {
		if err := r.query(refusedSQL); spanner.ErrCode(err) != codes.ResourceExhausted {
			t.Fatalf("refused query %d: %v, want RESOURCE_EXHAUSTED", i, err)
		}
	}
	eventually(t, 10*time.Second, "a probe of E1 answered after the streak", func() bool {
		return r.gme.steering.Counts().OverloadChecked > 0
	})
	// The probe asked E1 with a query, the refused calls' path (SpannerProbe's reads probe is
	// an ExecuteSql; the application's queries are streams).
	if got := r.e1.Stats().Methods["/google.spanner.v1.Spanner/ExecuteSql"].Received; got == 0 {
		t.Error("E1 received no ExecuteSql: the probe did not ask it with a query")
	}
	if err := r.query("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	calls := r.e1.Stats().Methods[methodQuery].Received + r.e2.Stats().Methods[methodQuery].Received - before
	streams := r.streams.take(r.e1.Addr(), r.e2.Addr())
	ph, _ := poolOf(r.gme, r.e1.Addr())
	c := r.gme.steering.Counts()
	t.Logf("%d refused queries: %d frontend query calls in all; streams on E1 %d, E2 %d; E1 cooldown %+v; counts %+v",
		n, calls, streams[0], streams[1], ph.Cooldown, c)
	if ph.Cooldown != nil && ph.Cooldown.Total != 0 {
		t.Errorf("E1 cooled %d times for one query's refusals", ph.Cooldown.Total)
	}
	if calls != n+1 || streams[1] != 0 {
		t.Errorf("%d frontend query calls, %d of them on E2; want %d, none", calls, streams[1], n+1)
	}
}

// The database sheds 30% of the queries with RESOURCE_EXHAUSTED and a 300 ms RetryInfo on
// every endpoint for 8 s under 8 workers: the first overload cools E1, and the calls sent to
// E2 meet the same, so the overload is the database's: E2 carries at most 20% of the
// queries, the group does not switch, at most 1% of queries fail, and E1 carries at least 90%
// in the second after.
func TestOverloadOfTheDatabaseKeepsTheGroup(t *testing.T) {
	r := newOverloadRig(t)
	r.streams.take()
	r.db.shed.Store(300_000)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	ok, failed, wait := r.workers(ctx, 8)
	<-ctx.Done()
	cancel()
	wait()
	n := r.streams.take(r.e1.Addr(), r.e2.Addr())
	r.db.shed.Store(0)
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	ok2, failed2, wait2 := r.workers(ctx2, 8)
	<-ctx2.Done()
	cancel2()
	wait2()
	after := r.streams.take(r.e1.Addr(), r.e2.Addr())
	c := r.gme.steering.Counts()
	t.Logf("while shed: streams on E1 %d, E2 %d; queries %d ok, %d failed; the second after: E1 %d, E2 %d (%d ok, %d failed); counts %+v",
		n[0], n[1], ok.Load(), failed.Load(), after[0], after[1], ok2.Load(), failed2.Load(), c)
	if share := float64(n[1]) / float64(n[0]+n[1]); share > 0.20 {
		t.Errorf("%.1f%% of the query streams went to E2 while the database shed load, want at most 20%%", 100*share)
	}
	if f := float64(failed.Load()) / float64(ok.Load()+failed.Load()); f > 0.01 || ok.Load() == 0 {
		t.Errorf("%.2f%% of the queries failed (%d ok), want at most 1%%", 100*f, ok.Load())
	}
	if share := float64(after[0]) / float64(after[0]+after[1]); share < 0.9 {
		t.Errorf("E1 carried %.1f%% of the streams in the second after, want at least 90%%", 100*share)
	}
	if _, _, _, switched := r.tl.switchTo(r.e2.Addr(), 0); switched {
		t.Error("the group switched to E2")
	}
	if c.OverloadShared == 0 {
		t.Error("no RESOURCE_EXHAUSTED counted as the database's")
	}
}

// An overload of E1 alone (RetryInfo 3 s) still cools E1 at the first call that meets it
// (a query, or a call the client makes meanwhile): E1 refuses one call in all, and the
// queries go to E2 and succeed.
func TestOverloadOfOneEndpointStillCoolsIt(t *testing.T) {
	r := newOverloadRig(t)
	r.e1.SetRetryDelay(3 * time.Second)
	if err := r.e1.FailAll(codes.ResourceExhausted); err != nil {
		t.Fatal(err)
	}
	r.streams.take()
	for i := range 10 {
		if err := r.query("SELECT 1"); err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
	}
	n := r.streams.take(r.e1.Addr(), r.e2.Addr())
	if refused := r.e1.Stats().Failed; refused != 1 || n[0] > 1 || n[1] < 10 {
		t.Fatalf("E1 refused %d calls; query streams on [E1 E2] = %v; want 1 refused, the queries on E2", refused, n)
	}
	if p, _ := poolOf(r.gme, r.e1.Addr()); p.Cooldown == nil || !p.Cooldown.Cooling || p.Cooldown.Length != 3*time.Second {
		t.Fatalf("E1 cooldown %+v, want cooling for 3s", p.Cooldown)
	}
}

// serveOn serves srv on 127.0.0.1:0 until the test ends and returns its address.
func serveOn(tb testing.TB, srv *grpc.Server) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	tb.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}
