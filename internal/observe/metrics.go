package observe

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// MeterName is the instrumentation scope of every instrument.
const MeterName = "github.com/spannerme/spanner-multiendpoint/spannerme"

// MetricDoc describes one instrument; the metric table of docs/observability.md is generated
// from Docs (TestREADMEMetricTable checks it).
type MetricDoc struct {
	Name, Instrument, Unit string
	Attributes             []string
	Description            string
}

// The instruments, by name.
const (
	MetricEndpointState  = "spannerme.endpoint.state"
	MetricCurrent        = "spannerme.multiendpoint.current_endpoint"
	MetricSwitches       = "spannerme.multiendpoint.switches"
	MetricEjections      = "spannerme.endpoint.ejections"
	MetricDegraded       = "spannerme.endpoint.degraded"
	MetricVerdict        = "spannerme.endpoint.verdict"
	MetricCooldowns      = "spannerme.endpoint.cooldowns"
	MetricReroutes       = "spannerme.client.reroutes"
	MetricResends        = "spannerme.client.resends"
	MetricCalls          = "spannerme.client.calls"
	MetricFailures       = "spannerme.client.call.failures"
	MetricDuration       = "spannerme.client.call.duration"
	MetricActiveCalls    = "spannerme.client.active_calls"
	MetricWaitingCalls   = "spannerme.client.waiting_calls"
	MetricHedges         = "spannerme.multiendpoint.hedges"
	MetricUnknownGroups  = "spannerme.client.unknown_group_calls"
	InstrumentObsCounter = "Int64ObservableCounter"
	MetricTier           = "spannerme.endpoint.tier"
	MetricLatencyScore   = "spannerme.endpoint.latency_score"
	InstrumentFloatGauge = "Float64ObservableGauge"
	InstrumentGauge      = "Int64ObservableGauge"
	InstrumentCounter    = "Int64Counter"
	InstrumentHistogram  = "Float64Histogram"
	InstrumentUpDownObsv = "Int64ObservableUpDownCounter"
)

var Docs = []MetricDoc{
	{MetricEndpointState, InstrumentGauge, "{endpoint}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrEndpointState},
		"1 for the state each endpoint is in within each group, 0 for the other two states"},
	{MetricCurrent, InstrumentGauge, "{endpoint}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrEndpointPriority},
		"1 for each group's current endpoint, 0 for its other endpoints; " + AttrEndpointPriority + " is the endpoint's position in the group (0: the first)"},
	{MetricSwitches, InstrumentCounter, "{switch}", []string{AttrMultiEndpoint, AttrSwitchReason, AttrEndpoint, AttrEndpointName},
		"changes of a group's current endpoint; " + AttrEndpoint + " (and its name) is the new current endpoint"},
	{MetricEjections, InstrumentCounter, "{ejection}", []string{AttrEndpoint, AttrEndpointName, AttrEjectionReason},
		"endpoints taken out of service by outcome-based health"},
	{MetricDegraded, InstrumentGauge, "{endpoint}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName},
		"1 for each endpoint degraded by brownout detection in a group (far slower than its fallback: not available to that group), 0 for the others; absent when brownout detection is off"},
	{MetricVerdict, InstrumentGauge, "{endpoint}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrVerdict},
		"1 for each endpoint's verdict in each group (why the group may or may not use it), 0 for the other verdicts"},
	{MetricCooldowns, InstrumentCounter, "{cooldown}", []string{AttrEndpoint, AttrEndpointName},
		"overload cooldowns started: the endpoint answered RESOURCE_EXHAUSTED and is skipped for new calls while another endpoint of the group is available"},
	{MetricReroutes, InstrumentCounter, "{call}", []string{AttrRerouteReason},
		"calls sent to another endpoint than their group's pick: a retry whose previous attempt failed there, or a call avoiding an endpoint that cools down; refused_by_budget counts the retries the retry budget did not move"},
	{MetricResends, InstrumentCounter, "{call}", []string{AttrMultiEndpoint, AttrResendFrom, AttrEndpoint},
		"streaming reads that failed with a code the Spanner client retries before any response message and were sent again at once, from " + AttrResendFrom + " to " + AttrEndpoint + "; a resend the retry budget refused counts in " + MetricReroutes + " as refused_by_budget"},
	{MetricCalls, InstrumentCounter, "{call}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrGRPCStatusCode},
		"calls (unary calls and streams) sent to an endpoint, counted when they end"},
	{MetricFailures, InstrumentCounter, "{call}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrGRPCStatusCode},
		"calls that ended with a status other than OK"},
	{MetricDuration, InstrumentHistogram, "s", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrGRPCStatusCode},
		"time from a call's start on an endpoint to its end (a stream's: until it ends)"},
	{MetricActiveCalls, InstrumentUpDownObsv, "{call}", []string{AttrEndpoint, AttrEndpointName},
		"calls in flight on each endpoint's pool, retired pools included"},
	{MetricWaitingCalls, InstrumentUpDownObsv, "{call}", nil,
		"calls waiting for their endpoint's pool to finish connecting (or for their group to switch)"},
	{MetricHedges, InstrumentObsCounter, "{hedge}", []string{AttrMultiEndpoint, AttrHedgeOutcome},
		"hedged streaming reads of groups that hedge, by outcome: sent, won (the caller read the hedge), lost (cancelled: the first stream answered first), refused (by the budget)"},
	{MetricUnknownGroups, InstrumentObsCounter, "{call}", []string{AttrMultiEndpoint},
		"calls that named a group that is not configured, by the name they gave (the first 64 names; calls naming further ones count under \"(other unknown names)\"): sent to the default group, or failed when Settings.RejectUnknownGroups is set"},
	{MetricTier, InstrumentGauge, "{tier}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName},
		"the tier of each endpoint of each group with tiers (0: the top tier); absent for groups without tiers"},
	{MetricLatencyScore, InstrumentFloatGauge, "s", []string{AttrEndpoint, AttrEndpointName},
		"the latency score that spreads a tier's calls (a moving average of answered calls) for the endpoint's commonest kind of call, for each endpoint of a group with tiers that has one"},
}

// DurationBuckets are the call duration histogram's bucket bounds, in seconds: those the
// OpenTelemetry semantic conventions recommend for RPC and HTTP durations.
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// Metrics holds a GCPMultiEndpoint's instruments. On a no-op meter provider (or the global
// one before an SDK is installed) the call path records nothing and allocates nothing.
type Metrics struct {
	calls, failures, switches, ejections metric.Int64Counter
	cooldowns, reroutes, resends         metric.Int64Counter
	duration                             metric.Float64Histogram
	state, current, degraded, verdict    metric.Int64ObservableGauge
	active, waiting                      metric.Int64ObservableUpDownCounter
	hedges, unknownGroups                metric.Int64ObservableCounter
	tier                                 metric.Int64ObservableGauge
	latencyScore                         metric.Float64ObservableGauge

	mu  sync.Mutex // guards reg
	reg metric.Registration
}

// NewMetrics creates the instruments on mp's meter. An instrument the provider refuses is
// replaced by a no-op one (the provider reports its own errors through otel.Handle).
func NewMetrics(mp metric.MeterProvider) *Metrics {
	meter := mp.Meter(MeterName)
	doc := func(name string) (metric.InstrumentOption, metric.InstrumentOption) {
		for _, d := range Docs {
			if d.Name == name {
				return metric.WithUnit(d.Unit), metric.WithDescription(d.Description)
			}
		}
		panic("spannerme: no metricDoc for " + name) // a programming error, caught by every test
	}
	counter := func(name string) metric.Int64Counter {
		u, d := doc(name)
		c, _ := meter.Int64Counter(name, u, d)
		return c
	}
	gauge := func(name string) metric.Int64ObservableGauge {
		u, d := doc(name)
		g, _ := meter.Int64ObservableGauge(name, u, d)
		return g
	}
	upDown := func(name string) metric.Int64ObservableUpDownCounter {
		u, d := doc(name)
		c, _ := meter.Int64ObservableUpDownCounter(name, u, d)
		return c
	}
	m := &Metrics{
		calls: counter(MetricCalls), failures: counter(MetricFailures),
		switches: counter(MetricSwitches), ejections: counter(MetricEjections),
		cooldowns: counter(MetricCooldowns), reroutes: counter(MetricReroutes), resends: counter(MetricResends),
		state: gauge(MetricEndpointState), current: gauge(MetricCurrent), degraded: gauge(MetricDegraded),
		verdict: gauge(MetricVerdict), tier: gauge(MetricTier),
		active: upDown(MetricActiveCalls), waiting: upDown(MetricWaitingCalls),
	}
	u, d := doc(MetricHedges)
	m.hedges, _ = meter.Int64ObservableCounter(MetricHedges, u, d)
	u, d = doc(MetricUnknownGroups)
	m.unknownGroups, _ = meter.Int64ObservableCounter(MetricUnknownGroups, u, d)
	u, d = doc(MetricLatencyScore)
	m.latencyScore, _ = meter.Float64ObservableGauge(MetricLatencyScore, u, d)
	u, d = doc(MetricDuration)
	m.duration, _ = meter.Float64Histogram(MetricDuration, u, d, metric.WithExplicitBucketBoundaries(DurationBuckets...))
	fillNoop(m)
	return m
}

// fillNoop replaces the instruments a provider refused (nil) with no-op ones.
func fillNoop(m *Metrics) {
	for _, c := range []*metric.Int64Counter{&m.calls, &m.failures, &m.switches, &m.ejections, &m.cooldowns, &m.reroutes, &m.resends} {
		if *c == nil {
			*c = noop.Int64Counter{}
		}
	}
	for _, c := range []*metric.Int64ObservableCounter{&m.hedges, &m.unknownGroups} {
		if *c == nil {
			*c = noop.Int64ObservableCounter{}
		}
	}
	if m.duration == nil {
		m.duration = noop.Float64Histogram{}
	}
	if m.latencyScore == nil {
		m.latencyScore = noop.Float64ObservableGauge{}
	}
	for _, g := range []*metric.Int64ObservableGauge{&m.state, &m.current, &m.degraded, &m.verdict, &m.tier} {
		if *g == nil {
			*g = noop.Int64ObservableGauge{}
		}
	}
	for _, c := range []*metric.Int64ObservableUpDownCounter{&m.active, &m.waiting} {
		if *c == nil {
			*c = noop.Int64ObservableUpDownCounter{}
		}
	}
}

// View is what the observable instruments read at each collection.
type View struct {
	Waiting int64
	Active  map[string]int64  // in-flight calls by endpoint, retired pools included
	Names   map[string]string // endpoint -> EndpointOptions.Name, named endpoints only
	Groups  []multiendpoint.Status
	// Hedges holds, per hedging group, its hedging counts; nil when no group hedges.
	Hedges map[string]hedge.Counts
	// Degraded holds, per group, whether each endpoint is degraded (brownout); nil when
	// brownout detection is off.
	Degraded map[string]map[string]bool
	// Verdicts holds, per group, each endpoint's last verdict.
	Verdicts map[string]map[string]verdict.Reason
	// Scores holds the latency score of each endpoint of a group with tiers that has one.
	Scores map[string]time.Duration
	// Unknown holds the calls that named a group that is not configured, by the name they
	// gave (route.UnknownNames.Counts: at most route.MaxUnknownNames names and the rest).
	Unknown map[string]int64
}

// Observe registers the callback of the observable instruments, which reads view at each
// collection; view returns false once there is nothing to observe but the waiting calls
// (after Close).
func (m *Metrics) Observe(mp metric.MeterProvider, view func() (View, bool)) {
	reg, err := mp.Meter(MeterName).RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v, ok := view()
		o.ObserveInt64(m.waiting, v.Waiting)
		if !ok {
			return nil
		}
		for e, n := range v.Active {
			o.ObserveInt64(m.active, n, metric.WithAttributes(endpointAttrs(e, v.Names[e])...))
		}
		for _, st := range v.Groups {
			for _, e := range st.Endpoints {
				ep := endpointAttrs(e.Endpoint, v.Names[e.Endpoint])
				for _, state := range []multiendpoint.State{multiendpoint.Available, multiendpoint.Recovering, multiendpoint.Unavailable} {
					o.ObserveInt64(m.state, boolInt(e.State == state), metric.WithAttributes(append([]attribute.KeyValue{
						attribute.String(AttrMultiEndpoint, st.Name), attribute.String(AttrEndpointState, stateAttr(state))}, ep...)...))
				}
				o.ObserveInt64(m.current, boolInt(e.Endpoint == st.Current), metric.WithAttributes(
					append([]attribute.KeyValue{attribute.String(AttrMultiEndpoint, st.Name), attribute.Int(AttrEndpointPriority, e.Priority)}, ep...)...))
				if r, ok := v.Verdicts[st.Name][e.Endpoint]; ok {
					for _, each := range verdict.Reasons() {
						o.ObserveInt64(m.verdict, boolInt(each == r), metric.WithAttributes(append([]attribute.KeyValue{
							attribute.String(AttrMultiEndpoint, st.Name), attribute.String(AttrVerdict, each.Key())}, ep...)...))
					}
				}
				if v.Degraded != nil {
					o.ObserveInt64(m.degraded, boolInt(v.Degraded[st.Name][e.Endpoint]), metric.WithAttributes(
						append([]attribute.KeyValue{attribute.String(AttrMultiEndpoint, st.Name)}, ep...)...))
				}
			}
		}
		for g, h := range v.Hedges {
			for _, c := range []struct {
				outcome string
				n       int64
			}{{"sent", h.Sent}, {"won", h.Won}, {"lost", h.Lost}, {"refused", h.Refused}} {
				o.ObserveInt64(m.hedges, c.n, metric.WithAttributes(
					attribute.String(AttrMultiEndpoint, g), attribute.String(AttrHedgeOutcome, c.outcome)))
			}
		}
		m.observeTiers(o, v)
		for name, n := range v.Unknown {
			o.ObserveInt64(m.unknownGroups, n, metric.WithAttributes(attribute.String(AttrMultiEndpoint, name)))
		}
		return nil
	}, m.state, m.current, m.degraded, m.verdict, m.active, m.waiting, m.hedges, m.tier, m.latencyScore, m.unknownGroups)
	if err != nil {
		return // the provider reports it; the synchronous instruments still work
	}
	m.mu.Lock()
	m.reg = reg
	m.mu.Unlock()
}

// endpointAttrs returns the attributes naming an endpoint: AttrEndpoint, and AttrEndpointName
// when name is not empty.
func endpointAttrs(endpoint, name string) []attribute.KeyValue {
	if name == "" {
		return []attribute.KeyValue{attribute.String(AttrEndpoint, endpoint)}
	}
	return []attribute.KeyValue{attribute.String(AttrEndpoint, endpoint), attribute.String(AttrEndpointName, name)}
}

func stateAttr(s multiendpoint.State) string {
	switch s {
	case multiendpoint.Available:
		return "available"
	case multiendpoint.Recovering:
		return "recovering"
	}
	return "unavailable"
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Close unregisters the observable callback. Idempotent.
func (m *Metrics) Close() {
	m.mu.Lock()
	reg := m.reg
	m.reg = nil
	m.mu.Unlock()
	if reg != nil {
		_ = reg.Unregister()
	}
}

// switched counts a switch of group to endpoint to, named toName ("" for none), for reason
// (a spannerme.SwitchReason's String).
func (m *Metrics) switched(group, reason, to, toName string) {
	m.switches.Add(context.Background(), 1, metric.WithAttributes(append([]attribute.KeyValue{
		attribute.String(AttrMultiEndpoint, group), attribute.String(AttrSwitchReason, reason)},
		endpointAttrs(to, toName)...)...))
}

// EjectionReasons are the values of AttrEjectionReason (health.Reason's String of each
// reason), each endpoint's ejections series is created at 0 under each of them.
var EjectionReasons = func() []string {
	var out []string
	for r := health.ConsecutiveFailures; r <= health.ProbeFailed; r++ {
		out = append(out, r.String())
	}
	return out
}()

// EndpointSeries creates the per-endpoint counters of endpoint, named name ("" for none), at
// 0: its ejections under each of EjectionReasons, and its cooldowns. Called when its pool is
// made and when it is renamed, so that a series exists before its first event and a rule
// such as increase(spannerme_endpoint_ejections_total[10m]) > 0 sees the first one (a
// series that appears already at 1 has no increase). Adding 0 to a counter changes no value.
func (m *Metrics) EndpointSeries(endpoint, name string) {
	ctx := context.Background()
	ep := endpointAttrs(endpoint, name)
	for _, r := range EjectionReasons {
		m.ejections.Add(ctx, 0, metric.WithAttributes(append(append([]attribute.KeyValue(nil), ep...),
			attribute.String(AttrEjectionReason, r))...))
	}
	m.cooldowns.Add(ctx, 0, metric.WithAttributes(ep...))
}

// ejected counts an ejection of endpoint, named name ("" for none).
func (m *Metrics) ejected(endpoint, name, reason string) {
	m.ejections.Add(context.Background(), 1, metric.WithAttributes(append(endpointAttrs(endpoint, name),
		attribute.String(AttrEjectionReason, reason))...))
}

// CallAttrs are the measurement options of the calls of one group on one endpoint, one per
// gRPC code, built once per (pool, group) so that recording a call allocates nothing.
type CallAttrs struct {
	add    [numCodes][]metric.AddOption
	record [numCodes][]metric.RecordOption
}

// numCodes is the number of gRPC codes (OK to Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// newCallAttrs builds the CallAttrs of group's calls on endpoint, named name ("" for none).
func newCallAttrs(group, endpoint, name string) *CallAttrs {
	a := &CallAttrs{}
	for c := range numCodes {
		kv := append([]attribute.KeyValue{attribute.String(AttrMultiEndpoint, group), attribute.Int(AttrGRPCStatusCode, c)},
			endpointAttrs(endpoint, name)...)
		o := metric.WithAttributeSet(attribute.NewSet(kv...))
		a.add[c] = []metric.AddOption{o}
		a.record[c] = []metric.RecordOption{o}
	}
	return a
}

// AttrCache holds one pool's CallAttrs per group, under one name of its endpoint, built on
// first use. The zero value is empty, ready to use; safe for concurrent use, and a hit takes
// no lock.
type AttrCache struct {
	m  atomic.Pointer[map[string]*CallAttrs]
	mu sync.Mutex // serializes the building
}

// Of returns the CallAttrs of group's calls on endpoint, named name, building them on first
// use. Every call of one AttrCache passes the same endpoint and name.
func (c *AttrCache) Of(group, endpoint, name string) *CallAttrs {
	if m := c.m.Load(); m != nil {
		if a := (*m)[group]; a != nil {
			return a
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if a := (*old)[group]; a != nil {
			return a
		}
	}
	next := make(map[string]*CallAttrs)
	if old != nil {
		for g, a := range *old {
			next[g] = a
		}
	}
	a := newCallAttrs(group, endpoint, name)
	next[group] = a
	c.m.Store(&next)
	return a
}

// Rerouted counts a call sent elsewhere than its group's pick (or, for steer.RerouteRefused,
// a retry the budget kept where it was); reason is one of steer's Reroute values.
func (m *Metrics) Rerouted(reason string) {
	m.reroutes.Add(context.Background(), 1, metric.WithAttributes(attribute.String(AttrRerouteReason, reason)))
}

// Resent counts a stream of group resent at once from endpoint from to endpoint to.
func (m *Metrics) Resent(group, from, to string) {
	m.resends.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(AttrMultiEndpoint, group), attribute.String(AttrResendFrom, from), attribute.String(AttrEndpoint, to)))
}

// observeTiers observes the tier metrics: each endpoint's tier in each group with tiers, and
// the latency scores.
func (m *Metrics) observeTiers(o metric.Observer, v View) {
	for _, st := range v.Groups {
		for i, tier := range st.Tiers {
			for _, e := range tier {
				o.ObserveInt64(m.tier, int64(i), metric.WithAttributes(append([]attribute.KeyValue{
					attribute.String(AttrMultiEndpoint, st.Name)}, endpointAttrs(e, v.Names[e])...)...))
			}
		}
	}
	for e, l := range v.Scores {
		o.ObserveFloat64(m.latencyScore, l.Seconds(), metric.WithAttributes(endpointAttrs(e, v.Names[e])...))
	}
}
