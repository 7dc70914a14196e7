package integration_test

// The differential suite's option cells: the same work through a plain Spanner client and
// through spannerme (one endpoint; two endpoints), each built with the same client options,
// and what every endpoint receives (the calls and their headers) and what the caller's own
// hooks see (its interceptors, its stats handler, its grpc.OnFinish, the client's gRPC spans)
// must be the same. What is meant to differ is in meantDifferences (differential_test.go).

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// hooks is what a caller's options observe in one client: its interceptors' calls, its stats
// handler's RPCs that carry a request ID (the health probes carry none; meantDifferences),
// and its grpc.OnFinish callbacks, each by method. Safe for concurrent use.
type hooks struct {
	mu          sync.Mutex
	intercepted map[string]int
	statsRPCs   map[string]int
	finished    map[string]int
}

func newHooks() *hooks {
	return &hooks{intercepted: map[string]int{}, statsRPCs: map[string]int{}, finished: map[string]int{}}
}

func (h *hooks) add(m map[string]int, key string) {
	h.mu.Lock()
	m[key]++
	h.mu.Unlock()
}

func (h *hooks) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.intercepted, h.statsRPCs, h.finished = map[string]int{}, map[string]int{}, map[string]int{}
}

// counts lists m's entries as "key xN", sorted.
func (h *hooks) counts(m map[string]int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s x%d", k, n))
	}
	sort.Strings(out)
	return out
}

func shortMethod(full string) string { return full[strings.LastIndex(full, "/")+1:] }

func (h *hooks) interceptors() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			h.add(h.intercepted, "unary "+shortMethod(method))
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			h.add(h.intercepted, "stream "+shortMethod(method))
			return streamer(ctx, desc, cc, method, opts...)
		})),
	}
}

// onFinish is an interceptor that adds a grpc.OnFinish call option to every call.
func (h *hooks) onFinish() []option.ClientOption {
	finish := func(method string) grpc.CallOption {
		return grpc.OnFinish(func(error) { h.add(h.finished, shortMethod(method)) })
	}
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(ctx, method, req, reply, cc, append(opts, finish(method))...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(ctx, desc, cc, method, append(opts, finish(method))...)
		})),
	}
}

// statsHandler counts the RPCs that begin, by method, among those carrying a request ID.
type statsHandler struct{ h *hooks }

type rpcTag struct{}

func (s statsHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	if len(md.Get("x-goog-spanner-request-id")) == 0 {
		return ctx
	}
	return context.WithValue(ctx, rpcTag{}, shortMethod(info.FullMethodName))
}

func (s statsHandler) HandleRPC(ctx context.Context, st stats.RPCStats) {
	if m, ok := ctx.Value(rpcTag{}).(string); ok {
		if _, begin := st.(*stats.Begin); begin {
			s.h.add(s.h.statsRPCs, m)
		}
	}
}

func (statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (statsHandler) HandleConn(context.Context, stats.ConnStats)                       {}

// optionCell is one client option setting, given to every client of the cell.
type optionCell struct {
	name string
	opts func(h *hooks) []option.ClientOption
	// creds: the options carry credentials, sent in plaintext to the loopback frontend
	// (spannerme opts in with Settings.SendCredentialsInPlaintext); otherwise the clients
	// are built without authentication.
	creds bool
	// userAgent: the options set the user agent, which is then compared whole.
	userAgent bool
}

func staticToken(token string) option.ClientOption {
	return option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token, TokenType: "Bearer"}))
}

var optionCells = []optionCell{
	{name: "no options", opts: func(*hooks) []option.ClientOption { return nil }},
	{name: "option.WithUserAgent", userAgent: true, opts: func(*hooks) []option.ClientOption {
		return []option.ClientOption{option.WithUserAgent("myapp/1.0")}
	}},
	{name: "grpc.WithUserAgent dial option", userAgent: true, opts: func(*hooks) []option.ClientOption {
		return []option.ClientOption{option.WithGRPCDialOption(grpc.WithUserAgent("dialed/2.0"))}
	}},
	{name: "option.WithTokenSource", creds: true, opts: func(*hooks) []option.ClientOption {
		return []option.ClientOption{staticToken("secret")}
	}},
	{name: "option.WithQuotaProject", creds: true, opts: func(*hooks) []option.ClientOption {
		return []option.ClientOption{staticToken("secret"), option.WithQuotaProject("billed-project")}
	}},
	{name: "option.WithRequestReason", creds: true, opts: func(*hooks) []option.ClientOption {
		return []option.ClientOption{staticToken("secret"), option.WithRequestReason("ticket-42")}
	}},
	// gRPC refuses an API key on a plaintext connection (its credentials ask for transport
	// security): both clients fail to be built, with the same error.
	{name: "option.WithAPIKey", creds: true, opts: func(*hooks) []option.ClientOption {
		return []option.ClientOption{option.WithAPIKey("key")}
	}},
	{name: "interceptors (option.WithGRPCDialOption)", opts: (*hooks).interceptors},
	{name: "a stats handler (option.WithGRPCDialOption)", opts: func(h *hooks) []option.ClientOption {
		return []option.ClientOption{option.WithGRPCDialOption(grpc.WithStatsHandler(statsHandler{h}))}
	}},
	{name: "an interceptor adding grpc.OnFinish", opts: (*hooks).onFinish},
	{name: "option.WithTelemetryDisabled", opts: func(*hooks) []option.ClientOption {
		return []option.ClientOption{option.WithTelemetryDisabled()}
	}},
}

// optionOutcome is what one client showed in one option cell.
type optionOutcome struct {
	Err         string   // the constructor's or the work's error code and text, if any
	Calls       []string // the frontend's calls that carry a request ID, by method, counted
	Headers     []string // the headers those calls carried, by method
	Intercepted []string // what the caller's interceptors saw
	StatsRPCs   []string // what the caller's stats handler saw begin (with a request ID)
	Finished    []string // the caller's grpc.OnFinish callbacks
	Spans       []string // the names of the spans of the work's trace, counted
}

// optionWork is the work of every option cell: a query, a read, a read-write transaction
// with a DML statement (begun inline) and one with a mutation.
func optionWork(ctx context.Context, c *spanner.Client) error {
	if err := c.Single().Query(ctx, spanner.Statement{SQL: "SELECT AccountId FROM Accounts"}).Do(func(*spanner.Row) error { return nil }); err != nil {
		return err
	}
	if err := c.Single().Read(ctx, "Accounts", spanner.AllKeys(), []string{"AccountId"}).Do(func(*spanner.Row) error { return nil }); err != nil {
		return err
	}
	upd := spanner.Statement{SQL: "UPDATE Accounts SET Region = 'opt' WHERE AccountId = @a", Params: map[string]any{"a": "opt-account"}}
	if _, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		_, err := tx.Update(ctx, upd)
		return err
	}); err != nil {
		return err
	}
	_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("Orders",
			[]string{"OrderId", "AccountId", "Amount"}, []any{"opt-order", "opt-account", int64(1)})})
	})
	return err
}

// optionHeaders are the headers compared in option cells.
var optionHeaders = []string{"user-agent", "authorization", "x-goog-user-project", "x-goog-request-reason", "x-goog-api-key", "x-goog-api-client"}

// runOptionCell builds one client with the cell's options (newClient), runs optionWork
// through it (then, with waitProbe, waits for a probe to reach the frontend) and returns what
// it showed.
func runOptionCell(t *testing.T, inj *injector, spans *tracetest.SpanRecorder, c optionCell, waitProbe bool,
	newClient func(ctx context.Context, opts []option.ClientOption) (*spanner.Client, func(), error)) optionOutcome {
	t.Helper()
	h := newHooks()
	opts := []option.ClientOption{option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	if !c.creds {
		opts = append(opts, option.WithoutAuthentication())
	}
	opts = append(opts, c.opts(h)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o optionOutcome
	client, closeFn, err := newClient(ctx, opts)
	if err != nil {
		o.Err = "constructor: " + spanner.ErrCode(err).String()
		if strings.Contains(err.Error(), "transport level security") {
			o.Err += ": the credentials require transport level security"
		}
		return o
	}
	defer closeFn()
	// The session first, so that the work's calls are the same for every client.
	if err := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil }); err != nil {
		o.Err = "first query: " + err.Error()
		return o
	}
	inj.set(nil)
	h.reset()
	ctx, root := otel.Tracer("differential").Start(ctx, "cell")
	err = optionWork(ctx, client)
	root.End()
	if err != nil {
		o.Err = spanner.ErrCode(err).String() + ": " + err.Error()
	}
	// spannerme's probes reach the frontend meanwhile: wait for one, so that the cell shows
	// what the caller's hooks make of them.
	for probed := !waitProbe; !probed; {
		for _, call := range inj.recorded() {
			probed = probed || len(call.md.Get("x-goog-spanner-request-id")) == 0
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no probe reached the frontend within 30s")
		case <-time.After(poll):
		}
	}
	calls, headers, names := map[string]int{}, map[string]bool{}, map[string]int{}
	for _, call := range inj.recorded() {
		if len(call.md.Get("x-goog-spanner-request-id")) == 0 {
			continue // the health probes (meantDifferences)
		}
		calls[call.method]++
		for _, k := range optionHeaders {
			v := call.md.Get(k)
			if k == "user-agent" && !c.userAgent {
				v = []string{userAgentProduct(v)} // this package's own (meantDifferences)
			}
			headers[fmt.Sprintf("%s %s=%v", call.method, k, v)] = true
		}
	}
	for _, s := range spans.Ended() {
		if s.SpanContext().TraceID() == root.SpanContext().TraceID() && s.Name() != "cell" {
			names[s.Name()]++
		}
	}
	for m, n := range calls {
		o.Calls = append(o.Calls, fmt.Sprintf("%s x%d", m, n))
	}
	for k := range headers {
		o.Headers = append(o.Headers, k)
	}
	for n, k := range names {
		o.Spans = append(o.Spans, fmt.Sprintf("%s x%d", n, k))
	}
	sort.Strings(o.Calls)
	sort.Strings(o.Headers)
	sort.Strings(o.Spans)
	o.Intercepted, o.StatsRPCs, o.Finished = h.counts(h.intercepted), h.counts(h.statsRPCs), h.counts(h.finished)
	return o
}

// TestDifferentialOptions runs every option cell on each backend through a plain client and
// through spannerme (one endpoint; two endpoints, the first current), compared field by field.
func TestDifferentialOptions(t *testing.T) {
	for _, k := range backendKinds {
		t.Run(k.name, func(t *testing.T) {
			b := k.start(t)
			inj := &injector{}
			spans := tracetest.NewSpanRecorder()
			global := otel.GetTracerProvider()
			otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
			t.Cleanup(func() { otel.SetTracerProvider(global) })
			front := spannermetest.NewFrontendTB(t, b.addr, spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(inj.intercept)))
			e1 := spannermetest.NewEndpointTB(t, front.Addr())
			e2 := spannermetest.NewEndpointTB(t, front.Addr())
			plain := func(ctx context.Context, opts []option.ClientOption) (*spanner.Client, func(), error) {
				c, err := spanner.NewClientWithConfig(ctx, b.database, fixture.ClientConfig(), append(opts, option.WithEndpoint(front.Addr()))...)
				if err != nil {
					return nil, nil, err
				}
				return c, c.Close, nil
			}
			me := func(endpoints ...string) func(ctx context.Context, opts []option.ClientOption) (*spanner.Client, func(), error) {
				return func(ctx context.Context, opts []option.ClientOption) (*spanner.Client, func(), error) {
					settings := spannerme.Settings{
						ReconnectMaxDelay: 100 * time.Millisecond, MinConnectTimeout: time.Second,
						Logger:                     slog.New(slog.DiscardHandler),
						SendCredentialsInPlaintext: true, // the credential cells' loopback frontend
					}
					settings.Health.ProbeInterval = 50 * time.Millisecond // probes during the work
					groups := map[string]*multiendpoint.MultiEndpointOptions{"default": {Endpoints: endpoints}}
					c, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(),
						&grpcgcp.GCPMultiEndpointOptions{MultiEndpoints: groups, Default: "default"}, settings, opts...)
					if err != nil {
						return nil, nil, err
					}
					return c, func() { c.Close(); gme.Close() }, nil
				}
			}
			clients := []struct {
				name string
				new  func(ctx context.Context, opts []option.ClientOption) (*spanner.Client, func(), error)
			}{
				{"plain client", plain},
				{"spannerme, one endpoint", me(front.Addr())},
				{"spannerme, two endpoints", me(e1.Addr(), e2.Addr())},
			}
			for _, c := range optionCells {
				t.Run(c.name, func(t *testing.T) {
					var want optionOutcome
					for j, cl := range clients {
						got := runOptionCell(t, inj, spans, c, j > 0, cl.new)
						if j == 0 {
							want = got
							if c.name != "option.WithAPIKey" && (got.Err != "" || len(got.Calls) == 0) {
								t.Fatalf("the plain client: %q, calls %v: the cell tests nothing", got.Err, got.Calls)
							}
							continue
						}
						var d []string
						for _, f := range []struct {
							name string
							w, g any
						}{{"error", want.Err, got.Err}, {"calls at the frontend", want.Calls, got.Calls},
							{"headers at the frontend", want.Headers, got.Headers}, {"the caller's interceptors saw", want.Intercepted, got.Intercepted},
							{"the caller's stats handler saw", want.StatsRPCs, got.StatsRPCs}, {"the caller's grpc.OnFinish ran", want.Finished, got.Finished},
							{"spans of the work", want.Spans, got.Spans}} {
							if fmt.Sprint(f.w) != fmt.Sprint(f.g) {
								d = append(d, fmt.Sprintf("%s:\n\t\tplain:     %v\n\t\tspannerme: %v", f.name, f.w, f.g))
							}
						}
						if len(d) > 0 {
							t.Errorf("%s differs from the plain client:\n\t%s", cl.name, strings.Join(d, "\n\t"))
						}
					}
					t.Logf("plain client: error %q, calls %v, interceptors %v, stats handler %v, OnFinish %v", want.Err, want.Calls, want.Intercepted, want.StatsRPCs, want.Finished)
				})
			}
		})
	}
}
