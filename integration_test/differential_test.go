package integration_test

// The differential suite: the same operation, with the same fault injected at the same
// frontend, through a plain Spanner client and through spannerme (one endpoint; two
// endpoints, failed over during the run), and what the application and the frontend see
// must be the same. What is meant to differ is in meantDifferences, and nowhere else in the
// tests; docs/transport.md, "What differs from a plain client", says the same.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"github.com/googleapis/gax-go/v2/apierror"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// meantDifferences are the differences between a plain client and spannerme that are
// meant, each with how the suite leaves it out of its comparison; a difference not listed
// fails the suite. Each is a row of docs/transport.md's "What differs from a plain client"
// (TestMeantDifferencesAreDocumented), where its reason is given.
var meantDifferences = []struct{ what, why string }{
	{"the channel ID in the request ID (its fourth field) is always 1",
		"the client sees one connection, the front; the channels are in each endpoint's pool"},
	{"calls without a request ID reach the endpoints: the health probes (GetSession, Commit or ExecuteSql in a session that does not exist)",
		"they are this package's own; the suite counts only calls carrying a request ID"},
	{"without option.WithUserAgent, the user agent is spanner-go/VERSION spannerme grpc-go/VERSION",
		"it names this package to the service; the suite compares the spanner-go token's name (the option cells compare a caller's user agent whole)"},
	{"a stats handler given with option.WithGRPCDialOption sees the health probes",
		"gRPC calls stats handlers for every RPC of a connection; the option cells count the RPCs carrying a request ID"},
	{"a hedged read is two calls to your interceptors, stats handlers and grpc.OnFinish",
		"the hedge is a second stream on another endpoint's connection; not exercised here (no group hedges), TestInterceptorsOverAMinute counts them"},
	{"the call's span carries spannerme.multiendpoint and spannerme.endpoint attributes",
		"they say which group and endpoint served the call; the suite leaves out attributes named spannerme.*"},
	{"errors.Unwrap of the *spanner.TransactionOutcomeUnknownError in a DEADLINE_EXCEEDED error returns nil",
		"its cause field is unexported; errors.As still finds both it and the cause in the error"},
	{"NewClient and Configurator clients export no native metrics to Cloud Monitoring; gRPC's own built-in metrics (DirectPath only) are not recorded",
		"not exercised here: the suite reads ClientMetricsProvider (spannerme's TestClient_NativeMetricsExportedAsPlainClient compares the export)"},
	{"the client's opts have no effect on NewClient and Configurator clients",
		"not exercised here: the suite uses NewMultiEndpointClientWithSettings"},
}

// faultPlan is what the frontend does to the calls of one method: the first times calls
// fail with code (after sending afterMsgs response messages, for a stream), or are held for
// hang, longer than their caller waits.
type faultPlan struct {
	method    string // e.g. "Commit"
	code      codes.Code
	msg       string
	details   []proto.Message // status details: RetryInfo, ResourceInfo
	times     int
	afterMsgs int
	hang      time.Duration // how long the call is held before it is failed (code OK: with its context's error)
	// forward: the call reaches the backend, and its response is lost (a Rollback that is
	// failed before the backend sees it would leave the transaction open, and the emulator
	// aborts every other read-write transaction meanwhile).
	forward bool
}

// call is one call the frontend received.
type call struct {
	method string
	md     metadata.MD
}

// injector is the frontend's server interceptor: it records every call and applies the
// current faultPlan. Safe for concurrent use.
type injector struct {
	mu    sync.Mutex
	plan  *faultPlan
	left  int
	calls []call
}

func (in *injector) set(p *faultPlan) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.plan, in.calls = p, nil
	if p != nil {
		in.left = p.times
	}
}

func (in *injector) recorded() []call {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.calls)
}

// intercept records the call, sends a server-timing header (so that the clients' GFE and
// AFE latency metrics have something to read), and applies the plan.
func (in *injector) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	md, _ := metadata.FromIncomingContext(ss.Context())
	_ = ss.SetHeader(metadata.Pairs("server-timing", "gfet4t7; dur=3, afe; dur=2"))
	in.mu.Lock()
	in.calls = append(in.calls, call{method: method, md: md.Copy()})
	p := in.plan
	fire := p != nil && p.method == method && in.left > 0
	if fire {
		in.left--
	}
	in.mu.Unlock()
	if !fire {
		return handler(srv, ss)
	}
	st := status.New(p.code, p.msg)
	for _, d := range p.details {
		if withDetail, err := st.WithDetails(protoadapt.MessageV1Of(d)); err == nil {
			st = withDetail
		}
	}
	switch {
	case p.hang > 0:
		// Held for p.hang whatever the deadline the call carries (past the caller's, the
		// server's own deadline would race the caller's, and either may end the call).
		time.Sleep(p.hang)
		if p.code == codes.OK {
			return status.FromContextError(ss.Context().Err()).Err()
		}
		return st.Err()
	case p.afterMsgs > 0 || p.forward:
		cut := &cutStream{ServerStream: ss, left: p.afterMsgs, err: st.Err()}
		if err := handler(srv, cut); err != nil && !cut.cut {
			return err
		}
		if cut.cut {
			return st.Err()
		}
		return nil
	}
	return st.Err()
}

// cutStream sends left response messages, then fails every send with err.
type cutStream struct {
	grpc.ServerStream
	left int
	err  error
	cut  bool
}

func (s *cutStream) SendMsg(m any) error {
	if s.left == 0 {
		s.cut = true
		return s.err
	}
	s.left--
	return s.ServerStream.SendMsg(m)
}

// diffClient is one client under test and the reader of its built-in metrics.
type diffClient struct {
	name    string
	client  *spanner.Client
	metrics *sdkmetric.ManualReader
	// before runs before each cell (the failover variant moves its group), and
	// newClient builds a fresh client of the same kind (for session creation).
	before    func(t *testing.T, cell int, cells int)
	newClient func(ctx context.Context) (*spanner.Client, *sdkmetric.ManualReader, func(), error)
}

// operation is what the application does in one cell; it returns the error the application
// gets. The client is the one under test.
type operation struct {
	method string // the method the fault targets
	run    func(ctx context.Context, c *spanner.Client) error
	// fresh: the operation needs a new client (session creation happens once per client).
	fresh bool
}

var errRollbackPlease = errors.New("the application gives up (the client rolls back)")

func operations(b backend) []operation {
	upd := spanner.Statement{SQL: "UPDATE Accounts SET Region = 'diff' WHERE AccountId = @a", Params: map[string]any{"a": "diff-account"}}
	ops := []operation{
		{method: "ExecuteStreamingSql", run: func(ctx context.Context, c *spanner.Client) error {
			return c.Single().Query(ctx, spanner.Statement{SQL: "SELECT AccountId FROM Accounts"}).Do(func(*spanner.Row) error { return nil })
		}},
		{method: "StreamingRead", run: func(ctx context.Context, c *spanner.Client) error {
			return c.Single().Read(ctx, "Accounts", spanner.AllKeys(), []string{"AccountId"}).Do(func(*spanner.Row) error { return nil })
		}},
		{method: "ExecuteSql", run: func(ctx context.Context, c *spanner.Client) error {
			_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				_, err := tx.Update(ctx, upd)
				return err
			})
			return err
		}},
		{method: "BeginTransaction", run: func(ctx context.Context, c *spanner.Client) error {
			_, err := c.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				_, err := tx.Update(ctx, upd)
				return err
			}, spanner.TransactionOptions{BeginTransactionOption: spanner.ExplicitBeginTransaction})
			return err
		}},
		{method: "Commit", run: func(ctx context.Context, c *spanner.Client) error {
			_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("Orders",
					[]string{"OrderId", "AccountId", "Amount"}, []any{"diff-order", "diff-account", int64(1)})})
			})
			return err
		}},
		{method: "Rollback", run: func(ctx context.Context, c *spanner.Client) error {
			_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				if _, err := tx.Update(ctx, upd); err != nil {
					return err
				}
				return errRollbackPlease
			})
			return err
		}},
		{method: "CreateSession", fresh: true, run: func(ctx context.Context, c *spanner.Client) error {
			return c.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil })
		}},
	}
	if b.name == "emulator" { // spannertest implements neither
		ops = append(ops,
			operation{method: "ExecuteBatchDml", run: func(ctx context.Context, c *spanner.Client) error {
				_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
					_, err := tx.BatchUpdate(ctx, []spanner.Statement{upd, upd})
					return err
				})
				return err
			}},
			operation{method: "PartitionQuery", run: func(ctx context.Context, c *spanner.Client) error {
				tx, err := c.BatchReadOnlyTransaction(ctx, spanner.StrongRead())
				if err != nil {
					return err
				}
				defer tx.Close()
				_, err = tx.PartitionQuery(ctx, spanner.Statement{SQL: "SELECT AccountId FROM Accounts"}, spanner.PartitionOptions{})
				return err
			}})
	}
	return ops
}

// failCodes are the status codes the frontend answers with: every gRPC code but OK.
var failCodes = []codes.Code{
	codes.Canceled, codes.Unknown, codes.InvalidArgument, codes.DeadlineExceeded, codes.NotFound,
	codes.AlreadyExists, codes.PermissionDenied, codes.ResourceExhausted, codes.FailedPrecondition,
	codes.Aborted, codes.OutOfRange, codes.Unimplemented, codes.Internal, codes.Unavailable,
	codes.DataLoss, codes.Unauthenticated,
}

// cell is one row of the matrix: an operation and a fault.
type cell struct {
	name string
	op   operation
	plan faultPlan
	// deadline is the application's deadline for the operation.
	deadline time.Duration
}

func matrix(b backend) []cell {
	var cells []cell
	ops := operations(b)
	for _, op := range ops {
		for _, code := range failCodes {
			var hold time.Duration
			if op.fresh {
				// The session is created when the client is; its failure is held until the
				// operation waits for it, so that it always meets the failure.
				hold = 300 * time.Millisecond
			}
			cells = append(cells, cell{
				name:     fmt.Sprintf("%s/%s", op.method, code),
				op:       op,
				plan:     faultPlan{method: op.method, code: code, msg: "injected " + code.String(), times: 1, forward: op.method == "Rollback", hang: hold},
				deadline: 5 * time.Second,
			})
		}
	}
	byMethod := func(m string) operation {
		for _, op := range ops {
			if op.method == m {
				return op
			}
		}
		panic(m)
	}
	sessionGone := &errdetails.ResourceInfo{ResourceType: "type.googleapis.com/google.spanner.v1.Session", ResourceName: "projects/p/instances/i/databases/d/sessions/gone"}
	cells = append(cells,
		// The caller's own deadline ends during the Commit.
		cell{name: "Commit/caller deadline", op: byMethod("Commit"), deadline: 500 * time.Millisecond,
			plan: faultPlan{method: "Commit", hang: 1500 * time.Millisecond, times: 1}},
		// A query stream broken after some rows: the client retries it.
		cell{name: "ExecuteStreamingSql/broken after 1 row", op: byMethod("ExecuteStreamingSql"), deadline: 5 * time.Second,
			plan: faultPlan{method: "ExecuteStreamingSql", code: codes.Unavailable, msg: "injected stream break", times: 1, afterMsgs: 1}},
		cell{name: "StreamingRead/broken after 1 row", op: byMethod("StreamingRead"), deadline: 5 * time.Second,
			plan: faultPlan{method: "StreamingRead", code: codes.Internal, msg: "Received unexpected EOS on DATA frame from server", times: 1, afterMsgs: 1}},
		// Session NOT_FOUND, as Spanner says it.
		cell{name: "ExecuteStreamingSql/session not found", op: byMethod("ExecuteStreamingSql"), deadline: 5 * time.Second,
			plan: faultPlan{method: "ExecuteStreamingSql", code: codes.NotFound, msg: "Session not found: " + sessionGone.ResourceName, details: []proto.Message{sessionGone}, times: 1}},
		cell{name: "Commit/session not found", op: byMethod("Commit"), deadline: 5 * time.Second,
			plan: faultPlan{method: "Commit", code: codes.NotFound, msg: "Session not found: " + sessionGone.ResourceName, details: []proto.Message{sessionGone}, times: 1}},
		// ABORTED with a retry delay.
		cell{name: "Commit/aborted with retry delay", op: byMethod("Commit"), deadline: 5 * time.Second,
			plan: faultPlan{method: "Commit", code: codes.Aborted, msg: "Transaction was aborted.", details: []proto.Message{&errdetails.RetryInfo{RetryDelay: durationpb.New(50 * time.Millisecond)}}, times: 1}},
		cell{name: "ExecuteSql/aborted with retry delay", op: byMethod("ExecuteSql"), deadline: 5 * time.Second,
			plan: faultPlan{method: "ExecuteSql", code: codes.Aborted, msg: "Transaction was aborted.", details: []proto.Message{&errdetails.RetryInfo{RetryDelay: durationpb.New(50 * time.Millisecond)}}, times: 1}},
	)
	return cells
}

// outcome is what one run of a cell shows: to the application, at the frontend, and in the
// client's built-in metrics.
type outcome struct {
	Err       string   // the error's code and text, request IDs and names normalized; "" for nil
	As        []string // the types errors.As finds in the error
	RequestID string   // the request ID on the error: "none", "ok" (well-formed), or the bad value
	Calls     []string // the frontend's calls that carry a request ID, in order: method, request and attempt
	Headers   []string // the other headers the frontend saw, per method
	Attempts  []string // the built-in attempt_count, by method and status
	Latencies []string // which built-in latency instruments recorded, by method
	Spans     []string // the attributes the client's spans carry: span name and attribute key
}

var (
	requestIDPattern = regexp.MustCompile(`^1\.[0-9a-f]{16}\.(\d+)\.(\d+)\.(\d+)\.(\d+)$`)
	requestIDInText  = regexp.MustCompile(`requestID = \\?"[^"\\]*\\?"`)
	sessionInText    = regexp.MustCompile(`sessions/[A-Za-z0-9_\-]+`)
	transactionText  = regexp.MustCompile(`(?i)transaction(?: id)?[: ]+[A-Za-z0-9+/=_\-]{8,}`)
)

func observe(err error, calls []call, rm metricdata.ResourceMetrics, before map[string]int64, spans []sdktrace.ReadOnlySpan) outcome {
	var o outcome
	attrs := map[string]bool{}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if !strings.HasPrefix(string(kv.Key), "spannerme.") { // meantDifferences
				attrs[s.Name()+" "+string(kv.Key)] = true
			}
		}
	}
	for a := range attrs {
		o.Spans = append(o.Spans, a)
	}
	sort.Strings(o.Spans)
	if err != nil {
		text := requestIDInText.ReplaceAllString(err.Error(), `requestID = "<id>"`)
		text = sessionInText.ReplaceAllString(text, "sessions/<s>")
		text = transactionText.ReplaceAllString(text, "transaction <t>")
		if spanner.ErrCode(err) == codes.DeadlineExceeded {
			// The caller's deadline and the server's (from grpc-timeout) end the call at the
			// same instant; whichever gRPC sees first names it, for any client alike.
			text = strings.ReplaceAll(text, "stream terminated by RST_STREAM with error code: CANCEL", "context deadline exceeded")
		}
		o.Err = spanner.ErrCode(err).String() + ": " + text
		//lint:ignore SA1019 the request ID is only exposed by spanner.Error
		var se *spanner.Error
		if errors.As(err, &se) {
			o.As = append(o.As, "*spanner.Error")
			switch {
			case se.RequestID == "":
				o.RequestID = "none"
			case requestIDPattern.MatchString(se.RequestID):
				o.RequestID = "ok"
			default:
				o.RequestID = se.RequestID
			}
		}
		var tou *spanner.TransactionOutcomeUnknownError
		if errors.As(err, &tou) {
			o.As = append(o.As, "*spanner.TransactionOutcomeUnknownError")
		}
		var ae *apierror.APIError
		if errors.As(err, &ae) {
			o.As = append(o.As, "*apierror.APIError")
		}
		if _, ok := status.FromError(err); ok {
			o.As = append(o.As, "GRPCStatus")
		}
		if errors.Is(err, context.DeadlineExceeded) {
			o.As = append(o.As, "is context.DeadlineExceeded")
		}
	}
	// Requests are numbered in order of first appearance, per client: the client and channel
	// fields are left out (meantDifferences).
	requests := map[string]int{}
	headers := map[string]bool{}
	for _, c := range calls {
		ids := c.md.Get("x-goog-spanner-request-id")
		if len(ids) == 0 {
			continue
		}
		m := requestIDPattern.FindStringSubmatch(ids[0])
		if m == nil {
			o.Calls = append(o.Calls, c.method+" malformed "+ids[0])
			continue
		}
		key := m[1] + "." + m[3]
		if _, ok := requests[key]; !ok {
			requests[key] = len(requests) + 1
		}
		o.Calls = append(o.Calls, fmt.Sprintf("%s r%d a%s", c.method, requests[key], m[4]))
		for _, h := range []string{"google-cloud-resource-prefix", "x-goog-spanner-route-to-leader", "x-goog-spanner-end-to-end-tracing"} {
			headers[fmt.Sprintf("%s %s=%v", c.method, h, c.md.Get(h))] = true
		}
		headers[fmt.Sprintf("%s user-agent=%s", c.method, userAgentProduct(c.md.Get("user-agent")))] = true
	}
	for h := range headers {
		o.Headers = append(o.Headers, h)
	}
	sort.Strings(o.Headers)
	now := builtinCounts(rm)
	for k, v := range now {
		if strings.HasPrefix(k, "attempt_count ") && v != before[k] {
			o.Attempts = append(o.Attempts, fmt.Sprintf("%s +%d", strings.TrimPrefix(k, "attempt_count "), v-before[k]))
		}
		if (strings.HasPrefix(k, "attempt_latencies ") || strings.HasPrefix(k, "gfe_latencies ") || strings.HasPrefix(k, "afe_latencies ")) && v != before[k] {
			o.Latencies = append(o.Latencies, k)
		}
	}
	sort.Strings(o.Attempts)
	sort.Strings(o.Latencies)
	return o
}

// userAgentProduct keeps the name of the Spanner client's product token in a user agent
// ("spanner-go" of "spanner-go/v1.96.1 grpc-go/1.85.0"); the rest is in meantDifferences.
func userAgentProduct(ua []string) string {
	for _, v := range ua {
		for _, tok := range strings.Fields(v) {
			if name, _, _ := strings.Cut(tok, "/"); name == "spanner-go" {
				return name
			}
		}
	}
	return "none"
}

// builtinCounts sums the Spanner client's built-in metrics (spanner/client/...) by
// instrument, method and status: counters by value, histograms by count.
func builtinCounts(rm metricdata.ResourceMetrics) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			name, ok := strings.CutPrefix(m.Name, "spanner/client/")
			if !ok {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					method, _ := p.Attributes.Value("method")
					st, _ := p.Attributes.Value("status")
					out[fmt.Sprintf("%s %s %s", name, method.AsString(), st.AsString())] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					method, _ := p.Attributes.Value("method")
					out[fmt.Sprintf("%s %s", name, method.AsString())] += int64(p.Count)
				}
			}
		}
	}
	return out
}

func collectBuiltin(t *testing.T, r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collecting built-in metrics: %v", err)
	}
	return rm
}

// diffHarness is one backend's frontend (with the injector) and the clients under test:
// plain first, the reference.
type diffHarness struct {
	b       backend
	inj     *injector
	front   *spannermetest.Frontend
	clients []*diffClient
	spans   *tracetest.SpanRecorder // the global tracer provider's, for the suite's duration
}

func builtinConfig() (spanner.ClientConfig, *sdkmetric.ManualReader) {
	r := sdkmetric.NewManualReader()
	config := fixture.ClientConfig()
	config.ClientMetricsProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	return config, r
}

func newDiffHarness(t *testing.T, b backend) *diffHarness {
	t.Helper()
	h := &diffHarness{b: b, inj: &injector{}, spans: tracetest.NewSpanRecorder()}
	// The Spanner client traces with the global tracer provider (trace.go); the package's
	// tests run one at a time.
	global := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans)))
	t.Cleanup(func() { otel.SetTracerProvider(global) })
	h.front = spannermetest.NewFrontendTB(t, b.addr, spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(h.inj.intercept)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	newPlain := func(ctx context.Context) (*spanner.Client, *sdkmetric.ManualReader, func(), error) {
		config, r := builtinConfig()
		c, err := spanner.NewClientWithConfig(ctx, b.database, config, append(offlineOptions(), option.WithEndpoint(h.front.Addr()))...)
		if err != nil {
			return nil, nil, nil, err
		}
		return c, r, c.Close, nil
	}
	// newME builds a spannerme client of groups; onGME, if not nil, gets its GCPMultiEndpoint.
	newME := func(groups map[string]*multiendpoint.MultiEndpointOptions, onGME func(*spannerme.GCPMultiEndpoint)) func(ctx context.Context) (*spanner.Client, *sdkmetric.ManualReader, func(), error) {
		return func(ctx context.Context) (*spanner.Client, *sdkmetric.ManualReader, func(), error) {
			config, r := builtinConfig()
			settings := spannerme.Settings{
				ReconnectMaxDelay: 100 * time.Millisecond, MinConnectTimeout: time.Second,
				Logger: slog.New(slog.DiscardHandler),
			}
			c, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, b.database, config,
				&grpcgcp.GCPMultiEndpointOptions{MultiEndpoints: groups, Default: "default"}, settings, offlineOptions()...)
			if err != nil {
				return nil, nil, nil, err
			}
			if onGME != nil {
				onGME(gme)
			}
			return c, r, func() { c.Close(); gme.Close() }, nil
		}
	}
	add := func(name string, newClient func(ctx context.Context) (*spanner.Client, *sdkmetric.ManualReader, func(), error)) *diffClient {
		c, r, closeFn, err := newClient(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(closeFn)
		// One query first, so that the client's session exists before the first cell.
		if err := c.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil }); err != nil {
			t.Fatalf("%s: first query: %v", name, err)
		}
		dc := &diffClient{name: name, client: c, metrics: r, newClient: newClient}
		h.clients = append(h.clients, dc)
		return dc
	}
	add("plain client", newPlain)
	add("spannerme, one endpoint", newME(map[string]*multiendpoint.MultiEndpointOptions{
		"default": {Endpoints: []string{h.front.Addr()}}}, nil))
	// Two fake PSC endpoints in front of the same frontend: E1 goes down before the first
	// cell, so the group fails over to E2, and comes back half-way through, so the group
	// switches back to E1.
	e1 := spannermetest.NewEndpointTB(t, h.front.Addr())
	e2 := spannermetest.NewEndpointTB(t, h.front.Addr())
	var gme2 atomic.Pointer[spannerme.GCPMultiEndpoint]
	me2 := newME(map[string]*multiendpoint.MultiEndpointOptions{
		"default": {Endpoints: []string{e1.Addr(), e2.Addr()}, RecoveryTimeout: 100 * time.Millisecond, SwitchingDelay: 100 * time.Millisecond}},
		func(g *spannerme.GCPMultiEndpoint) { gme2.Store(g) })
	failover := add("spannerme, two endpoints, failing over", me2)
	failover.before = func(t *testing.T, i, n int) {
		switch i {
		case 0:
			e1.Down()
			waitCurrent(t, gme2.Load(), e2)
			waitServing(t, failover.client, e2)
		case n / 2:
			if err := e1.Up(); err != nil {
				t.Fatal(err)
			}
			waitCurrent(t, gme2.Load(), e1)
			waitServing(t, failover.client, e1)
		}
	}
	return h
}

// waitCurrent waits, within a bounded wait, until ep is the current endpoint of gme's default
// group: a query served by ep is not enough, as the Spanner client's retry of an attempt
// refused by the other endpoint goes to ep (retry elsewhere) before the group switches.
func waitCurrent(t *testing.T, gme *spannerme.GCPMultiEndpoint, ep *spannermetest.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		st := gme.Status()
		if len(st.Groups) > 0 && st.Groups[0].Current == ep.Addr() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not current within 20s: %+v", ep.Addr(), st.Groups)
		case <-time.After(poll):
		}
	}
}

// waitServing makes queries until one is served by ep, within a bounded wait.
func waitServing(t *testing.T, c *spanner.Client, ep *spannermetest.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		before := ep.Stats().BytesFromBackend
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Single().Query(qctx, spanner.Statement{SQL: "SELECT AccountId FROM Accounts"}).Do(func(*spanner.Row) error { return nil })
		qcancel()
		if err == nil && ep.Stats().BytesFromBackend-before > controlBytes {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no query served by %s within 20s (last error: %v)", ep.Addr(), err)
		case <-time.After(poll):
		}
	}
}

// run runs one cell through one client and returns what it showed.
func (h *diffHarness) run(t *testing.T, dc *diffClient, c cell) outcome {
	t.Helper()
	client, reader := dc.client, dc.metrics
	h.inj.set(&c.plan)
	defer h.inj.set(nil)
	if c.op.fresh {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		fresh, r, closeFn, err := dc.newClient(ctx)
		cancel()
		if err != nil {
			return outcome{Err: "constructor: " + spanner.ErrCode(err).String()}
		}
		defer closeFn()
		client, reader = fresh, r
	}
	before := builtinCounts(collectBuiltin(t, reader))
	// The operation runs in a trace of its own: spans of other traces (spannerme's health
	// probes, in the background) are not the operation's.
	ctx, cancel := context.WithTimeout(context.Background(), c.deadline)
	ctx, root := otel.Tracer("differential").Start(ctx, "cell")
	err := c.op.run(ctx, client)
	root.End()
	cancel()
	var spans []sdktrace.ReadOnlySpan
	for _, s := range h.spans.Ended() {
		if s.SpanContext().TraceID() == root.SpanContext().TraceID() && s.Name() != "cell" {
			spans = append(spans, s)
		}
	}
	if errors.Is(err, errRollbackPlease) {
		err = nil // the application's own error; what the frontend saw is compared
	}
	return observe(err, h.inj.recorded(), collectBuiltin(t, reader), before, spans)
}

// diff lists the fields in which got differs from want.
func diff(want, got outcome) []string {
	var out []string
	field := func(name string, w, g any) {
		if fmt.Sprint(w) != fmt.Sprint(g) {
			out = append(out, fmt.Sprintf("%s:\n\t\tplain:     %v\n\t\tspannerme: %v", name, w, g))
		}
	}
	sets := func(name string, w, g []string) { // sorted sets: only what is in one of them
		var onlyW, onlyG []string
		for _, v := range w {
			if !slices.Contains(g, v) {
				onlyW = append(onlyW, v)
			}
		}
		for _, v := range g {
			if !slices.Contains(w, v) {
				onlyG = append(onlyG, v)
			}
		}
		if len(onlyW)+len(onlyG) > 0 {
			out = append(out, fmt.Sprintf("%s:\n\t\tonly plain:     %v\n\t\tonly spannerme: %v", name, onlyW, onlyG))
		}
	}
	field("error", want.Err, got.Err)
	field("errors.As", want.As, got.As)
	field("request ID on the error", want.RequestID, got.RequestID)
	field("calls at the frontend", want.Calls, got.Calls)
	sets("headers at the frontend", want.Headers, got.Headers)
	field("built-in attempt_count", want.Attempts, got.Attempts)
	field("built-in latencies recorded", want.Latencies, got.Latencies)
	sets("span attributes", want.Spans, got.Spans)
	return out
}

// TestDifferential runs the matrix on each backend: every cell through the plain client and
// through spannerme, compared field by field.
func TestDifferential(t *testing.T) {
	for _, k := range backendKinds {
		t.Run(k.name, func(t *testing.T) {
			b := k.start(t)
			h := newDiffHarness(t, b)
			cells := matrix(b)
			methods := map[string]bool{} // the methods the plain client called in their cells
			ran := map[string]bool{}     // the methods of the cells that ran
			for i, c := range cells {
				t.Run(c.name, func(t *testing.T) {
					ran[c.plan.method] = true
					var want outcome
					for j, dc := range h.clients {
						if dc.before != nil {
							dc.before(t, i, len(cells))
						}
						got := h.run(t, dc, c)
						if j == 0 {
							want = got
							for _, call := range got.Calls {
								if strings.HasPrefix(call, c.plan.method+" ") {
									methods[c.plan.method] = true
								}
							}
							continue
						}
						if d := diff(want, got); len(d) > 0 {
							t.Errorf("%s differs from the plain client:\n\t%s", dc.name, strings.Join(d, "\n\t"))
						}
					}
				})
			}
			// A cell whose method the plain client never called tests nothing.
			for m := range ran {
				if !methods[m] {
					t.Errorf("the plain client never called %s: its cells test nothing", m)
				}
			}
			t.Logf("%d cells, %d clients each", len(cells), len(h.clients))
		})
	}
}

// Every meant difference is a row of docs/transport.md's "What differs from a plain client",
// and every row there is one of them: one list, said twice.
func TestMeantDifferencesAreDocumented(t *testing.T) {
	root, err := fixture.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "transport.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## What differs from a plain client")
	if !ok {
		t.Fatal(`docs/transport.md has no section "What differs from a plain client"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if cells := strings.Split(line, " | "); strings.HasPrefix(line, "| ") && len(cells) == 2 && !strings.HasPrefix(line, "| ---") && line != "| difference | why |" {
			rows = append(rows, strings.ReplaceAll(strings.TrimPrefix(cells[0], "| "), "`", ""))
		}
	}
	var listed []string
	for _, d := range meantDifferences {
		listed = append(listed, d.what)
		if !slices.Contains(rows, d.what) {
			t.Errorf("meant difference %q is not a row of docs/transport.md (rows: %q)", d.what, rows)
		}
	}
	for _, r := range rows {
		if !slices.Contains(listed, r) {
			t.Errorf("docs/transport.md lists %q, which meantDifferences does not", r)
		}
	}
}
