package spannerme

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// spannerBackend is ONE in-memory Spanner (spannertest) seeded from testdata, with fake PSC
// endpoints in front of it (F7: sessions live in one backend).
type spannerBackend struct {
	database string
	eps      []*spannermetest.Endpoint
}

func startSpannerBackend(t *testing.T, endpoints int) *spannerBackend {
	t.Helper()
	addr, db := startSeededSpannertest(t)
	b := &spannerBackend{database: db}
	for range endpoints {
		b.eps = append(b.eps, spannermetest.NewEndpointTB(t, addr))
	}
	return b
}

// startSeededSpannertest starts ONE in-memory Spanner seeded from testdata and returns its
// address and database.
func startSeededSpannertest(t *testing.T) (addr, database string) {
	t.Helper()
	srv, db := fixture.StartSpannertest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct, err := fixture.NewClient(ctx, srv.Addr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := fixture.Seed(ctx, direct); err != nil {
		t.Fatalf("seed: %v", err)
	}
	return srv.Addr, db
}

// clientOptions connect without credentials and in plaintext, with no reliance on
// SPANNER_EMULATOR_HOST (F8, F9).
func clientOptions() []option.ClientOption {
	return []option.ClientOption{option.WithoutAuthentication(), option.WithGRPCDialOption(insecureDial)}
}

func newSpannerClient(t *testing.T, b *spannerBackend, o *grpcgcp.GCPMultiEndpointOptions, s Settings) (*spanner.Client, *GCPMultiEndpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, s, clientOptions()...)
	if err != nil {
		t.Fatalf("NewMultiEndpointClientWithSettings: %v", err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	for _, g := range o.MultiEndpoints {
		for _, e := range g.Endpoints {
			waitConnected(t, gme, e)
		}
	}
	return client, gme
}

func countAccounts(ctx context.Context, client *spanner.Client) (int64, error) {
	var n int64
	err := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT COUNT(*) FROM Accounts"}).Do(func(r *spanner.Row) error {
		return r.Column(0, &n)
	})
	return n, err
}

// served runs f and reports which of the endpoints carried the call: the ones that carried
// more than controlBytes from the backend meanwhile. A quiet connection may still carry a
// few HTTP/2 control frames (a ping acknowledgement, a window update) late.
func served(eps []*spannermetest.Endpoint, f func()) []bool {
	const controlBytes = 64
	before := make([]int64, len(eps))
	for i, e := range eps {
		before[i] = e.Stats().BytesFromBackend
	}
	f()
	out := make([]bool, len(eps))
	for i, e := range eps {
		out[i] = e.Stats().BytesFromBackend-before[i] > controlBytes
	}
	return out
}

// F6: queries routed to "read" use the read endpoint (proved by the proxies' counters), the
// rest use the default group; queries, DML, read-write transactions and mutations work
// through both.
func TestCase_F6_RoutedAndDefaultGroups(t *testing.T) {
	b := startSpannerBackend(t, 2)
	e1, e2 := b.eps[0], b.eps[1]
	client, _ := newSpannerClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(time.Second, 0, e1.Addr(), e2.Addr()),
		"read":    group(time.Second, 0, e2.Addr(), e1.Addr()),
	}), fastSettings(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want, err := fixture.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := countAccounts(ctx, client); err != nil { // the session exists
		t.Fatal(err)
	}
	quiesce(t, b.eps...)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want []bool
	}{
		{"default", ctx, []bool{true, false}},
		{"read", NewMEContext(ctx, "read"), []bool{false, true}},
		{"read via grpcgcp.NewMEContext", grpcgcp.NewMEContext(ctx, "read"), []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n int64
			var qerr error
			got := served(b.eps, func() { n, qerr = countAccounts(tc.ctx, client) })
			if qerr != nil || n != int64(len(want)) {
				t.Fatalf("count = %d, %v; want %d", n, qerr, len(want))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("bytes from backend per endpoint = %v, want %v", got, tc.want)
			}
			// DML, a read-write transaction and mutations through the same group.
			id := strings.ReplaceAll(tc.name, " ", "-")
			got = served(b.eps, func() {
				_, qerr = client.ReadWriteTransaction(tc.ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
					// UPDATE, not INSERT: spannertest applies DML outside the transaction, so a
					// retried transaction would find its own inserted row.
					n, err := tx.Update(ctx, spanner.Statement{
						SQL:    "UPDATE Accounts SET Region = @w WHERE AccountId = @acc",
						Params: map[string]any{"acc": want[0].AccountID, "w": tc.name}})
					if err == nil && n != 1 {
						err = fmt.Errorf("UPDATE changed %d rows, want 1", n)
					}
					return err
				})
			})
			if qerr != nil {
				t.Fatalf("DML transaction: %v", qerr)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("DML: bytes from backend per endpoint = %v, want %v", got, tc.want)
			}
			if _, err := client.Apply(tc.ctx, []*spanner.Mutation{spanner.InsertOrUpdate("Orders",
				[]string{"OrderId", "AccountId", "Amount", "Writer"}, []any{"mut-" + id, want[0].AccountID, 2, tc.name})}); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if err := fixture.Transfer(tc.ctx, client, "tx-"+id, want[0].AccountID, want[1].AccountID, 1, tc.name); err != nil {
				t.Fatalf("Transfer: %v", err)
			}
		})
	}
	if n, err := fixture.CountRows(ctx, client, fixture.TableOrders); err != nil || n != 6 {
		t.Errorf("Orders rows = %d, %v; want 6 (a mutation and a transfer per group)", n, err)
	}
}

// quiesce waits until every endpoint has all its pool's connections and no byte moved
// for 100ms, so that byte counters then tell which endpoint served a call.
func quiesce(t *testing.T, eps ...*spannermetest.Endpoint) {
	t.Helper()
	last := ""
	stableSince := time.Now()
	eventually(t, 10*time.Second, "endpoints quiet", func() bool {
		cur := ""
		for _, e := range eps {
			s := e.Stats()
			if s.Active != DefaultPoolSize+latencyConns {
				return false
			}
			cur += fmt.Sprint(s)
		}
		if cur != last {
			last, stableSince = cur, time.Now()
		}
		return time.Since(stableSince) >= 100*time.Millisecond
	})
}

// readLoop queries steadily until stop is closed and counts successes and failures.
type readLoop struct {
	ok, failed atomic.Int64
	lastErr    atomic.Value
	done       chan struct{}
	stop       chan struct{}
}

func startReadLoop(ctx context.Context, client *spanner.Client) *readLoop {
	l := &readLoop{done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := countAccounts(qctx, client)
			cancel()
			if err != nil {
				l.failed.Add(1)
				l.lastErr.Store(err)
			} else {
				l.ok.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return l
}

func (l *readLoop) close() { close(l.stop); <-l.done }

// Failover under a steady read loop: the primary's endpoint goes down, reads keep
// succeeding (the Spanner client retries UNAVAILABLE) and move to the fallback about
// RecoveryTimeout later; when the primary is back, traffic returns after SwitchingDelay.
func TestClient_FailoverAndSwitchBackUnderLoad(t *testing.T) {
	const rt, sd = 500 * time.Millisecond, 300 * time.Millisecond
	b := startSpannerBackend(t, 2)
	e1, e2 := b.eps[0], b.eps[1]
	client, gme := newSpannerClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(rt, sd, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	loop := startReadLoop(context.Background(), client)
	defer loop.close()
	eventually(t, 10*time.Second, "reads flowing", func() bool { return loop.ok.Load() > 20 })

	e2Before := e2.Stats().BytesFromBackend
	down := time.Now()
	e1.Down()
	eventually(t, rt+10*time.Second, "reads served by E2", func() bool {
		return groupOf(gme, "default").Current == e2.Addr() && e2.Stats().BytesFromBackend > e2Before
	})
	failover := time.Since(down)
	okAtFailover := loop.ok.Load()
	eventually(t, 10*time.Second, "reads continue on E2", func() bool { return loop.ok.Load() > okAtFailover+20 })

	if err := e1.Up(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "E1 available", func() bool { return groupOf(gme, "default").Endpoints[0].State == Available })
	back := time.Now()
	e1Before := e1.Stats().BytesFromBackend
	eventually(t, sd+10*time.Second, "reads served by E1 again", func() bool {
		return groupOf(gme, "default").Current == e1.Addr() && e1.Stats().BytesFromBackend > e1Before
	})
	switchBack := time.Since(back)
	t.Logf("failover %v after E1 went down (RecoveryTimeout %v); switch-back %v after E1 was available (SwitchingDelay %v); reads ok %d, failed %d",
		failover.Round(time.Millisecond), rt, switchBack.Round(time.Millisecond), sd, loop.ok.Load(), loop.failed.Load())
	if n := loop.failed.Load(); n != 0 {
		t.Errorf("%d reads failed; last: %v", n, loop.lastErr.Load())
	}
	if switchBack < sd-50*time.Millisecond {
		t.Errorf("switched back after %v, before SwitchingDelay %v", switchBack, sd)
	}
}

// UpdateMultiEndpoints under a steady query load: queries move to the new endpoints and none
// fails.
func TestClient_UpdateUnderLoad(t *testing.T) {
	b := startSpannerBackend(t, 3)
	client, gme := newSpannerClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(time.Second, 0, b.eps[0].Addr()),
	}), fastSettings(nil))
	loop := startReadLoop(context.Background(), client)
	defer loop.close()
	for i, list := range [][]string{
		{b.eps[1].Addr()},
		{b.eps[2].Addr(), b.eps[0].Addr()},
		{b.eps[0].Addr(), b.eps[1].Addr(), b.eps[2].Addr()},
		{b.eps[2].Addr()},
	} {
		if err := gme.UpdateMultiEndpoints(options("default", map[string]*multiendpoint.MultiEndpointOptions{
			"default": group(time.Second, 0, list...)})); err != nil {
			t.Fatal(err)
		}
		before := loop.ok.Load()
		eventually(t, 10*time.Second, fmt.Sprintf("reads after update %d", i), func() bool { return loop.ok.Load() > before+10 })
		var top *spannermetest.Endpoint
		for _, e := range b.eps {
			if e.Addr() == list[0] {
				top = e
			}
		}
		got := served([]*spannermetest.Endpoint{top}, func() { _, _ = countAccounts(context.Background(), client) })
		if !got[0] {
			t.Errorf("update %d: query not served by the new top endpoint %s", i, list[0])
		}
	}
	t.Logf("reads ok %d, failed %d", loop.ok.Load(), loop.failed.Load())
	if n := loop.failed.Load(); n != 0 {
		t.Errorf("%d reads failed; last: %v", n, loop.lastErr.Load())
	}
}

// F5 with the Spanner client: a long streaming query survives the removal of its endpoint.
// Neither spannertest nor the emulator sends resume tokens for small results, so the client
// buffers the whole stream before the first row; a slow reader alone proves nothing. The
// endpoint is bandwidth-limited instead, and bytes still flowing through the removed
// endpoint after the update prove the stream was in flight.
func TestCase_F5_LongQuerySurvivesEndpointRemoval(t *testing.T) {
	const rows, payload = 2000, 1000 // about 2 MB
	b := startSpannerBackend(t, 2)
	e1, e2 := b.eps[0], b.eps[1]
	client, gme := newSpannerClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(time.Second, 0, e1.Addr()),
	}), fastSettings(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fixture.FillEvents(ctx, client, rows, payload); err != nil {
		t.Fatal(err)
	}
	e1.Slow(0, 1<<20) // 1 MiB/s: the query takes about 2 s
	iter := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT EventId, Payload FROM Events ORDER BY EventId"})
	defer iter.Stop()
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		n := 0
		for {
			r, err := iter.Next()
			if n == 0 {
				close(started)
			}
			if err == iterator.Done {
				res <- result{n, nil}
				return
			}
			if err != nil {
				res <- result{n, err}
				return
			}
			var id int64
			var p string
			if err := r.Columns(&id, &p); err != nil || p != fixture.EventPayload(id, payload) {
				res <- result{n, fmt.Errorf("row %d: bad payload (%v)", id, err)}
				return
			}
			n++
		}
	}()
	eventually(t, 10*time.Second, "stream in flight", func() bool { return e1.Stats().BytesFromBackend > 300_000 })
	if err := gme.UpdateMultiEndpoints(options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(time.Second, 0, e2.Addr())})); err != nil {
		t.Fatal(err)
	}
	atUpdate := e1.Stats().BytesFromBackend
	if p, ok := poolOf(gme, e1.Addr()); !ok || !p.Retired || p.InFlight < 1 {
		t.Fatalf("E1 pool right after removal: %+v (found %v); want retired with the stream in flight", p, ok)
	}
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		t.Fatal("query did not finish")
	}
	after := e1.Stats().BytesFromBackend
	t.Logf("rows %d, bytes through the removed endpoint: %d at the update, %d at the end", r.n, atUpdate, after)
	if r.err != nil || r.n != rows {
		t.Fatalf("query read %d rows, err %v; want %d rows", r.n, r.err, rows)
	}
	if after <= atUpdate {
		t.Errorf("no bytes flowed through the removed endpoint after the update: the stream was not in flight")
	}
	got := served(b.eps, func() {
		if _, err := countAccounts(ctx, client); err != nil {
			t.Errorf("query after removal: %v", err)
		}
	})
	if !got[1] {
		t.Errorf("query after removal not served by E2: %v", got)
	}
	eventually(t, 10*time.Second, "removed pool closed", func() bool { _, ok := poolOf(gme, e1.Addr()); return !ok })
}

// Closing the Spanner client closes the GCPMultiEndpoint and every pool (goleak checks the
// goroutines in TestMain); closing the GCPMultiEndpoint afterwards is harmless.
func TestClient_CloseReleasesPools(t *testing.T) {
	b := startSpannerBackend(t, 2)
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(time.Second, 0, b.eps[0].Addr(), b.eps[1].Addr())})
	before := fmt.Sprintf("%+v %+v", *o, *o.MultiEndpoints["default"])
	client, gme, err := NewMultiEndpointClientWithConfig(context.Background(), b.database, fixture.ClientConfig(), o, clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if after := fmt.Sprintf("%+v %+v", *o, *o.MultiEndpoints["default"]); after != before {
		t.Errorf("options changed:\n%s\n%s", before, after)
	}
	if _, err := countAccounts(context.Background(), client); err != nil {
		t.Fatal(err)
	}
	client.Close()
	eventually(t, 10*time.Second, "GCPMultiEndpoint closed", func() bool { return gme.Status().Closed })
	if err := gme.Close(); err != nil {
		t.Errorf("Close after client.Close: %v", err)
	}
	eventually(t, 10*time.Second, "endpoints idle", func() bool {
		return b.eps[0].Stats().Active == 0 && b.eps[1].Stats().Active == 0
	})
}

func TestClient_ConstructionErrorsCloseEverything(t *testing.T) {
	b := startSpannerBackend(t, 1)
	good := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, b.eps[0].Addr())})
	for _, tc := range []struct {
		name     string
		database string
		opts     *grpcgcp.GCPMultiEndpointOptions
		want     string
	}{
		{"invalid config", b.database, options("x", good.MultiEndpoints), "Default names a MultiEndpoint"},
		{"invalid database", "not-a-database", good, "database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, gme, err := NewMultiEndpointClientWithConfig(context.Background(), tc.database, fixture.ClientConfig(), tc.opts, clientOptions()...)
			if err == nil {
				client.Close()
				gme.Close()
				t.Fatal("no error")
			}
			if client != nil || gme != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v, %v; want nil, nil and an error containing %q", client, gme, err, tc.want)
			}
		})
	}
	eventually(t, 10*time.Second, "no connection left", func() bool { return b.eps[0].Stats().Active == 0 })
}

// F8: with SPANNER_EMULATOR_HOST set every group points at the emulator; a warning says that
// failover is not exercised. (Failover tests never set it.)
func TestCase_F8_EmulatorHostCollapsesGroups(t *testing.T) {
	b := startSpannerBackend(t, 1)
	t.Setenv(emulatorHostEnv, b.eps[0].Addr())
	logs := &syncBuffer{}
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, "psc-east4.invalid:443", "psc-east4-fallback.invalid:443"),
		"west":    group(0, 0, "psc-west2.invalid:443"),
	})
	ctx := context.Background()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, fastSettings(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	for _, name := range []string{"default", "west"} {
		if n, err := countAccounts(NewMEContext(ctx, name), client); err != nil || n == 0 {
			t.Fatalf("query via %s: %d, %v", name, n, err)
		}
		if g := groupOf(gme, name); len(g.Endpoints) != 1 || g.Endpoints[0].Endpoint != b.eps[0].Addr() {
			t.Errorf("group %s endpoints %+v, want only the emulator", name, g.Endpoints)
		}
	}
	if !strings.Contains(logs.String(), "failover is not exercised") {
		t.Errorf("no warning logged:\n%s", logs)
	}
	if o.MultiEndpoints["default"].Endpoints[0] != "psc-east4.invalid:443" {
		t.Error("caller's options were modified")
	}
}

// Pool size: ClientConfig.NumChannels sets the channels each pool keeps connected (MinSize);
// the pool may grow to DefaultMaxPoolSize; the Spanner client itself is not given a
// NumChannels it would reject, and no session affinity is configured.
func TestClient_PoolSize(t *testing.T) {
	b := startSpannerBackend(t, 1)
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, b.eps[0].Addr())})
	cfg := fixture.ClientConfig()
	cfg.NumChannels = 3 //lint:ignore SA1019 the pool size rule under test
	client, gme, err := NewMultiEndpointClientWithConfig(context.Background(), b.database, cfg, o, clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	pool := gme.GCPConfig().GetChannelPool()
	if pool.GetMinSize() != 3 || pool.GetMaxSize() != DefaultMaxPoolSize {
		t.Errorf("channel pool %v, want MinSize 3, MaxSize %d", pool, DefaultMaxPoolSize)
	}
	if m := gme.GCPConfig().GetMethod(); len(m) != 0 {
		t.Errorf("affinity methods %v, want none", m)
	}
	eventually(t, 10*time.Second, "3 channels", func() bool { return b.eps[0].Stats().Active == 3+latencyConns })
	if _, err := countAccounts(context.Background(), client); err != nil {
		t.Fatal(err)
	}
}

// F12: with multiplexed sessions every data call carries the same session. With the default
// configuration (no affinity) 64 concurrent queries spread over the pool's channels; with
// upstream's session affinity (SessionAffinityConfig) they are pinned to one.
func TestCase_F12_ChannelSpreadWithMultiplexedSession(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     *pb.ApiConfig
		minUsed int
		maxUsed int
	}{
		{"default spreads over channels", nil, 2, DefaultMaxPoolSize},
		{"session affinity pins to one channel", SessionAffinityConfig(DefaultPoolSize), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startSpannerBackend(t, 1)
			e := b.eps[0]
			o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, e.Addr())})
			o.GRPCgcpConfig = tc.cfg
			client, _ := newSpannerClient(t, b, o, fastSettings(nil))
			eventually(t, 10*time.Second, "4 channels", func() bool { return e.Stats().Active == DefaultPoolSize+latencyConns })
			if _, err := countAccounts(context.Background(), client); err != nil { // the session exists
				t.Fatal(err)
			}
			before := e.ConnStats()
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						if _, err := countAccounts(context.Background(), client); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			used := 0
			after := e.ConnStats()
			for id, st := range after {
				if st.BytesFromBackend > before[id].BytesFromBackend {
					used++
				}
			}
			t.Logf("64 concurrent queries used %d channels", used)
			if used < tc.minUsed || used > tc.maxUsed {
				t.Errorf("used %d channels, want %d to %d", used, tc.minUsed, tc.maxUsed)
			}
		})
	}
}

// F6: once the session exists, routed queries keep working while the Default group is down
// (the start with the Default group down is F29).
func TestCase_F6_DefaultGroupDown(t *testing.T) {
	groups := func(b *spannerBackend) *grpcgcp.GCPMultiEndpointOptions {
		return options("default", map[string]*multiendpoint.MultiEndpointOptions{
			"default": group(0, 0, b.eps[0].Addr()),
			"read":    group(0, 0, b.eps[1].Addr()),
		})
	}
	t.Run("after the session exists", func(t *testing.T) {
		b := startSpannerBackend(t, 2)
		client, gme := newSpannerClient(t, b, groups(b), fastSettings(nil))
		if _, err := countAccounts(context.Background(), client); err != nil {
			t.Fatal(err)
		}
		b.eps[0].Down()
		eventually(t, 10*time.Second, "default group down", func() bool { return groupOf(gme, "default").Endpoints[0].State == Unavailable })
		ctx, cancel := context.WithTimeout(NewMEContext(context.Background(), "read"), 10*time.Second)
		defer cancel()
		for range 10 {
			if _, err := countAccounts(ctx, client); err != nil {
				t.Fatalf("routed query with the default group down: %v", err)
			}
		}
	})
}

// F29: groups "default" [E1] and "read" [E2], E1 down when the client starts. The session the
// routed queries need is created through E2 (session calls follow availability), so they are
// served within 2s of the start; once E1 is back, session calls go to the Default group again.
func TestCase_F29_RegionUpDefaultDown(t *testing.T) {
	b := startSpannerBackend(t, 2)
	b.eps[0].Down()
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, b.eps[0].Addr()),
		"read":    group(0, 0, b.eps[1].Addr()),
	})
	start := time.Now()
	client, gme, err := NewMultiEndpointClientWithSettings(context.Background(), b.database, fixture.ClientConfig(), o, fastSettings(nil), clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	ctx, cancel := context.WithTimeout(NewMEContext(context.Background(), "read"), 2*time.Second)
	defer cancel()
	if _, err := countAccounts(ctx, client); err != nil {
		t.Fatalf("routed query %v after the start with the Default group down: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("first routed query served %v after the client's start", time.Since(start).Round(time.Millisecond))
	sessionCall := func(ctx context.Context) []bool {
		t.Helper()
		var err error
		got := served(b.eps, func() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err = gme.Invoke(cctx, spannerreq.Service+"CreateSession", &spannerpb.CreateSessionRequest{Database: b.database}, &spannerpb.Session{})
		})
		if err != nil {
			t.Fatalf("a session call: %v", err)
		}
		return got
	}
	if got := sessionCall(context.Background()); fmt.Sprint(got) != "[false true]" {
		t.Errorf("session call with the Default group down served by %v, want E2 only", got)
	}
	if err := b.eps[0].Up(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the Default group back", func() bool { return groupOf(gme, "default").Endpoints[0].State == Available })
	if got := sessionCall(context.Background()); fmt.Sprint(got) != "[true false]" {
		t.Errorf("session call once the Default group is back served by %v, want E1 only", got)
	}
	if got := sessionCall(NewMEContext(context.Background(), "read")); fmt.Sprint(got) != "[false true]" {
		t.Errorf("session call naming \"read\" served by %v, want E2: a named group wins", got)
	}
}

// F8: with SPANNER_EMULATOR_HOST set, a runtime update keeps every group on the emulator.
func TestCase_F8_UpdateKeepsEmulatorRewrite(t *testing.T) {
	b := startSpannerBackend(t, 1)
	t.Setenv(emulatorHostEnv, b.eps[0].Addr())
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, "psc-east4.invalid:443")})
	client, gme, err := NewMultiEndpointClientWithSettings(context.Background(), b.database, fixture.ClientConfig(), o, fastSettings(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	if err := gme.UpdateMultiEndpoints(options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, "psc-west2.invalid:443"), "west": group(0, 0, "psc-west2.invalid:443")})); err != nil {
		t.Fatal(err)
	}
	for _, g := range gme.Status().Groups {
		if len(g.Endpoints) != 1 || g.Endpoints[0].Endpoint != b.eps[0].Addr() {
			t.Errorf("group %s after the update: %+v, want only the emulator", g.Name, g.Endpoints)
		}
	}
	if n, err := countAccounts(NewMEContext(context.Background(), "west"), client); err != nil || n == 0 {
		t.Errorf("query after the update: %d, %v", n, err)
	}
}

// F8: with SPANNER_EMULATOR_HOST set, a watched configuration file keeps every group on the
// emulator, at WatchConfig's first reading and at a later reload (both apply the file's
// parsed form, not UpdateMultiEndpoints).
func TestCase_F8_WatchedFileKeepsEmulatorRewrite(t *testing.T) {
	b := startSpannerBackend(t, 1)
	t.Setenv(emulatorHostEnv, b.eps[0].Addr())
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, "psc-east4.invalid:443")})
	gme, err := NewGCPMultiEndpointForSpanner(b.database, fixture.ClientConfig(), o, fastSettings(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	file := func(west string) string {
		return "default: default\nmultiEndpoints:\n  default:\n    endpoints: [psc-east4.invalid:443, psc-east4-b.invalid:443]\n" +
			"  west:\n    endpoints: [" + west + "]\n"
	}
	writeFile(t, path, file("psc-west2.invalid:443"))
	w, err := WatchConfig(gme, path, WatchOptions{Debounce: 20 * time.Millisecond, Settle: 50 * time.Millisecond, Resync: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	onlyEmulator := func(when string) {
		t.Helper()
		st := gme.Status()
		if len(st.Groups) != 2 {
			t.Fatalf("%s: %d groups, want the file's 2", when, len(st.Groups))
		}
		for _, g := range st.Groups {
			if len(g.Endpoints) != 1 || g.Endpoints[0].Endpoint != b.eps[0].Addr() {
				t.Errorf("%s: group %s: %+v, want only the emulator", when, g.Name, g.Endpoints)
			}
		}
		if len(st.Pools) != 1 || st.Pools[0].Endpoint != b.eps[0].Addr() {
			t.Errorf("%s: pools %+v, want the emulator's only", when, st.Pools)
		}
	}
	onlyEmulator("first reading")
	edited := file("psc-west2.invalid:443, psc-west2-b.invalid:443")
	writeByRename(t, path, edited)
	eventually(t, 20*time.Second, "the edit applied", func() bool {
		s := w.Status()
		return s.Applied == 2 && s.Hash == hashOf(edited) && s.LastError == nil
	})
	onlyEmulator("reload")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := NewClient(ctx, b.database, gme, fixture.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if n, err := countAccounts(NewMEContext(ctx, "west"), client); err != nil || n == 0 {
		t.Errorf("query through west after the reload: %d, %v", n, err)
	}
}
