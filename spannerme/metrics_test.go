package spannerme

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
)

// newMetricReader returns an SDK meter provider whose metrics the reader collects on demand.
func newMetricReader() (*sdkmetric.ManualReader, metric.MeterProvider) {
	r := sdkmetric.NewManualReader()
	return r, sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
}

func collect(t *testing.T, r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rm
}

// find returns the instrument called name, checking its scope.
func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name && sm.Scope.Name == observe.MeterName {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// int64Points returns the data points of an int64 sum or gauge.
func int64Points(m metricdata.Metrics) []metricdata.DataPoint[int64] {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return d.DataPoints
	case metricdata.Gauge[int64]:
		return d.DataPoints
	}
	return nil
}

// sumBy adds up the values of instrument name by the value of attribute key.
func sumBy(rm metricdata.ResourceMetrics, name, key string) map[string]int64 {
	out := map[string]int64{}
	m, _ := find(rm, name)
	for _, dp := range int64Points(m) {
		v, _ := dp.Attributes.Value(attribute.Key(key))
		out[v.String()] += dp.Value
	}
	return out
}

// valueWhere returns the value of instrument name at the data point whose attributes
// include all of attrs.
func valueWhere(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) (int64, bool) {
	m, _ := find(rm, name)
	for _, dp := range int64Points(m) {
		match := true
		for _, kv := range attrs {
			v, ok := dp.Attributes.Value(kv.Key)
			match = match && ok && v == kv.Value
		}
		if match {
			return dp.Value, true
		}
	}
	return 0, false
}

// After one failover and one switch-back: switches {fallback: 1, recovery: 1}, the current
// endpoint back on the first, calls counted per endpoint, and every other instrument there.
func TestMetricsAfterFailoverAndSwitchBack(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	reader, mp := newMetricReader()
	s := fastSettings(nil)
	s.MeterProvider = mp
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(200*time.Millisecond, 300*time.Millisecond, e1.Addr(), e2.Addr())}), s)
	ctx := context.Background()
	calls := func(n int, want string) {
		t.Helper()
		for range n {
			if got, err := call(ctx, gme); err != nil || got != want {
				t.Fatalf("served by %q, %v; want %s", got, err, want)
			}
		}
	}
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	calls(5, "E1")
	e1.Down()
	waitServedBy(t, ctx, gme, "E2", 10*time.Second)
	calls(7, "E2")
	if v, ok := valueWhere(collect(t, reader), observe.MetricCurrent, attribute.String(AttrMultiEndpoint, "g"), attribute.Int(AttrEndpointPriority, 1)); !ok || v != 1 {
		t.Errorf("failed over: current_endpoint{priority 1} = %d (%v), want 1", v, ok)
	}
	e1.Up()
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	calls(3, "E1")

	rm := collect(t, reader)
	for _, d := range observe.Docs {
		if d.Name == observe.MetricFailures || d.Name == observe.MetricHedges || d.Name == observe.MetricReroutes || d.Name == observe.MetricResends || d.Name == observe.MetricUnknownGroups {
			continue // nothing retried; maybe no call failed; no group hedges; no unknown group named
		}
		if d.Name == observe.MetricTier || d.Name == observe.MetricLatencyScore {
			continue // no group has tiers (TestTiersSlowerMemberLosesItsShare reads them)
		}
		if _, ok := find(rm, d.Name); !ok {
			t.Errorf("instrument %s not reported", d.Name)
		}
	}
	if got := sumBy(rm, observe.MetricSwitches, AttrSwitchReason); len(got) != 2 || got["fallback"] != 1 || got["recovery"] != 1 {
		t.Errorf("switches by reason = %v, want fallback:1, recovery:1", got)
	}
	g := attribute.String(AttrMultiEndpoint, "g")
	// Back on the first endpoint: nothing current off priority 0, the one query an alert
	// "off the first endpoint" makes.
	for prio, want := range map[int]int64{0: 1, 1: 0} {
		if v, ok := valueWhere(rm, observe.MetricCurrent, g, attribute.Int(AttrEndpointPriority, prio)); !ok || v != want {
			t.Errorf("current_endpoint{priority %d} = %d (%v), want %d", prio, v, ok, want)
		}
	}
	for e, want := range map[string]int64{e1.Addr(): 1, e2.Addr(): 0} {
		if v, ok := valueWhere(rm, observe.MetricCurrent, g, attribute.String(AttrEndpoint, e)); !ok || v != want {
			t.Errorf("current_endpoint{%s} = %d (%v), want %d", e, v, ok, want)
		}
		if v, _ := valueWhere(rm, observe.MetricEndpointState, g, attribute.String(AttrEndpoint, e), attribute.String(AttrEndpointState, "available")); v != 1 {
			t.Errorf("endpoint.state{%s, available} = %d, want 1", e, v)
		}
	}
	ok := attribute.Int(AttrGRPCStatusCode, int(codes.OK))
	okCalls := map[string]int64{}
	m, _ := find(rm, observe.MetricCalls)
	for _, dp := range int64Points(m) {
		if v, _ := dp.Attributes.Value(ok.Key); v == ok.Value {
			e, _ := dp.Attributes.Value(AttrEndpoint)
			okCalls[e.AsString()] += dp.Value
		}
	}
	// waitServedBy's calls count too: at least the scripted ones on each endpoint.
	if okCalls[e1.Addr()] < 8 || okCalls[e2.Addr()] < 7 {
		t.Errorf("OK calls per endpoint = %v, want >= 8 on E1 (%s), >= 7 on E2", okCalls, e1.Addr())
	}
	var histCount uint64
	hm, _ := find(rm, observe.MetricDuration)
	for _, dp := range hm.Data.(metricdata.Histogram[float64]).DataPoints {
		histCount += dp.Count
		if v, ok := dp.Max.Value(); ok && (v <= 0 || v > 10) {
			t.Errorf("a call took %vs: not in seconds?", v)
		}
	}
	var total int64
	for _, n := range sumBy(rm, observe.MetricCalls, AttrEndpoint) {
		total += n
	}
	if int64(histCount) != total {
		t.Errorf("duration histogram counts %d calls, the calls counter %d", histCount, total)
	}
	if failed := sumBy(rm, observe.MetricFailures, AttrEndpoint); failed[e2.Addr()] != 0 {
		t.Errorf("failures on the healthy fallback: %v", failed)
	}
	if v, ok := valueWhere(rm, observe.MetricActiveCalls, attribute.String(AttrEndpoint, e1.Addr())); !ok || v != 0 {
		t.Errorf("active calls on E1 = %d (%v), want 0 reported", v, ok)
	}
}

// A stream counts as one call, when it ends, with its code.
func TestMetricsCountStreams(t *testing.T) {
	e1 := startEndpoint(t, "E1")
	reader, mp := newMetricReader()
	s := fastSettings(nil)
	s.MeterProvider = mp
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	before := sumBy(collect(t, reader), observe.MetricCalls, AttrGRPCStatusCode)
	for range 3 {
		if err := streamOnce(ctx, gme); err != nil {
			t.Fatal(err)
		}
	}
	// One stream abandoned by cancelling its context.
	cctx, cancel := context.WithCancel(ctx)
	st, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(cctx, &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{}, {IntervalUs: 10_000_000}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	eventually(t, 10*time.Second, "the cancelled stream counted", func() bool {
		return sumBy(collect(t, reader), observe.MetricCalls, AttrGRPCStatusCode)["1"] == 1
	})
	after := sumBy(collect(t, reader), observe.MetricCalls, AttrGRPCStatusCode)
	if got := after["0"] - before["0"]; got != 3 {
		t.Errorf("OK streams counted: %d, want 3 (%v)", got, after)
	}
	if got := sumBy(collect(t, reader), observe.MetricFailures, AttrGRPCStatusCode); got["1"] != 1 {
		t.Errorf("failures by code = %v, want CANCELED (1): 1", got)
	}
}

// spySpan is a span that says whether it records, and counts SetAttributes calls.
type spySpan struct {
	trace.Span
	recording bool
	set       []attribute.KeyValue
}

func (s *spySpan) IsRecording() bool { return s.recording }

func (s *spySpan) SetAttributes(kv ...attribute.KeyValue) { s.set = append(s.set, kv...) }

// The call's span gets the group and the endpoint when it is recording, and nothing when it
// is not.
func TestSpanAttributes(t *testing.T) {
	a, b := startEndpoint(t, "A"), startEndpoint(t, "B")
	s := fastSettings(nil)
	s.EndpointOptions = map[string]EndpointOptions{b.Addr(): {Name: "psc-west2"}}
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, a.Addr()), "west": group(0, 0, b.Addr())}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "A", 10*time.Second)

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)
	sctx, span := tp.Tracer("test").Start(NewMEContext(ctx, "west"), "query")
	if got, err := call(sctx, gme); err != nil || got != "B" {
		t.Fatalf("served by %q, %v", got, err)
	}
	span.End()
	attrs := map[attribute.Key]string{}
	for _, kv := range rec.Ended()[0].Attributes() {
		attrs[kv.Key] = kv.Value.String()
	}
	if attrs[AttrMultiEndpoint] != "west" || attrs[AttrEndpoint] != b.Addr() || attrs[AttrEndpointName] != "psc-west2" {
		t.Errorf("span attributes %v, want %s=west, %s=%s, %s=psc-west2", attrs, AttrMultiEndpoint, AttrEndpoint, b.Addr(), AttrEndpointName)
	}
	// An endpoint without a name: no name attribute.
	_, span = tp.Tracer("test").Start(ctx, "query")
	if got, err := call(trace.ContextWithSpan(ctx, span), gme); err != nil || got != "A" {
		t.Fatalf("served by %q, %v", got, err)
	}
	span.End()
	for _, kv := range rec.Ended()[1].Attributes() {
		if kv.Key == AttrEndpointName {
			t.Errorf("span of a call to unnamed %s has %s=%s", a.Addr(), kv.Key, kv.Value.String())
		}
	}

	for _, recording := range []bool{false, true} {
		spy := &spySpan{Span: trace.SpanFromContext(ctx), recording: recording}
		if _, err := call(trace.ContextWithSpan(ctx, spy), gme); err != nil {
			t.Fatal(err)
		}
		if got := len(spy.set) > 0; got != recording {
			t.Errorf("recording %v: attributes set: %v", recording, spy.set)
		}
	}
}

// The measurement of a call allocates nothing with a no-op meter provider (nor with the SDK,
// once the call's attribute set exists), whether its endpoint has a name or not.
func TestCallMeasurementDoesNotAllocate(t *testing.T) {
	_, sdk := newMetricReader()
	for _, tc := range []struct {
		name, endpointName string
		mp                 metric.MeterProvider
	}{{"noop", "", noop.NewMeterProvider()}, {"sdk", "", sdk}, {"sdk named endpoint", "psc-east4", sdk}} {
		t.Run(tc.name, func(t *testing.T) {
			s := fastSettings(nil)
			s.MeterProvider = tc.mp
			s.EndpointOptions = map[string]EndpointOptions{"127.0.0.1:1": {Name: tc.endpointName}}
			gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "127.0.0.1:1")}), s)
			snap := gme.snap.Load()
			p, me := snap.Pools["127.0.0.1:1"], snap.Default.ME
			ctx := context.Background()
			measure := func() {
				start := gme.obs.CallBegin(ctx, p.Endpoint(), poolName(p), me.Name())
				p.EndCall(ctx, me.Name(), start, nil)
			}
			measure() // builds the attribute sets
			if n := testing.AllocsPerRun(1000, measure); n != 0 {
				t.Errorf("measuring a call allocates %v times", n)
			}
		})
	}
}

// BenchmarkInvokeMetrics measures Invoke with a no-op meter provider and with the SDK (a
// manual reader, never collected), sequentially so that allocs/op are exact.
//
//	go test -run '^$' -bench InvokeMetrics -benchmem ./spannerme/
func BenchmarkInvokeMetrics(b *testing.B) {
	addr := startServer(b, "primary")
	_, sdk := newMetricReader()
	for _, tc := range []struct {
		name string
		mp   metric.MeterProvider
	}{{"noop", noop.NewMeterProvider()}, {"sdk", sdk}} {
		b.Run(tc.name, func(b *testing.B) {
			s := fastSettings(nil)
			s.MeterProvider = tc.mp
			gme := newGME(b, benchOptions("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, addr)}), s)
			client := testpb.NewTestServiceClient(gme)
			ctx := context.Background()
			req := &testpb.SimpleRequest{}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := client.UnaryCall(wctx, req, grpc.WaitForReady(true))
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := client.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var updateREADME = flag.Bool("update-readme", false, "rewrite the metric table of docs/observability.md from observe.Docs")

const (
	readmeTableStart = "<!-- metric table: generated from internal/observe/metrics.go by `go test ./spannerme -run TestREADMEMetricTable -update-readme` -->"
	readmeTableEnd   = "<!-- end of metric table -->"
)

// metricTable renders observe.Docs as the markdown table of docs/observability.md.
func metricTable() string {
	var b strings.Builder
	b.WriteString("| instrument | kind | unit | attributes | meaning |\n| --- | --- | --- | --- | --- |\n")
	for _, d := range observe.Docs {
		attrs := "none"
		if len(d.Attributes) > 0 {
			attrs = "`" + strings.Join(d.Attributes, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s | %s |\n", d.Name, d.Instrument, d.Unit, attrs, d.Description)
	}
	return b.String()
}

// The metric table of docs/observability.md is the one generated from observe.Docs, which observe.NewMetrics uses to
// create the instruments.
func TestREADMEMetricTable(t *testing.T) {
	const path = "../docs/observability.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start, end := strings.Index(readme, readmeTableStart), strings.Index(readme, readmeTableEnd)
	if start < 0 || end < start {
		t.Fatalf("docs/observability.md lacks the markers %q ... %q", readmeTableStart, readmeTableEnd)
	}
	got := readme[start+len(readmeTableStart) : end]
	want := "\n" + metricTable()
	if got == want {
		return
	}
	if *updateREADME {
		if err := os.WriteFile(path, []byte(readme[:start+len(readmeTableStart)]+want+readme[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/observability.md's metric table is out of date; run go test ./spannerme -run TestREADMEMetricTable -update-readme\ngot:\n%s\nwant:\n%s", got, want)
}

// NewMultiEndpointClient* report to Settings.MeterProvider, else to the Spanner client's
// ClientConfig.OpenTelemetryMeterProvider.
func TestMeterProviderFromClientConfig(t *testing.T) {
	b := startSpannerBackend(t, 1)
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, b.eps[0].Addr())})
	ctx := context.Background()
	configReader, configMP := newMetricReader()
	settingsReader, settingsMP := newMetricReader()
	callsIn := func(r *sdkmetric.ManualReader) int64 {
		return sumBy(collect(t, r), observe.MetricCalls, AttrMultiEndpoint)["g"]
	}
	for _, tc := range []struct {
		name      string
		settings  metric.MeterProvider
		want, not *sdkmetric.ManualReader
	}{
		{"ClientConfig's", nil, configReader, settingsReader},
		{"Settings' first", settingsMP, settingsReader, configReader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fixture.ClientConfig()
			cfg.OpenTelemetryMeterProvider = configMP
			s := fastSettings(nil)
			s.MeterProvider = tc.settings
			client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, cfg, o, s, clientOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer gme.Close()
			defer client.Close()
			wantBefore, notBefore := callsIn(tc.want), callsIn(tc.not)
			if _, err := countAccounts(ctx, client); err != nil {
				t.Fatal(err)
			}
			if got := callsIn(tc.want) - wantBefore; got == 0 {
				t.Errorf("no call counted in the %s provider", tc.name)
			}
			if got := callsIn(tc.not) - notBefore; got != 0 {
				t.Errorf("%d calls counted in the other provider", got)
			}
		})
	}
}

// The attribute keys this package exports are the ones internal/observe records under.
func TestAttributeKeysAreObserves(t *testing.T) {
	for _, k := range []struct{ face, observe string }{
		{AttrMultiEndpoint, observe.AttrMultiEndpoint},
		{AttrEndpoint, observe.AttrEndpoint},
		{AttrEndpointName, observe.AttrEndpointName},
		{AttrEndpointPriority, observe.AttrEndpointPriority},
		{AttrEndpointState, observe.AttrEndpointState},
		{AttrSwitchReason, observe.AttrSwitchReason},
		{AttrVerdict, observe.AttrVerdict},
		{AttrEjectionReason, observe.AttrEjectionReason},
		{AttrHedgeOutcome, observe.AttrHedgeOutcome},
		{AttrRerouteReason, observe.AttrRerouteReason},
		{AttrResendFrom, observe.AttrResendFrom},
		{AttrGRPCStatusCode, observe.AttrGRPCStatusCode},
	} {
		if k.face != k.observe {
			t.Errorf("attribute key %q here, %q in internal/observe", k.face, k.observe)
		}
	}
}
