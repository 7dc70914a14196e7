package integration_test

// Three databases of one emulator instance through one GCPMultiEndpoint
// (spannerme.NewGCPMultiEndpointForSpanner, NewClient, Configurator), behind three fake PSC
// endpoints in front of the emulator. The same stories on spannertest, whose one store
// serves every database name, are in spannerme/shared_test.go.

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"go.uber.org/goleak"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// offlineOptions connect in plaintext without credentials, SPANNER_EMULATOR_HOST unset.
func offlineOptions() []option.ClientOption {
	return []option.ClientOption{option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
}

// orderCount is the number of rows in db's Orders table.
func orderCount(ctx context.Context, client *spanner.Client) (int64, error) {
	var n int64
	err := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT COUNT(*) FROM Orders"}).Do(func(r *spanner.Row) error {
		return r.Column(0, &n)
	})
	return n, err
}

// probeStreams counts the probes in flight per channel pool and the most at once.
type probeStreams struct {
	mu       sync.Mutex // guards the maps
	inFlight map[grpc.ClientConnInterface]int
	most     map[grpc.ClientConnInterface]int
	sent     atomic.Int64
}

func (p *probeStreams) wrap(probe spannerme.ProbeFunc) spannerme.ProbeFunc {
	return func(ctx context.Context, conn grpc.ClientConnInterface) error {
		p.mu.Lock()
		p.inFlight[conn]++
		p.most[conn] = max(p.most[conn], p.inFlight[conn])
		p.mu.Unlock()
		p.sent.Add(1)
		defer func() {
			p.mu.Lock()
			p.inFlight[conn]--
			p.mu.Unlock()
		}()
		return probe(ctx, conn)
	}
}

func (p *probeStreams) pools() (probed, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.most {
		most = max(most, m)
	}
	return len(p.most), most
}

// Three databases of one emulator instance over one GCPMultiEndpoint: each client reads and
// writes its own database; the endpoints carry one pool each (endpoints x MinSize
// connections) and one probe at a time; closing one client leaves the others serving;
// Configurator's clients (Spanner and admin) come and go through 20 database/sql driver
// lifetimes under another client's queries without a failure or a leaked goroutine; a failover
// moves all of them together, and e1's pool is back to its MinSize connections after it;
// after gme.Close every client fails at once with CANCELED. The driver's lifetimes come
// before the failover, on pools that have had no outage: the check for goroutines left
// behind counts every goroutine started after its snapshot, and pools reconnecting after an
// outage start some.
func TestSharedGCPMultiEndpoint_EmulatorThreeDatabases(t *testing.T) {
	dbs, eps, addrs := emulatorDatabases(t, 3)
	logs := &syncBuffer{}
	probes := &probeStreams{inFlight: map[grpc.ClientConnInterface]int{}, most: map[grpc.ClientConnInterface]int{}}
	settings := spannerme.Settings{
		ReconnectMaxDelay: 200 * time.Millisecond,
		MinConnectTimeout: minConnectTimeout,
		Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	settings.Health.ProbeInterval = 100 * time.Millisecond
	// The probe counts are of health probes; brownout's latency probes (the same function,
	// one more at a time per endpoint) would add to them.
	settings.Health.Brownout.Disabled = true
	settings.Health.Probe = probes.wrap(spannerme.SpannerProbe(dbs[0]))
	gme, err := spannerme.NewGCPMultiEndpointForSpanner(dbs[0], fixture.ClientConfig(),
		options(map[string]*multiendpointOptions{"default": group(recoveryTimeout, switchingDelay, addrs...)}), settings, offlineOptions()...)
	if err != nil {
		t.Fatalf("NewGCPMultiEndpointForSpanner: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
		gme.Close()
	})
	status := func() spannerme.Status { return gme.Status() }
	waitFor := func(within time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, within)
			}
			time.Sleep(poll)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var clients []*spanner.Client
	for i, db := range dbs {
		c, err := spannerme.NewClient(ctx, db, gme, fixture.ClientConfig(), offlineOptions()...)
		if err != nil {
			t.Fatalf("NewClient(%s): %v", db, err)
		}
		t.Cleanup(c.Close)
		clients = append(clients, c)
		// Database i gets i+1 orders, so each count proves which database answered.
		for j := range i + 1 {
			if _, err := c.Apply(ctx, []*spanner.Mutation{spanner.Insert("Orders", []string{"OrderId", "AccountId", "Amount"},
				[]any{fmt.Sprintf("shared-%d", j), "acct-1", int64(j)})}); err != nil {
				t.Fatalf("insert into %s: %v", db, err)
			}
		}
	}
	for i, c := range clients {
		if n, err := orderCount(ctx, c); err != nil || n != int64(i+1) {
			t.Fatalf("orders of %s = %d, %v; want %d", dbs[i], n, err, i+1)
		}
	}
	if got := status().Clients; got != 3 {
		t.Errorf("Status().Clients = %d, want 3", got)
	}

	minSize := int64(gme.GCPConfig().GetChannelPool().GetMinSize())
	wantConns := int64(len(eps)) * minSize
	conns := func() int64 {
		var n int64
		for _, e := range eps {
			n += e.Stats().Active
		}
		return n
	}
	waitFor(10*time.Second, fmt.Sprintf("%d connections (endpoints x MinSize)", wantConns), func() bool { return conns() == wantConns })
	waitFor(10*time.Second, "10 probes of the standbys", func() bool { return probes.sent.Load() >= 10 })
	if probed, most := probes.pools(); probed > len(eps) || most != 1 {
		t.Errorf("probes on %d pools, up to %d at once on one; want at most %d pools, 1 at a time", probed, most, len(eps))
	}

	// Closing one client leaves the others serving.
	clients[2].Close()
	if st := status(); st.Closed || st.Clients != 2 {
		t.Fatalf("after closing one client: Closed %v, Clients %d; want open, 2", st.Closed, st.Clients)
	}
	for i, c := range clients[:2] {
		if n, err := orderCount(ctx, c); err != nil || n != int64(i+1) {
			t.Fatalf("orders of %s after another client closed = %d, %v", dbs[i], n, err)
		}
	}

	// database/sql's lifecycle through Configurator, under another client's queries, as
	// go-sql-spanner runs it (driver.go): the Configurator once, when the connector is
	// created; on each first Connect a Spanner client and a database admin client with the
	// options it gave; both closed when the last connection closes.
	config, opts := fixture.ClientConfig(), offlineOptions()
	spannerme.Configurator(gme)(&config, &opts)
	before := goleak.IgnoreCurrent() // the Configurator's one connection lives until gme.Close
	var queries, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	fail := func(err error) {
		failed.Add(1)
		firstErr.CompareAndSwap(nil, &err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			queries.Add(1)
			if n, err := orderCount(ctx, clients[0]); err != nil || n != 1 {
				if err == nil {
					err = fmt.Errorf("%d orders, want 1", n)
				}
				fail(err)
			}
		}
	}()
	for cycle := range 20 {
		driver, err := spanner.NewClientWithConfig(ctx, dbs[1], config, opts...)
		if err != nil {
			t.Fatalf("cycle %d: NewClientWithConfig: %v", cycle, err)
		}
		admin, err := database.NewDatabaseAdminClient(ctx, opts...)
		if err != nil {
			t.Fatalf("cycle %d: NewDatabaseAdminClient: %v", cycle, err)
		}
		queries.Add(2)
		if n, err := orderCount(ctx, driver); err != nil || n != 2 {
			if err == nil {
				err = fmt.Errorf("%d orders, want 2", n)
			}
			fail(err)
		}
		if _, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: dbs[1]}); err != nil {
			fail(fmt.Errorf("GetDatabaseDdl: %w", err))
		}
		driver.Close()
		if err := admin.Close(); err != nil {
			t.Errorf("cycle %d: admin client Close: %v", cycle, err)
		}
		if st := status(); st.Closed || st.Clients != 2 || st.Configurators != 1 {
			t.Fatalf("cycle %d: after the driver's clients closed: Closed %v, Clients %d, Configurators %d; want open, 2, 1",
				cycle, st.Closed, st.Clients, st.Configurators)
		}
	}
	close(stop)
	<-done
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d queries failed; first: %v", n, queries.Load(), *firstErr.Load())
	}
	t.Logf("database/sql lifecycle: 20 cycles, %d queries, none failed", queries.Load())
	if err := goleak.Find(before, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
		t.Errorf("goroutines left after 20 driver cycles: %v", err)
	}

	// A failover moves every client together.
	eps[0].Down()
	waitFor(10*time.Second, "failover to e2", func() bool {
		for _, g := range status().Groups {
			if g.Name == "default" {
				return g.Current == addrs[1]
			}
		}
		return false
	})
	for i, c := range clients[:2] {
		before := eps[1].Stats().BytesFromBackend
		if n, err := orderCount(ctx, c); err != nil || n != int64(i+1) {
			t.Fatalf("orders of %s after the failover = %d, %v", dbs[i], n, err)
		}
		if eps[1].Stats().BytesFromBackend-before <= controlBytes {
			t.Errorf("%s after the failover not served by e2", dbs[i])
		}
	}
	if err := eps[0].Up(); err != nil {
		t.Fatal(err)
	}
	waitFor(10*time.Second, "switch back to e1", func() bool {
		for _, g := range status().Groups {
			if g.Name == "default" {
				return g.Current == addrs[0]
			}
		}
		return false
	})
	// The outage's lifetimes are no maximum connection age (the endpoint refused connections
	// meanwhile): e1's pool is back to MinSize connections, with no replacement beside them.
	waitFor(10*time.Second, fmt.Sprintf("%d connections again after e1's outage", wantConns), func() bool { return conns() == wantConns })
	// A replacement would come at half the age taken (e1's connections lived about 0.4 s) and
	// stay: watch for a second.
	accepted := eps[0].Stats().Accepted
	time.Sleep(time.Second)
	if n, more := conns(), eps[0].Stats().Accepted-accepted; n != wantConns || more != 0 {
		t.Errorf("a second later: %d connections (want %d), %d more accepted by e1 (want 0)", n, wantConns, more)
	}

	// After gme.Close: CANCELED at once, with ErrClosed's text.
	if err := gme.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients[:2] {
		start := time.Now()
		_, err := orderCount(ctx, c)
		if spanner.ErrCode(err) != codes.Canceled || !strings.Contains(err.Error(), spannerme.ErrClosed.Error()) {
			t.Errorf("query of %s after gme.Close: %v, want CANCELED with %q", dbs[i], err, spannerme.ErrClosed)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("query of %s after gme.Close took %v", dbs[i], d)
		}
	}
}

// settledGoroutines returns the number of goroutines once it has stopped changing (at most
// one second of 20ms steps).
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			break
		}
		n = m
	}
	return n
}

// liveHeap is the live heap after a collection, in bytes.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// Three emulator databases through one shared GCPMultiEndpoint against three separate
// multi-endpoint clients, one after the other in one run: connections (asserted: endpoints x
// MinSize against three times that), goroutines (asserted: fewer shared) and live heap
// (logged). The emulator is another process, so the goroutines are the clients' and the fake
// endpoints' (in this process).
// latencyConns is the number of connections to its endpoint that a pool keeps besides its
// channels while brownout detection is on (the default): its latency connection
// (docs/channels.md).
const latencyConns = 1

func TestSharedGCPMultiEndpoint_EmulatorResources(t *testing.T) {
	dbs, eps, addrs := emulatorDatabases(t, 2)
	o := options(map[string]*multiendpointOptions{"default": group(recoveryTimeout, switchingDelay, addrs...)})
	settings := spannerme.Settings{ReconnectMaxDelay: 200 * time.Millisecond, MinConnectTimeout: minConnectTimeout,
		Logger: slog.New(slog.NewTextHandler(&syncBuffer{}, nil))}
	conns := func() int64 {
		var n int64
		for _, e := range eps {
			n += e.Stats().Active
		}
		return n
	}
	waitConns := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for conns() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections, want %d", conns(), want)
			}
			time.Sleep(poll)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	use := func(clients []*spanner.Client) {
		for range 5 {
			for i, c := range clients {
				if _, err := orderCount(ctx, c); err != nil {
					t.Fatalf("query of %s: %v", dbs[i], err)
				}
			}
		}
	}
	type cost struct {
		conns      int64
		goroutines int
		heap       int64
	}
	measure := func(build func() (closeAll func())) cost {
		g0, h0 := settledGoroutines(), liveHeap()
		closeAll := build()
		c := cost{conns: conns(), goroutines: settledGoroutines() - g0, heap: liveHeap() - h0}
		closeAll()
		waitConns(0)
		return c
	}
	var minSize int64
	shared := measure(func() func() {
		gme, err := spannerme.NewGCPMultiEndpointForSpanner(dbs[0], fixture.ClientConfig(), o, settings, offlineOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		minSize = int64(gme.GCPConfig().GetChannelPool().GetMinSize())
		var clients []*spanner.Client
		for _, db := range dbs {
			c, err := spannerme.NewClient(ctx, db, gme, fixture.ClientConfig(), offlineOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		use(clients)
		waitConns(int64(len(eps)) * (minSize + latencyConns))
		return func() {
			for _, c := range clients {
				c.Close()
			}
			gme.Close()
		}
	})
	separate := measure(func() func() {
		var clients []*spanner.Client
		var gmes []*spannerme.GCPMultiEndpoint
		for _, db := range dbs {
			c, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, db, fixture.ClientConfig(), o, settings, offlineOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			clients, gmes = append(clients, c), append(gmes, gme)
		}
		use(clients)
		waitConns(3 * int64(len(eps)) * (minSize + latencyConns))
		return func() {
			for i, c := range clients {
				c.Close()
				gmes[i].Close()
			}
		}
	})
	t.Logf("emulator, 3 databases, %d endpoints, MinSize %d: shared GCPMultiEndpoint: %d connections, %d goroutines, %d KiB heap; "+
		"3 separate clients: %d connections, %d goroutines, %d KiB heap",
		len(eps), minSize, shared.conns, shared.goroutines, shared.heap/1024, separate.conns, separate.goroutines, separate.heap/1024)
	if want := int64(len(eps)) * (minSize + latencyConns); shared.conns != want || separate.conns != 3*want {
		t.Errorf("connections: shared %d, separate %d; want %d and %d", shared.conns, separate.conns, want, 3*want)
	}
	if shared.goroutines >= separate.goroutines {
		t.Errorf("goroutines: shared %d, separate %d; want fewer shared", shared.goroutines, separate.goroutines)
	}
}

// emulatorDatabases creates three seeded databases in the shared emulator's instance and n
// fake PSC endpoints in front of the emulator; it returns the databases' paths, the endpoints
// and their addresses. It skips the test (or fails it under CI=true) without the emulator.
func emulatorDatabases(t *testing.T, n int) (dbs []string, eps []*spannermetest.Endpoint, addrs []string) {
	t.Helper()
	emu := emulator.Shared(t)
	ddl, err := fixture.Schema()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b := backend{name: "emulator", addr: emu.Addr(), database: emu.NewDatabase(t, ddl), writers: 1}
		seed(t, b)
		dbs = append(dbs, b.database)
	}
	for range n {
		e := spannermetest.NewEndpointTB(t, emu.Addr())
		eps, addrs = append(eps, e), append(addrs, e.Addr())
	}
	return dbs, eps, addrs
}
