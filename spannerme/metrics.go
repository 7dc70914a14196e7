package spannerme

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// Attribute keys of the metrics and of the trace attributes.
const (
	// AttrMultiEndpoint is the group (MultiEndpoint) name, on metrics and on the call's span.
	AttrMultiEndpoint = "spannerme.multiendpoint"
	// AttrEndpoint is the endpoint, on metrics and on the call's span.
	AttrEndpoint = "spannerme.endpoint"
	// AttrEndpointName is the endpoint's EndpointOptions.Name, next to AttrEndpoint wherever
	// that is, but only when the endpoint has a name: an endpoint without one has no such
	// attribute. It adds no series (a name is 1:1 with its endpoint), except that a reload
	// that renames an endpoint starts its series under the new name.
	AttrEndpointName = "spannerme.endpoint.name"
	// AttrEndpointPriority is the endpoint's position in its group's list (0 is the top
	// priority), an integer, on the current-endpoint gauge only: "a group is off its first
	// endpoint" is current_endpoint == 1 with a priority other than 0. A reconfiguration that
	// reorders a group's endpoints starts their series under the new positions.
	AttrEndpointPriority = "spannerme.endpoint.priority"
	// AttrEndpointState is an EndpointState in lower case: available, recovering or
	// unavailable.
	AttrEndpointState = "spannerme.endpoint.state"
	// AttrSwitchReason is a SwitchReason: fallback, recovery or reconfiguration.
	AttrSwitchReason = "spannerme.switch.reason"
	// AttrVerdict is an endpoint's verdict in a group, on the verdict gauge: why the group may
	// or may not use it (EndpointStatus.Verdict), as a short key: usable, not_connected,
	// ejected, degraded, degraded_last_resort or ejected_everywhere.
	AttrVerdict = "spannerme.endpoint.verdict"
	// AttrEjectionReason says why outcome-based health ejected an endpoint: an EjectionReason
	// in its String form (EjectionReason lists the values).
	AttrEjectionReason = "spannerme.ejection.reason"
	// AttrHedgeOutcome is what became of hedges (HedgingStatus): sent, won, lost or
	// refused (by the budget).
	AttrHedgeOutcome = "spannerme.hedge.outcome"
	// AttrRerouteReason says why a call went elsewhere than its group's current endpoint:
	// retry_elsewhere (its request's previous attempt failed there), overload_cooldown (the
	// endpoint is cooling down after RESOURCE_EXHAUSTED), or refused_by_budget (a retry the
	// retry budget kept where the group sends it).
	AttrRerouteReason = "spannerme.reroute.reason"
	// AttrResendFrom is the endpoint a stream failed on before it was sent again at once to
	// another endpoint (AttrEndpoint) of its group (docs/health.md, "Retry elsewhere").
	AttrResendFrom = "spannerme.resend.from"
	// AttrGRPCStatusCode is the call's gRPC status code as an integer (0 is OK), as in the
	// OpenTelemetry semantic conventions for gRPC.
	AttrGRPCStatusCode = "rpc.grpc.status_code"
)

// meterName is the instrumentation scope of every instrument.
const meterName = "github.com/spannerme/spanner-multiendpoint/spannerme"

// metricDoc describes one instrument; the metric table of docs/observability.md is generated
// from metricDocs (TestREADMEMetricTable checks it).
type metricDoc struct {
	Name, Instrument, Unit string
	Attributes             []string
	Description            string
}

// The instruments, by name.
const (
	metricEndpointState  = "spannerme.endpoint.state"
	metricCurrent        = "spannerme.multiendpoint.current_endpoint"
	metricSwitches       = "spannerme.multiendpoint.switches"
	metricEjections      = "spannerme.endpoint.ejections"
	metricDegraded       = "spannerme.endpoint.degraded"
	metricVerdict        = "spannerme.endpoint.verdict"
	metricCooldowns      = "spannerme.endpoint.cooldowns"
	metricReroutes       = "spannerme.client.reroutes"
	metricResends        = "spannerme.client.resends"
	metricCalls          = "spannerme.client.calls"
	metricFailures       = "spannerme.client.call.failures"
	metricDuration       = "spannerme.client.call.duration"
	metricActiveCalls    = "spannerme.client.active_calls"
	metricWaitingCalls   = "spannerme.client.waiting_calls"
	metricHedges         = "spannerme.multiendpoint.hedges"
	instrumentObsCounter = "Int64ObservableCounter"
	metricTier           = "spannerme.endpoint.tier"
	metricLatencyScore   = "spannerme.endpoint.latency_score"
	instrumentFloatGauge = "Float64ObservableGauge"
	instrumentGauge      = "Int64ObservableGauge"
	instrumentCounter    = "Int64Counter"
	instrumentHistogram  = "Float64Histogram"
	instrumentUpDownObsv = "Int64ObservableUpDownCounter"
)

var metricDocs = []metricDoc{
	{metricEndpointState, instrumentGauge, "{endpoint}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrEndpointState},
		"1 for the state each endpoint is in within each group, 0 for the other two states"},
	{metricCurrent, instrumentGauge, "{endpoint}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrEndpointPriority},
		"1 for each group's current endpoint, 0 for its other endpoints; " + AttrEndpointPriority + " is the endpoint's position in the group (0: the first)"},
	{metricSwitches, instrumentCounter, "{switch}", []string{AttrMultiEndpoint, AttrSwitchReason, AttrEndpoint, AttrEndpointName},
		"changes of a group's current endpoint; " + AttrEndpoint + " (and its name) is the new current endpoint"},
	{metricEjections, instrumentCounter, "{ejection}", []string{AttrEndpoint, AttrEndpointName, AttrEjectionReason},
		"endpoints taken out of service by outcome-based health"},
	{metricDegraded, instrumentGauge, "{endpoint}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName},
		"1 for each endpoint degraded by brownout detection in a group (far slower than its fallback: not available to that group), 0 for the others; absent when brownout detection is off"},
	{metricVerdict, instrumentGauge, "{endpoint}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrVerdict},
		"1 for each endpoint's verdict in each group (why the group may or may not use it), 0 for the other verdicts"},
	{metricCooldowns, instrumentCounter, "{cooldown}", []string{AttrEndpoint, AttrEndpointName},
		"overload cooldowns started: the endpoint answered RESOURCE_EXHAUSTED and is skipped for new calls while another endpoint of the group is available"},
	{metricReroutes, instrumentCounter, "{call}", []string{AttrRerouteReason},
		"calls sent to another endpoint than their group's pick: a retry whose previous attempt failed there, or a call avoiding an endpoint that cools down; refused_by_budget counts the retries the retry budget did not move"},
	{metricResends, instrumentCounter, "{call}", []string{AttrMultiEndpoint, AttrResendFrom, AttrEndpoint},
		"streaming reads that failed with a code the Spanner client retries before any response message and were sent again at once, from " + AttrResendFrom + " to " + AttrEndpoint + "; a resend the retry budget refused counts in " + metricReroutes + " as refused_by_budget"},
	{metricCalls, instrumentCounter, "{call}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrGRPCStatusCode},
		"calls (unary calls and streams) sent to an endpoint, counted when they end"},
	{metricFailures, instrumentCounter, "{call}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrGRPCStatusCode},
		"calls that ended with a status other than OK"},
	{metricDuration, instrumentHistogram, "s", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName, AttrGRPCStatusCode},
		"time from a call's start on an endpoint to its end (a stream's: until it ends)"},
	{metricActiveCalls, instrumentUpDownObsv, "{call}", []string{AttrEndpoint, AttrEndpointName},
		"calls in flight on each endpoint's pool, retired pools included"},
	{metricWaitingCalls, instrumentUpDownObsv, "{call}", nil,
		"calls waiting for their endpoint's pool to finish connecting (or for their group to switch)"},
	{metricHedges, instrumentObsCounter, "{hedge}", []string{AttrMultiEndpoint, AttrHedgeOutcome},
		"hedged streaming reads of groups that hedge, by outcome: sent, won (the caller read the hedge), lost (cancelled: the first stream answered first), refused (by the budget)"},
	{metricTier, instrumentGauge, "{tier}", []string{AttrMultiEndpoint, AttrEndpoint, AttrEndpointName},
		"the tier of each endpoint of each group with tiers (0: the top tier); absent for groups without tiers"},
	{metricLatencyScore, instrumentFloatGauge, "s", []string{AttrEndpoint, AttrEndpointName},
		"the latency score that spreads a tier's calls (a moving average of answered calls and latency probes), for each endpoint of a group with tiers that has one"},
}

// durationBuckets are the call duration histogram's bucket bounds, in seconds: those the
// OpenTelemetry semantic conventions recommend for RPC and HTTP durations.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// metrics holds a GCPMultiEndpoint's instruments. On a no-op meter provider (or the global
// one before an SDK is installed) the call path records nothing and allocates nothing.
type metrics struct {
	calls, failures, switches, ejections metric.Int64Counter
	cooldowns, reroutes, resends         metric.Int64Counter
	duration                             metric.Float64Histogram
	state, current, degraded, verdict    metric.Int64ObservableGauge
	active, waiting                      metric.Int64ObservableUpDownCounter
	hedges                               metric.Int64ObservableCounter
	tier                                 metric.Int64ObservableGauge
	latencyScore                         metric.Float64ObservableGauge

	mu  sync.Mutex // guards reg
	reg metric.Registration
}

// newMetrics creates the instruments on mp's meter. An instrument the provider refuses is
// replaced by a no-op one (the provider reports its own errors through otel.Handle).
func newMetrics(mp metric.MeterProvider) *metrics {
	meter := mp.Meter(meterName)
	doc := func(name string) (metric.InstrumentOption, metric.InstrumentOption) {
		for _, d := range metricDocs {
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
	m := &metrics{
		calls: counter(metricCalls), failures: counter(metricFailures),
		switches: counter(metricSwitches), ejections: counter(metricEjections),
		cooldowns: counter(metricCooldowns), reroutes: counter(metricReroutes), resends: counter(metricResends),
		state: gauge(metricEndpointState), current: gauge(metricCurrent), degraded: gauge(metricDegraded),
		verdict: gauge(metricVerdict), tier: gauge(metricTier),
		active: upDown(metricActiveCalls), waiting: upDown(metricWaitingCalls),
	}
	u, d := doc(metricHedges)
	m.hedges, _ = meter.Int64ObservableCounter(metricHedges, u, d)
	u, d = doc(metricLatencyScore)
	m.latencyScore, _ = meter.Float64ObservableGauge(metricLatencyScore, u, d)
	u, d = doc(metricDuration)
	m.duration, _ = meter.Float64Histogram(metricDuration, u, d, metric.WithExplicitBucketBoundaries(durationBuckets...))
	fillNoop(m)
	return m
}

// fillNoop replaces the instruments a provider refused (nil) with no-op ones.
func fillNoop(m *metrics) {
	for _, c := range []*metric.Int64Counter{&m.calls, &m.failures, &m.switches, &m.ejections, &m.cooldowns, &m.reroutes, &m.resends} {
		if *c == nil {
			*c = noop.Int64Counter{}
		}
	}
	if m.hedges == nil {
		m.hedges = noop.Int64ObservableCounter{}
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

// metricsView is what the observable instruments read at each collection.
type metricsView struct {
	waiting int64
	active  map[string]int64  // in-flight calls by endpoint, retired pools included
	names   map[string]string // endpoint -> EndpointOptions.Name, named endpoints only
	groups  []multiendpoint.Status
	// hedges holds, per hedging group, its hedging counts; nil when no group hedges.
	hedges map[string]*HedgingStatus
	// degraded holds, per group, whether each endpoint is degraded (brownout); nil when
	// brownout detection is off.
	degraded map[string]map[string]bool
	// verdicts holds, per group, each endpoint's last verdict.
	verdicts map[string]map[string]verdict.Reason
	// scores holds the latency score of each endpoint of a group with tiers that has one.
	scores map[string]time.Duration
}

// observe registers the callback of the observable instruments, which reads view at each
// collection; view returns false once there is nothing to observe but the waiting calls
// (after Close).
func (m *metrics) observe(mp metric.MeterProvider, view func() (metricsView, bool)) {
	reg, err := mp.Meter(meterName).RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v, ok := view()
		o.ObserveInt64(m.waiting, v.waiting)
		if !ok {
			return nil
		}
		for e, n := range v.active {
			o.ObserveInt64(m.active, n, metric.WithAttributes(endpointAttrs(e, v.names[e])...))
		}
		for _, st := range v.groups {
			for _, e := range st.Endpoints {
				ep := endpointAttrs(e.Endpoint, v.names[e.Endpoint])
				for _, state := range []multiendpoint.State{multiendpoint.Available, multiendpoint.Recovering, multiendpoint.Unavailable} {
					o.ObserveInt64(m.state, boolInt(e.State == state), metric.WithAttributes(append([]attribute.KeyValue{
						attribute.String(AttrMultiEndpoint, st.Name), attribute.String(AttrEndpointState, stateAttr(state))}, ep...)...))
				}
				o.ObserveInt64(m.current, boolInt(e.Endpoint == st.Current), metric.WithAttributes(
					append([]attribute.KeyValue{attribute.String(AttrMultiEndpoint, st.Name), attribute.Int(AttrEndpointPriority, e.Priority)}, ep...)...))
				if r, ok := v.verdicts[st.Name][e.Endpoint]; ok {
					for _, each := range verdict.Reasons() {
						o.ObserveInt64(m.verdict, boolInt(each == r), metric.WithAttributes(append([]attribute.KeyValue{
							attribute.String(AttrMultiEndpoint, st.Name), attribute.String(AttrVerdict, each.Key())}, ep...)...))
					}
				}
				if v.degraded != nil {
					o.ObserveInt64(m.degraded, boolInt(v.degraded[st.Name][e.Endpoint]), metric.WithAttributes(
						append([]attribute.KeyValue{attribute.String(AttrMultiEndpoint, st.Name)}, ep...)...))
				}
			}
		}
		for g, h := range v.hedges {
			for _, c := range []struct {
				outcome string
				n       int64
			}{{"sent", h.Sent}, {"won", h.Won}, {"lost", h.Lost}, {"refused", h.Refused}} {
				o.ObserveInt64(m.hedges, c.n, metric.WithAttributes(
					attribute.String(AttrMultiEndpoint, g), attribute.String(AttrHedgeOutcome, c.outcome)))
			}
		}
		m.observeTiers(o, v)
		return nil
	}, m.state, m.current, m.degraded, m.verdict, m.active, m.waiting, m.hedges, m.tier, m.latencyScore)
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

// close unregisters the observable callback. Idempotent.
func (m *metrics) close() {
	m.mu.Lock()
	reg := m.reg
	m.reg = nil
	m.mu.Unlock()
	if reg != nil {
		_ = reg.Unregister()
	}
}

// switched counts ev; toName is the name of its new current endpoint, "" for none.
func (m *metrics) switched(ev SwitchEvent, toName string) {
	m.switches.Add(context.Background(), 1, metric.WithAttributes(append([]attribute.KeyValue{
		attribute.String(AttrMultiEndpoint, ev.Name), attribute.String(AttrSwitchReason, ev.Reason.String())},
		endpointAttrs(ev.To, toName)...)...))
}

// ejected counts an ejection of endpoint, named name ("" for none).
func (m *metrics) ejected(endpoint, name, reason string) {
	m.ejections.Add(context.Background(), 1, metric.WithAttributes(append(endpointAttrs(endpoint, name),
		attribute.String(AttrEjectionReason, reason))...))
}

// callAttrs are the measurement options of the calls of one group on one endpoint, one per
// gRPC code, built once per (pool, group) so that recording a call allocates nothing.
type callAttrs struct {
	add    [numCodes][]metric.AddOption
	record [numCodes][]metric.RecordOption
}

// numCodes is the number of gRPC codes (OK to Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// newCallAttrs builds the callAttrs of group's calls on endpoint, named name ("" for none).
func newCallAttrs(group, endpoint, name string) *callAttrs {
	a := &callAttrs{}
	for c := range numCodes {
		kv := append([]attribute.KeyValue{attribute.String(AttrMultiEndpoint, group), attribute.Int(AttrGRPCStatusCode, c)},
			endpointAttrs(endpoint, name)...)
		o := metric.WithAttributeSet(attribute.NewSet(kv...))
		a.add[c] = []metric.AddOption{o}
		a.record[c] = []metric.RecordOption{o}
	}
	return a
}

// attrCache holds one pool's callAttrs per group, under one name of its endpoint, built on
// first use. The zero value is empty, ready to use; safe for concurrent use, and a hit takes
// no lock.
type attrCache struct {
	m  atomic.Pointer[map[string]*callAttrs]
	mu sync.Mutex // serializes the building
}

// of returns the callAttrs of group's calls on endpoint, named name, building them on first
// use. Every call of one attrCache passes the same endpoint and name.
func (c *attrCache) of(group, endpoint, name string) *callAttrs {
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
	next := make(map[string]*callAttrs)
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

// rerouted counts a call sent elsewhere than its group's pick (or, for steer.RerouteRefused,
// a retry the budget kept where it was); reason is one of steer's Reroute values.
func (m *metrics) rerouted(reason string) {
	m.reroutes.Add(context.Background(), 1, metric.WithAttributes(attribute.String(AttrRerouteReason, reason)))
}
