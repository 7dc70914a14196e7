package spannerme

// End-to-end benchmarks through the Spanner client, side by side in one run: a plain
// spanner.Client, upstream's spanner.NewMultiEndpointClientWithConfig and this package's
// NewMultiEndpointClientWithConfig, each with its default configuration and one endpoint.
//
//   - BenchmarkClient_PointRead and BenchmarkClient_StreamingQuery: straight to an in-memory
//     spannertest server on loopback, b.RunParallel (GOMAXPROCS goroutines).
//   - BenchmarkClient_Frontend: C concurrent queries (C = 100, 400, 1000) through a
//     spannermetest.Frontend that allows 100 streams per HTTP/2 connection, as Google's front
//     ends do, and adds a latency L (50 ms, and 1 s) to each call, in front of a minimal fake
//     Spanner (so that the transport, not the backend's CPU, is measured). Metrics: qps;
//     x-plain, the ratio to the plain client at the same L and C in the same run; x-limit, the
//     ratio to what the frontend allows the channels the client opened:
//     min(C, channels x 100) / L; channels, the client's connections to the frontend that
//     carry calls (this package's latency connection, latencyConns, carries none);
//     allocs/query (all of the process's allocations, servers included); cpu-ns/query, the
//     process's CPU time (user and system, getrusage) per query, servers included. One op is
//     a wave of C queries. client=spannerme-tiers: a group whose tier has two members, two
//     such frontends (see BenchmarkClient_Frontend).
//
//   - BenchmarkClient_GOAWAYStorm: 4 workers of 30 ms queries through a frontend that ends
//     each connection after 50 ms (GOAWAY, then 20 ms for the calls in flight: a maximum
//     connection age, F27); metrics qps and x-plain. One op is one query.
//
// B/op, allocs/op and cpu-ns/query include the in-process servers' work, the same for every
// client, so differences between clients are the clients'.
//
// Sub-benchmarks are named key=value (client=plain, latency=50ms/C=100/client=plain), so
// that benchstat can put the clients side by side: benchstat -col /client (make
// bench-compare).
//
//	make bench-client   (go test -run '^$' -bench Client_ -benchmem -benchtime 2s ./spannerme/)
//	make bench-compare  (the same COUNT=6 times, then benchstat -col /client)

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	sppb "cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// benchClient is one way to build a Spanner client for one endpoint. close closes what new
// built. A benchmark function runs once per round (b.N), so each round builds and closes its
// own client.
type benchClient struct {
	name string
	new  func(tb testing.TB, endpoint, database string) (client *spanner.Client, close func())
	// probeConns is the number of the client's connections to an endpoint that carry no
	// call: latencyConns for this package's clients (brownout detection is on).
	probeConns int64
}

// benchClientOptions connect in plaintext without credentials.
func benchClientOptions() []option.ClientOption {
	return []option.ClientOption{option.WithoutAuthentication(), option.WithGRPCDialOption(insecureDial)}
}

// benchSettings keeps this package's log lines out of benchmark output, where a line written
// while a benchmark runs splits its result row and benchstat drops it.
var benchSettings = Settings{Logger: slog.New(slog.DiscardHandler)}

// benchConfig is fixture.ClientConfig with the Spanner client's own log lines (of its
// session pool, for example) discarded, for the same reason, for every client alike: with a
// nil Logger it writes to the standard logger.
func benchConfig() spanner.ClientConfig {
	c := fixture.ClientConfig()
	c.Logger = log.New(io.Discard, "", 0)
	return c
}

var benchClients = []benchClient{
	{"plain", func(tb testing.TB, endpoint, database string) (*spanner.Client, func()) {
		c, err := spanner.NewClientWithConfig(context.Background(), database, benchConfig(),
			append(benchClientOptions(), option.WithEndpoint(endpoint))...)
		if err != nil {
			tb.Fatal(err)
		}
		return c, c.Close
	}, 0},
	{"upstream", func(tb testing.TB, endpoint, database string) (*spanner.Client, func()) {
		c, gme, err := spanner.NewMultiEndpointClientWithConfig(context.Background(), database, benchConfig(),
			&grpcgcp.GCPMultiEndpointOptions{
				MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{"default": {Endpoints: []string{endpoint}}},
				Default:        "default",
			}, benchClientOptions()...)
		if err != nil {
			tb.Fatal(err)
		}
		_ = gme // c.Close closes it
		return c, c.Close
	}, 0},
	{"spannerme", func(tb testing.TB, endpoint, database string) (*spanner.Client, func()) {
		c, gme, err := NewMultiEndpointClientWithSettings(context.Background(), database, benchConfig(),
			options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, endpoint)}),
			benchSettings, benchClientOptions()...)
		if err != nil {
			tb.Fatal(err)
		}
		return c, func() { c.Close(); _ = gme.Close() }
	}, latencyConns},
}

// benchClientsCallPath adds, for the per-call benchmarks, this package's GCPMultiEndpoint
// without the x-goog-spanner-request-id header, which the plain client and this package's
// client send and upstream's multi-endpoint client does not (its GCPMultiEndpoint is handed
// to the Spanner client as a connection pool, past the client's request-ID interceptor): the
// same calls as upstream's row, so that the two multi-endpoint layers compare like for like.
var benchClientsCallPath = append(benchClients[:len(benchClients):len(benchClients)], benchClient{
	"spannerme-no-request-id", func(tb testing.TB, endpoint, database string) (*spanner.Client, func()) {
		ours, gme, err := NewMultiEndpointClientWithSettings(context.Background(), database, benchConfig(),
			options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, endpoint)}),
			benchSettings, benchClientOptions()...)
		if err != nil {
			tb.Fatal(err)
		}
		// The benchmarked client shares the pools, dialed above with the Spanner client's
		// transport settings, through a front connection that calls gme's public methods.
		front, err := grpc.NewClient("passthrough:///no-request-id", insecureDial,
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				return gme.Invoke(ctx, method, req, reply, opts...)
			}),
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, _ *grpc.ClientConn, method string, _ grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				return gme.NewStream(ctx, desc, method, opts...)
			}))
		if err != nil {
			tb.Fatal(err)
		}
		c, err := spanner.NewClientWithConfig(context.Background(), database, benchConfig(),
			append(benchClientOptions(), option.WithGRPCConn(front))...)
		if err != nil {
			tb.Fatal(err)
		}
		return c, func() { c.Close(); _ = front.Close(); ours.Close() }
	}, latencyConns})

// benchClientsDirected adds, for the per-call benchmarks, this package's client with a
// directed read policy (Settings.DirectedReads): "spannerme-policy-elsewhere" has it on a
// group its calls do not use, and must cost what "spannerme" costs; "spannerme-directed" has
// it on the group its reads use, each of which is sent as a copy carrying the policy.
var benchClientsDirected = []benchClient{
	{"spannerme-policy-elsewhere", benchDirectedClient("west"), latencyConns},
	{"spannerme-directed", benchDirectedClient("default"), latencyConns},
}

// benchDirectedClient builds this package's client over groups "default" and "west" (both the
// endpoint), with a read-only-replicas policy on the group named policyOn.
func benchDirectedClient(policyOn string) func(tb testing.TB, endpoint, database string) (*spanner.Client, func()) {
	return func(tb testing.TB, endpoint, database string) (*spanner.Client, func()) {
		s := benchSettings
		s.DirectedReads = map[string]*sppb.DirectedReadOptions{policyOn: {Replicas: &sppb.DirectedReadOptions_IncludeReplicas_{
			IncludeReplicas: &sppb.DirectedReadOptions_IncludeReplicas{ReplicaSelections: []*sppb.DirectedReadOptions_ReplicaSelection{
				{Type: sppb.DirectedReadOptions_ReplicaSelection_READ_ONLY}}}}}}
		c, gme, err := NewMultiEndpointClientWithSettings(context.Background(), database, fixture.ClientConfig(),
			options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, endpoint), "west": group(0, 0, endpoint)}),
			s, benchClientOptions()...)
		if err != nil {
			tb.Fatal(err)
		}
		return c, func() { c.Close(); _ = gme.Close() }
	}
}

// benchSpannertest starts a seeded spannertest server with events rows of payload bytes.
func benchSpannertest(b *testing.B, events, payload int) (addr, database string, accounts []fixture.Account) {
	b.Helper()
	fixture.DisableGCEDetection()
	srv, db := fixture.StartSpannertest(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct, err := fixture.NewClient(ctx, srv.Addr, db)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	if err := fixture.Seed(ctx, direct); err != nil {
		b.Fatal(err)
	}
	if err := fixture.FillEvents(ctx, direct, events, payload); err != nil {
		b.Fatal(err)
	}
	accounts, err = fixture.Accounts()
	if err != nil {
		b.Fatal(err)
	}
	return srv.Addr, db, accounts
}

// BenchmarkClient_PointRead reads one row by key (a StreamingRead).
func BenchmarkClient_PointRead(b *testing.B) {
	addr, db, accounts := benchSpannertest(b, 0, 0)
	for _, bc := range append(benchClientsCallPath[:len(benchClientsCallPath):len(benchClientsCallPath)], benchClientsDirected...) {
		b.Run("client="+bc.name, func(b *testing.B) {
			client, closeClient := bc.new(b, addr, db)
			defer closeClient()
			ctx := context.Background()
			if _, err := client.Single().ReadRow(ctx, fixture.TableAccounts, spanner.Key{accounts[0].AccountID}, []string{"Balance"}); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := accounts[next.Add(1)%int64(len(accounts))].AccountID
					if _, err := client.Single().ReadRow(ctx, fixture.TableAccounts, spanner.Key{id}, []string{"Balance"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// benchStreamRows and benchStreamPayload shape BenchmarkClient_StreamingQuery's result.
const benchStreamRows, benchStreamPayload = 100, 1024

// BenchmarkClient_StreamingQuery runs a query that streams benchStreamRows rows of
// benchStreamPayload bytes, read to the end.
func BenchmarkClient_StreamingQuery(b *testing.B) {
	addr, db, _ := benchSpannertest(b, benchStreamRows, benchStreamPayload)
	stmt := spanner.Statement{SQL: "SELECT EventId, Payload FROM Events"}
	readAll := func(ctx context.Context, client *spanner.Client) error {
		it := client.Single().Query(ctx, stmt)
		defer it.Stop()
		n := 0
		for {
			_, err := it.Next()
			if err == iterator.Done {
				break
			}
			if err != nil {
				return err
			}
			n++
		}
		if n != benchStreamRows {
			return fmt.Errorf("%d rows, want %d", n, benchStreamRows)
		}
		return nil
	}
	for _, bc := range benchClientsCallPath {
		b.Run("client="+bc.name, func(b *testing.B) {
			client, closeClient := bc.new(b, addr, db)
			defer closeClient()
			ctx := context.Background()
			if err := readAll(ctx, client); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := readAll(ctx, client); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// frontendStreams is the frontend's limit of concurrent streams per connection.
const frontendStreams = spannermetest.GoogleFrontendMaxConcurrentStreams

// BenchmarkClient_Frontend runs C concurrent queries through a 100-stream frontend that adds
// 50 ms per call; see the file comment for its metrics. It runs with 1 s per call too: on a
// small machine the CPU caps 50 ms calls well below the frontend's limit, and 1 s calls show
// the limit itself.
//
// client=spannerme-tiers (benchFrontendTiers) is this package's client with one group whose
// tier has two members: two frontends, each with the same limit (100 streams per connection)
// and latency as the other rows' one frontend. Every other row has one endpoint, this one
// two: its x-limit counts the channels of both frontends, and its x-plain compares it with
// the plain client on one frontend.
func BenchmarkClient_Frontend(b *testing.B) {
	backend := startFakeSpanner(b)
	fixture.DisableGCEDetection()
	stmt := spanner.Statement{SQL: "SELECT 1"}
	query := func(ctx context.Context, client *spanner.Client) error {
		return client.Single().Query(ctx, stmt).Do(func(*spanner.Row) error { return nil })
	}
	for _, latency := range []time.Duration{50 * time.Millisecond, time.Second} {
		for _, c := range []int{100, 400, 1000} {
			benchFrontend(b, backend, latency, c, query)
		}
	}
}

// BenchmarkClient_GOAWAYStorm measures the cost of connection churn (F27, grpc/grpc-go#7053):
// the frontend recycles every connection after 50 ms with 20 ms of grace, and each query takes
// 30 ms, so some queries are cut and retried and every channel reconnects 20 times a second.
func BenchmarkClient_GOAWAYStorm(b *testing.B) {
	backend := startFakeSpanner(b)
	fixture.DisableGCEDetection()
	stmt := spanner.Statement{SQL: "SELECT 1"}
	const workers = 4
	plainQPS := 0.0
	for _, bc := range benchClients {
		b.Run("client="+bc.name, func(b *testing.B) {
			fe, err := spannermetest.NewFrontend(backend, spannermetest.WithMaxConnectionAge(50*time.Millisecond, 20*time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			defer fe.Close()
			fe.SetLatency(30 * time.Millisecond)
			client, closeClient := bc.new(b, fe.Addr(), fixture.SpannertestDatabase)
			defer closeClient()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			query := func() error {
				return client.Single().Query(ctx, stmt).Do(func(*spanner.Row) error { return nil })
			}
			if err := runConcurrently(ctx, workers, 2*workers, query); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			if err := runConcurrently(ctx, workers, b.N, query); err != nil {
				b.Fatal(err)
			}
			qps := float64(b.N) / time.Since(start).Seconds()
			b.StopTimer()
			b.ReportMetric(qps, "qps")
			if bc.name == "plain" {
				plainQPS = qps
			} else if plainQPS > 0 {
				b.ReportMetric(qps/plainQPS, "x-plain")
			}
		})
	}
}

// benchFrontend runs the clients at one latency and concurrency.
func benchFrontend(b *testing.B, backend string, latency time.Duration, c int, query func(context.Context, *spanner.Client) error) {
	plainQPS := 0.0
	for _, bc := range benchClients {
		var row rowOnce // the frontend and the client, for every round of the row
		b.Run(fmt.Sprintf("latency=%v/C=%d/client=%s", latency, c, bc.name), func(b *testing.B) {
			var fe *spannermetest.Frontend
			var client *spanner.Client
			warm := row.setUp(func() {
				var err error
				fe, err = spannermetest.NewFrontend(backend, spannermetest.WithMaxConcurrentStreams(frontendStreams))
				if err != nil {
					b.Fatal(err)
				}
				row.closers = append(row.closers, func() { _ = fe.Close() })
				fe.SetLatency(latency)
				var closeClient func()
				client, closeClient = bc.new(b, fe.Addr(), fixture.SpannertestDatabase)
				row.closers = append(row.closers, closeClient)
				row.vals = []any{fe, client}
			})
			fe, client = row.vals[0].(*spannermetest.Frontend), row.vals[1].(*spanner.Client)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			qps := measureWave(ctx, b, c, warm, func() error { return query(ctx, client) })
			channels := fe.Stats().Active - bc.probeConns
			limit := float64(min(int64(c), channels*frontendStreams)) / latency.Seconds()
			b.ReportMetric(qps, "qps")
			b.ReportMetric(qps/limit, "x-limit")
			b.ReportMetric(float64(channels), "channels")
			if bc.name == "plain" {
				plainQPS = qps
			} else if plainQPS > 0 {
				b.ReportMetric(qps/plainQPS, "x-plain")
			}
		})
		row.close() // before the next row: an idle client's upkeep would run beside it
	}
	benchFrontendTiers(b, backend, latency, c, query, plainQPS)
}

// measureWave is one round of a row of the frontend benchmarks: on the row's first round
// (warm) it warms run up (the session exists, and a pool that grows has grown for c), then
// calls it b.N*c times from c goroutines, reports allocs/query and cpu-ns/query, and returns
// the queries per second. One op is a wave of c queries: with one query per op, b.N would grow
// from 1 in rounds that each last the latency, and a round with b.N < c measures nothing.
func measureWave(ctx context.Context, b *testing.B, c int, warm bool, run func() error) float64 {
	b.Helper()
	if warm {
		if err := runConcurrently(ctx, c, 2*c, run); err != nil {
			b.Fatal(err)
		}
	}
	queries := b.N * c
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpuBefore, cpuOK := processCPU()
	b.ResetTimer()
	start := time.Now()
	if err := runConcurrently(ctx, c, queries, run); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cpuAfter, _ := processCPU()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(queries), "allocs/query")
	if cpuOK {
		b.ReportMetric(float64(cpuAfter-cpuBefore)/float64(queries), "cpu-ns/query")
	}
	return float64(queries) / elapsed.Seconds()
}

// rowOnce is what one row of the frontend benchmarks sets up (frontends, a client), kept for
// every round of the row: testing runs a row's function once per b.N it tries, and setting up
// and warming up again each time (a new pool grown for C streams, two waves) made a 1 s row cost
// 7 waves instead of 5. Not safe for concurrent use (a row's rounds run one after the other).
type rowOnce struct {
	vals    []any    // what setUp made, for the rounds after the first
	closers []func() // run by close, last first
	done    bool
}

// setUp runs set on the first round only and reports whether it did (the round warms up).
func (r *rowOnce) setUp(set func()) bool {
	if r.done {
		return false
	}
	r.done = true
	set()
	return true
}

// close closes what setUp made.
func (r *rowOnce) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// runConcurrently calls f n times from c goroutines and returns the first error.
func runConcurrently(ctx context.Context, c, n int, f func() error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				if err := f(); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// fakeSpanner is the least of a Spanner server the client needs for single-use queries: it
// creates sessions and answers every query with one row holding the INT64 1, at a fraction
// of spannertest's CPU cost.
type fakeSpanner struct {
	sppb.UnimplementedSpannerServer
}

var fakeResult = &sppb.PartialResultSet{
	Metadata: &sppb.ResultSetMetadata{RowType: &sppb.StructType{Fields: []*sppb.StructType_Field{
		{Name: "n", Type: &sppb.Type{Code: sppb.TypeCode_INT64}}}}},
	Values: []*structpb.Value{structpb.NewStringValue("1")},
}

func (fakeSpanner) CreateSession(_ context.Context, req *sppb.CreateSessionRequest) (*sppb.Session, error) {
	return &sppb.Session{Name: req.Database + "/sessions/fake", Multiplexed: req.GetSession().GetMultiplexed()}, nil
}

func (fakeSpanner) BatchCreateSessions(_ context.Context, req *sppb.BatchCreateSessionsRequest) (*sppb.BatchCreateSessionsResponse, error) {
	resp := &sppb.BatchCreateSessionsResponse{}
	for i := range req.SessionCount {
		resp.Session = append(resp.Session, &sppb.Session{Name: fmt.Sprintf("%s/sessions/fake-%d", req.Database, i)})
	}
	return resp, nil
}

func (fakeSpanner) GetSession(_ context.Context, req *sppb.GetSessionRequest) (*sppb.Session, error) {
	return &sppb.Session{Name: req.Name}, nil
}

func (fakeSpanner) DeleteSession(context.Context, *sppb.DeleteSessionRequest) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (fakeSpanner) ExecuteStreamingSql(_ *sppb.ExecuteSqlRequest, stream sppb.Spanner_ExecuteStreamingSqlServer) error {
	return stream.Send(fakeResult)
}

// startFakeSpanner serves fakeSpanner on 127.0.0.1:0 and returns its address.
func startFakeSpanner(tb testing.TB) string {
	tb.Helper()
	srv := grpc.NewServer()
	sppb.RegisterSpannerServer(srv, fakeSpanner{})
	return serveOn(tb, srv)
}
