package spannerme

// Spanner clients over a GCPMultiEndpoint they do not own (client.go): NewClient and
// Configurator, against ONE in-memory Spanner behind fake PSC endpoints. spannertest serves
// every database name from one store, so "three databases" here are three database paths
// of one backend; integration_test runs the same story on three real databases of the
// emulator.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.uber.org/goleak"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// probeCounter wraps a probe and counts, per channel pool it is called on, the probes sent
// and the most in flight at once.
type probeCounter struct {
	mu       sync.Mutex // guards the maps
	inFlight map[grpc.ClientConnInterface]int
	most     map[grpc.ClientConnInterface]int
	sent     map[grpc.ClientConnInterface]int
}

func newProbeCounter() *probeCounter {
	return &probeCounter{inFlight: map[grpc.ClientConnInterface]int{}, most: map[grpc.ClientConnInterface]int{}, sent: map[grpc.ClientConnInterface]int{}}
}

func (c *probeCounter) wrap(p ProbeFunc) ProbeFunc {
	return func(ctx context.Context, conn grpc.ClientConnInterface) error {
		c.mu.Lock()
		c.inFlight[conn]++
		c.sent[conn]++
		c.most[conn] = max(c.most[conn], c.inFlight[conn])
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.inFlight[conn]--
			c.mu.Unlock()
		}()
		return p(ctx, conn)
	}
}

// pools returns how many channel pools were probed, the probes sent in all, and the most
// probes in flight at once on any one pool.
func (c *probeCounter) pools() (probed, sent, most int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn, m := range c.most {
		most = max(most, m)
		sent += c.sent[conn]
	}
	return len(c.sent), sent, most
}

// sharedSettings are fastSettings with standbys and idle endpoints probed every 50ms
// through counter.
func sharedSettings(database string, counter *probeCounter) Settings {
	s := fastSettings(nil)
	s.Health.ProbeInterval = 50 * time.Millisecond
	s.Health.Probe = counter.wrap(SpannerProbe(database))
	// The probe counts are of health probes; brownout's latency probes (the same function,
	// one more at a time per endpoint) would add to them.
	s.Health.Brownout.Disabled = true
	return s
}

// databases returns n database paths of b's instance.
func databases(b *spannerBackend, n int) []string {
	instance := b.database[:strings.LastIndex(b.database, "/")]
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/db%d", instance, i+1)
	}
	return out
}

// newSharedGME returns a GCPMultiEndpoint for shared clients over one group of b's endpoints
// in order, once every pool is READY; it is closed at the end of the test.
func newSharedGME(t *testing.T, b *spannerBackend, s Settings) *GCPMultiEndpoint {
	t.Helper()
	var addrs []string
	for _, e := range b.eps {
		addrs = append(addrs, e.Addr())
	}
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(200*time.Millisecond, 0, addrs...)})
	gme, err := NewGCPMultiEndpointForSpanner(b.database, fixture.ClientConfig(), o, s, clientOptions()...)
	if err != nil {
		t.Fatalf("NewGCPMultiEndpointForSpanner: %v", err)
	}
	t.Cleanup(func() { gme.Close() })
	for _, a := range addrs {
		waitConnected(t, gme, a)
	}
	return gme
}

// newSharedClient returns NewClient's client for database over gme, closed at the end of
// the test.
func newSharedClient(t *testing.T, gme *GCPMultiEndpoint, database string) *spanner.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := NewClient(ctx, database, gme, fixture.ClientConfig(), clientOptions()...)
	if err != nil {
		t.Fatalf("NewClient(%s): %v", database, err)
	}
	t.Cleanup(client.Close)
	return client
}

// activeConns is the number of live client connections across eps.
func activeConns(eps []*spannermetest.Endpoint) int64 {
	var n int64
	for _, e := range eps {
		n += e.Stats().Active
	}
	return n
}

// Three clients of three databases over one GCPMultiEndpoint use one set of pools (one
// pool's MinSize connections per endpoint, not three), one probe at a time per endpoint,
// and all serve queries; Status counts them.
func TestShared_ThreeDatabasesShareOnePoolPerEndpoint(t *testing.T) {
	b := startSpannerBackend(t, 2)
	counter := newProbeCounter()
	gme := newSharedGME(t, b, sharedSettings(b.database, counter))
	minSize := int64(gme.GCPConfig().GetChannelPool().GetMinSize())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, db := range databases(b, 3) {
		if _, err := countAccounts(ctx, newSharedClient(t, gme, db)); err != nil {
			t.Fatalf("query of %s: %v", db, err)
		}
	}
	if got := gme.Status().Clients; got != 3 {
		t.Errorf("Status().Clients = %d, want 3", got)
	}
	want := int64(len(b.eps)) * minSize
	eventually(t, 10*time.Second, fmt.Sprintf("%d connections (endpoints x MinSize)", want), func() bool { return activeConns(b.eps) == want })
	// The standby is probed every 50ms: let a few rounds run, then count.
	eventually(t, 10*time.Second, "5 probe rounds", func() bool { _, sent, _ := counter.pools(); return sent >= 5 })
	probed, _, most := counter.pools()
	if probed > len(b.eps) || most != 1 {
		t.Errorf("probes went to %d pools with up to %d in flight on one; want at most %d pools (one per endpoint), 1 in flight", probed, most, len(b.eps))
	}
	if got := activeConns(b.eps); got != want {
		t.Errorf("%d connections after the probes, want %d", got, want)
	}
}

// settleGoroutines returns the number of goroutines once it has stopped changing (bounded).
func settleGoroutines() int {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// heapInUse is the live heap after a collection, in bytes.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Three databases through one shared GCPMultiEndpoint cost one set of pools; three separate
// multi-endpoint clients cost three. Measured in one run, one after the other: connections
// (asserted), goroutines (asserted: fewer shared) and live heap (logged).
func TestShared_ResourcesAgainstSeparateClients(t *testing.T) {
	b := startSpannerBackend(t, 2)
	dbs := databases(b, 3)
	var addrs []string
	for _, e := range b.eps {
		addrs = append(addrs, e.Addr())
	}
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(200*time.Millisecond, 0, addrs...)})
	type cost struct {
		conns      int64
		goroutines int
		heap       int64
	}
	measure := func(build func() (closeAll func())) cost {
		g0, h0 := settleGoroutines(), heapInUse()
		closeAll := build()
		c := cost{conns: activeConns(b.eps), goroutines: settleGoroutines() - g0, heap: int64(heapInUse()) - int64(h0)}
		closeAll()
		eventually(t, 10*time.Second, "connections closed", func() bool { return activeConns(b.eps) == 0 })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	query := func(clients []*spanner.Client) {
		for range 5 {
			for i, c := range clients {
				if _, err := countAccounts(ctx, c); err != nil {
					t.Fatalf("query of %s: %v", dbs[i], err)
				}
			}
		}
	}
	var minSize int64
	shared := measure(func() func() {
		gme, err := NewGCPMultiEndpointForSpanner(b.database, fixture.ClientConfig(), o, fastSettings(nil), clientOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		minSize = int64(gme.GCPConfig().GetChannelPool().GetMinSize())
		var clients []*spanner.Client
		for _, db := range dbs {
			c, err := NewClient(ctx, db, gme, fixture.ClientConfig(), clientOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		query(clients)
		eventually(t, 10*time.Second, "pools connected", func() bool { return activeConns(b.eps) == int64(len(addrs))*(minSize+latencyConns) })
		return func() {
			for _, c := range clients {
				c.Close()
			}
			gme.Close()
		}
	})
	separate := measure(func() func() {
		var clients []*spanner.Client
		var gmes []*GCPMultiEndpoint
		for _, db := range dbs {
			c, gme, err := NewMultiEndpointClientWithSettings(ctx, db, fixture.ClientConfig(), o, fastSettings(nil), clientOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			clients, gmes = append(clients, c), append(gmes, gme)
		}
		query(clients)
		eventually(t, 10*time.Second, "pools connected", func() bool { return activeConns(b.eps) == 3*int64(len(addrs))*(minSize+latencyConns) })
		return func() {
			for i, c := range clients {
				c.Close()
				gmes[i].Close()
			}
		}
	})
	t.Logf("3 databases, %d endpoints, MinSize %d: shared GCPMultiEndpoint: %d connections, %d goroutines, %d KiB heap; "+
		"3 separate clients: %d connections, %d goroutines, %d KiB heap",
		len(addrs), minSize, shared.conns, shared.goroutines, shared.heap/1024, separate.conns, separate.goroutines, separate.heap/1024)
	if want := int64(len(addrs)) * (minSize + latencyConns); shared.conns != want {
		t.Errorf("shared: %d connections, want %d (endpoints x (MinSize + the latency connection))", shared.conns, want)
	}
	if separate.conns != 3*shared.conns {
		t.Errorf("separate: %d connections, want 3 x %d", separate.conns, shared.conns)
	}
	if shared.goroutines >= separate.goroutines {
		t.Errorf("shared: %d goroutines, separate: %d; want fewer shared", shared.goroutines, separate.goroutines)
	}
}

// Closing one shared client leaves the GCPMultiEndpoint open and the other clients serving;
// a failover of the one group moves every client's calls to the fallback together.
func TestShared_CloseOneAndFailoverTogether(t *testing.T) {
	b := startSpannerBackend(t, 2)
	gme := newSharedGME(t, b, fastSettings(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dbs := databases(b, 3)
	var clients []*spanner.Client
	for _, db := range dbs {
		clients = append(clients, newSharedClient(t, gme, db))
	}
	for i, c := range clients {
		if _, err := countAccounts(ctx, c); err != nil {
			t.Fatalf("query of %s: %v", dbs[i], err)
		}
	}
	clients[0].Close()
	if st := gme.Status(); st.Closed || st.Clients != 2 {
		t.Fatalf("after closing one client: Closed %v, Clients %d; want open, 2", st.Closed, st.Clients)
	}
	if _, err := countAccounts(ctx, clients[0]); spanner.ErrCode(err) == codes.OK {
		t.Errorf("the closed client still queries: %v", err)
	}
	for i, c := range clients[1:] {
		if _, err := countAccounts(ctx, c); err != nil {
			t.Fatalf("query of %s after another client closed: %v", dbs[i+1], err)
		}
	}

	b.eps[0].Down()
	waitConnected(t, gme, b.eps[1].Addr())
	eventually(t, 10*time.Second, "failover to e2", func() bool { return groupOf(gme, "default").Current == b.eps[1].Addr() })
	for i, c := range clients[1:] {
		got := served(b.eps, func() {
			if _, err := countAccounts(ctx, c); err != nil {
				t.Fatalf("query of %s after the failover: %v", dbs[i+1], err)
			}
		})
		if got[0] || !got[1] {
			t.Errorf("%s after the failover served by %v, want e2 alone", dbs[i+1], got)
		}
	}
	if sw := groupOf(gme, "default").Switches; len(sw) != 1 {
		t.Errorf("switches %+v, want one for every client", sw)
	}
}

// driverConnector does what go-sql-spanner's connector does with a Configurator
// (github.com/googleapis/go-sql-spanner, driver.go: createConnector calls it once and keeps
// the config and options; increaseConnCount creates a Spanner client and a database admin
// client with them on the first Connect; decreaseConnCount closes both when the last
// connection closes; the next Connect creates new ones with the same options).
type driverConnector struct {
	database string
	config   spanner.ClientConfig
	opts     []option.ClientOption
}

func newDriverConnector(database string, configure func(*spanner.ClientConfig, *[]option.ClientOption)) *driverConnector {
	c := &driverConnector{database: database, config: fixture.ClientConfig(), opts: clientOptions()}
	configure(&c.config, &c.opts)
	return c
}

// connect creates the connector's Spanner client and admin client, as on a first Connect.
func (c *driverConnector) connect(ctx context.Context) (*spanner.Client, *database.DatabaseAdminClient, error) {
	client, err := spanner.NewClientWithConfig(ctx, c.database, c.config, c.opts...)
	if err != nil {
		return nil, nil, err
	}
	admin, err := database.NewDatabaseAdminClient(ctx, c.opts...)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, admin, nil
}

// Configurator through go-sql-spanner's lifecycle (driverConnector): configured once, then 20
// cycles of create, query (and one admin call), close, while another client of the same
// GCPMultiEndpoint queries without pause. No query fails, the GCPMultiEndpoint stays open
// with its one client and one Configurator between cycles, and no goroutine is left behind.
func TestConfigurator_SQLDriverLifecycle(t *testing.T) {
	b := startSpannerBackend(t, 2)
	gme := newSharedGME(t, b, fastSettings(nil))
	dbs := databases(b, 2)
	other := newSharedClient(t, gme, dbs[0])
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := countAccounts(ctx, other); err != nil {
		t.Fatal(err)
	}
	// The Configurator's one front connection lives until gme.Close: made before the count.
	connector := newDriverConnector(dbs[1], Configurator(gme))
	before := goleak.IgnoreCurrent()

	var queries, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	fail := func(err error) {
		failed.Add(1)
		firstErr.CompareAndSwap(nil, &err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			queries.Add(1)
			if _, err := countAccounts(ctx, other); err != nil {
				fail(err)
			}
		}
	}()
	for cycle := range 20 {
		client, admin, err := connector.connect(ctx)
		if err != nil {
			t.Fatalf("cycle %d: connect: %v", cycle, err)
		}
		for range 3 {
			queries.Add(1)
			if _, err := countAccounts(ctx, client); err != nil {
				fail(err)
			}
		}
		queries.Add(1)
		if _, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: dbs[1]}); err != nil {
			fail(fmt.Errorf("GetDatabaseDdl: %w", err))
		}
		client.Close()
		if err := admin.Close(); err != nil {
			t.Errorf("cycle %d: admin client Close: %v", cycle, err)
		}
		if st := gme.Status(); st.Closed || st.Clients != 1 || st.Configurators != 1 {
			t.Fatalf("cycle %d: after the driver's clients closed: Closed %v, Clients %d, Configurators %d; want open, 1, 1",
				cycle, st.Closed, st.Clients, st.Configurators)
		}
	}
	close(stop)
	<-done
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d calls failed; first: %v", n, queries.Load(), *firstErr.Load())
	}
	t.Logf("%d calls, none failed", queries.Load())
	if err := goleak.Find(append(goleakOptions, before)...); err != nil {
		t.Errorf("goroutines left after 20 driver cycles: %v", err)
	}
}

// One Configurator function serves several connectors, and their clients at once: they
// count as one Configurator, and both serve.
func TestConfigurator_SeveralConnectorsAtOnce(t *testing.T) {
	b := startSpannerBackend(t, 1)
	gme := newSharedGME(t, b, fastSettings(nil))
	dbs := databases(b, 2)
	configure := Configurator(gme)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var clients []*spanner.Client
	for _, db := range dbs {
		c := newDriverConnector(db, configure)
		for range 2 { // two clients of one connector's options at once
			client, admin, err := c.connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			defer client.Close()
			clients = append(clients, client)
		}
	}
	for i, c := range clients {
		if _, err := countAccounts(ctx, c); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	if st := gme.Status(); st.Configurators != 1 || st.Clients != 0 {
		t.Errorf("Configurators %d, Clients %d; want 1, 0", st.Configurators, st.Clients)
	}
	clients[0].Close()
	for i, c := range clients[1:] {
		if _, err := countAccounts(ctx, c); err != nil {
			t.Fatalf("client %d after another of the same options closed: %v", i+1, err)
		}
	}
}

// After gme.Close every shared client fails at once with CANCELED and ErrClosed's text,
// errors.Is(err, ErrClosed) (the
// Spanner client does not retry it), whatever its deadline; NewClient returns ErrClosed; the
// clients of a Configurator configured before or after gme.Close fail the same way; closing
// the clients then is harmless.
func TestShared_ClientAfterGMEClose(t *testing.T) {
	b := startSpannerBackend(t, 1)
	gme := newSharedGME(t, b, fastSettings(nil))
	client := newSharedClient(t, gme, b.database)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := countAccounts(ctx, client); err != nil {
		t.Fatal(err)
	}
	early := newDriverConnector(b.database, Configurator(gme))
	if err := gme.Close(); err != nil {
		t.Fatal(err)
	}
	if got := gme.Status().Clients; got != 0 {
		t.Errorf("Status().Clients after Close = %d, want 0", got)
	}
	checkClosed := func(what string, c *spanner.Client) {
		t.Helper()
		start := time.Now()
		_, err := countAccounts(ctx, c)
		if spanner.ErrCode(err) != codes.Canceled || !strings.Contains(err.Error(), ErrClosed.Error()) || !errors.Is(err, ErrClosed) {
			t.Errorf("%s after gme.Close: %v (errors.Is ErrClosed: %v), want CANCELED with %q, errors.Is ErrClosed", what, err, errors.Is(err, ErrClosed), ErrClosed)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s after gme.Close took %v, want at once", what, d)
		}
	}
	checkClosed("query", client)
	if c, err := NewClient(ctx, b.database, gme, fixture.ClientConfig(), clientOptions()...); !errors.Is(err, ErrClosed) {
		if c != nil {
			c.Close()
		}
		t.Errorf("NewClient after gme.Close: %v, want ErrClosed", err)
	}
	late := newDriverConnector(b.database, Configurator(gme))
	driver, admin, err := late.connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkClosed("a query of a Configurator configured after gme.Close", driver)
	driver.Close()
	admin.Close()
	driver, admin, err = early.connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkClosed("a query of a Configurator configured before gme.Close", driver)
	driver.Close()
	admin.Close()
	client.Close()
}

// The owner's Close (the client NewMultiEndpointClient* built the GCPMultiEndpoint with)
// closes the GCPMultiEndpoint for every client; a shared client's Close does not.
func TestShared_OwnerClosesForEveryone(t *testing.T) {
	b := startSpannerBackend(t, 1)
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, b.eps[0].Addr())})
	owner, gme := newSpannerClient(t, b, o, fastSettings(nil))
	shared := newSharedClient(t, gme, b.database)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := countAccounts(ctx, shared); err != nil {
		t.Fatal(err)
	}
	if got := gme.Status().Clients; got != 2 {
		t.Errorf("Status().Clients = %d, want 2", got)
	}
	shared.Close()
	if _, err := countAccounts(ctx, owner); err != nil || gme.Status().Closed {
		t.Fatalf("after the shared client closed: owner's query %v, Closed %v", err, gme.Status().Closed)
	}
	shared = newSharedClient(t, gme, b.database)
	owner.Close()
	if !gme.Status().Closed {
		t.Fatal("the owner's Close left the GCPMultiEndpoint open")
	}
	if _, err := countAccounts(ctx, shared); spanner.ErrCode(err) != codes.Canceled {
		t.Errorf("shared query after the owner closed: %v, want CANCELED", err)
	}
}

// A client cannot change the shared pools: a pool setting other than the GCPMultiEndpoint's
// is refused by NewClient with a *ConfigError naming it, and makes a Configurator's client
// fail every call with FAILED_PRECONDITION naming it; settings of the client itself pass.
func TestNewClient_PoolSettingsBelongToTheGCPMultiEndpoint(t *testing.T) {
	b := startSpannerBackend(t, 1)
	gme := newSharedGME(t, b, fastSettings(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name    string
		change  func(*spanner.ClientConfig)
		setting string // "" when accepted
	}{
		{"client settings pass", func(c *spanner.ClientConfig) { c.UserAgent = "app"; c.DisableRouteToLeader = true }, ""},
		{"NumChannels", func(c *spanner.ClientConfig) { c.NumChannels = 8 }, "ClientConfig.NumChannels"}, //lint:ignore SA1019 the setting under test
		{"Compression", func(c *spanner.ClientConfig) { c.Compression = "gzip" }, "ClientConfig.Compression"},
		{"DynamicChannelPool", func(c *spanner.ClientConfig) {
			c.DynamicChannelPoolConfig.DCPEnabled, c.DynamicChannelPoolConfig.DCPMaxChannels = true, 8
		}, "ClientConfig.DynamicChannelPoolConfig"},
		{"EnableDirectAccess", func(c *spanner.ClientConfig) { c.EnableDirectAccess = true }, "ClientConfig.EnableDirectAccess"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := fixture.ClientConfig()
			tc.change(&config)
			client, err := NewClient(ctx, b.database, gme, config, clientOptions()...)
			if tc.setting == "" {
				if err != nil {
					t.Fatalf("NewClient: %v", err)
				}
				defer client.Close()
				if _, err := countAccounts(ctx, client); err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.setting) {
				t.Fatalf("NewClient: %v, want a *ConfigError naming %s", err, tc.setting)
			}
			before := config
			opts := clientOptions()
			Configurator(gme)(&config, &opts)
			if config.EnableDirectAccess != before.EnableDirectAccess || config.Compression != before.Compression {
				t.Errorf("the Configurator changed a refused config")
			}
			driver, err := spanner.NewClientWithConfig(ctx, b.database, config, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer driver.Close()
			qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
			defer qcancel()
			if _, err := countAccounts(qctx, driver); spanner.ErrCode(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tc.setting) {
				t.Errorf("a Configurator's query with a refused setting: %v, want FAILED_PRECONDITION naming %s", err, tc.setting)
			}
		})
	}
	if st := gme.Status(); st.Closed || st.Clients != 0 || st.Configurators != 0 {
		t.Errorf("after the refusals: Closed %v, Clients %d, Configurators %d; want open, 0, 0", st.Closed, st.Clients, st.Configurators)
	}
}

// A nil GCPMultiEndpoint is refused without a panic: NewClient returns ErrClosed, and a
// Configurator's client fails every call with CANCELED.
func TestNewClient_NilGCPMultiEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := NewClient(ctx, "projects/p/instances/i/databases/d", nil, fixture.ClientConfig()); !errors.Is(err, ErrClosed) {
		t.Errorf("NewClient(nil gme): %v, want ErrClosed", err)
	}
	config, opts := fixture.ClientConfig(), []option.ClientOption{option.WithoutAuthentication()}
	Configurator(nil)(&config, &opts)
	Configurator(nil)(nil, nil) // nothing to configure; no panic
	driver, err := spanner.NewClientWithConfig(ctx, "projects/p/instances/i/databases/d", config, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.Close()
	if _, err := countAccounts(ctx, driver); spanner.ErrCode(err) != codes.Canceled {
		t.Errorf("a query of a Configurator(nil) client: %v, want CANCELED", err)
	}
}
