package spannerme

// The GCPMultiEndpoint's mechanisms live in internal packages and know nothing of it
// (docs/design.md, "Where a feature goes"): each reaches what it needs through a small
// interface, implemented here by an adapter over the mechanisms struct, which the
// GCPMultiEndpoint embeds; the adapters and the pools' events (poolEvents) see nothing
// else of it.

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
	"github.com/spannerme/spanner-multiendpoint/internal/judge"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/internal/steer"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// mechanisms are the GCPMultiEndpoint's routing snapshot and mechanisms. Each field but snap
// is set once by the constructor (initMechanisms), before any call; snap is replaced whole at
// every reconfiguration. All are safe for concurrent use.
type mechanisms struct {
	snap     atomic.Pointer[route.Table] // the routing snapshot; nil after Close
	changed  *route.Changes              // signalled when a pool's state or a group's current endpoint changes
	obs      *observe.Observer           // logs of transitions, metrics, switch history
	events   *eventQueue                 // switch and health events for the Logger, OnSwitch and OnHealth
	judge    judge.Judge                 // each group's verdicts and brownouts (internal/judge)
	steering steer.Steerer               // retry elsewhere, the resend, the overload cooldown (internal/steer)
	tiers    route.Tiering               // the spreading of tiered groups' calls (Settings.Tiers)
	hedger   hedge.Hedger                // hedged reads (Settings.Hedging); closed by Close
	// roTxns are the read-only transactions seen beginning, for the directed reads and the
	// hedging of the requests that name them by ID.
	roTxns spannerreq.ReadOnlyTxns
}

// initMechanisms makes m ready for the settings and the validated hedging of a new
// GCPMultiEndpoint, before its first routing snapshot: clk is its clock, and latency, if not
// nil, replaces (*pool.Pool).Latency as the brownout rule's source (judge.Judge.Init).
func (m *mechanisms) initMechanisms(settings Settings, hedging hedgeSettings, clk clock.Clock, latency func(*pool.Pool) (time.Duration, bool)) {
	m.changed = route.NewChanges()
	m.events = newEventQueue(settings.Logger, settings.OnSwitch, settings.OnHealth)
	m.obs = observe.New(settings.Logger, clk, observe.NewMetrics(settings.MeterProvider))
	m.tiers.Init(clk)
	m.judge.Init(judgeEnv{m}, brownout.NewGroups(settings.Health.brownoutOn(), settings.Health.Brownout.rule()), clk, latency)
	m.steering.Init(steerEnv{m}, &m.roTxns, &m.tiers, clk)
	m.hedger.Init(hedgeEnv{m}, &m.roTxns, clk)
	m.hedger.Set(hedging)
}

// endpointName returns the name (EndpointOptions.Name) of the pool that serves endpoint e in
// the routing snapshot, "" when it has none or no pool serves e. It takes no lock.
func (m *mechanisms) endpointName(e string) string { return endpointNameIn(m.snap.Load(), e) }

// judgeEnv is what the Judge reaches of the other mechanisms (judge.Env).
type judgeEnv struct{ m *mechanisms }

func (e judgeEnv) Table() *route.Table          { return e.m.snap.Load() }
func (e judgeEnv) Cooling(endpoint string) bool { return e.m.steering.Cooling(endpoint) }
func (e judgeEnv) ConfirmedBy(endpoint string, by []string) bool {
	return e.m.steering.ConfirmedBy(endpoint, by)
}
func (e judgeEnv) Brownout(c brownout.Change) { e.m.obs.Brownout(c) }
func (e judgeEnv) Changed()                   { e.m.changed.Signal() }

func (e judgeEnv) VerdictChanged(s *route.Table, group, endpoint string, was, now verdict.Reason) {
	e.m.obs.VerdictChanged(group, endpoint, endpointNameIn(s, endpoint), was, now)
}

// steerEnv is what the Steerer reaches of the other mechanisms (steer.Env).
type steerEnv struct{ m *mechanisms }

func (e steerEnv) Table() *route.Table { return e.m.snap.Load() }
func (e steerEnv) AvailableEndpoints(group string) []string {
	return e.m.judge.Verdicts().Available(group)
}
func (e steerEnv) Rerouted(reason string) { e.m.obs.Metrics().Rerouted(reason) }

func (e steerEnv) Begin(ctx context.Context, p *pool.Pool, group string) time.Time {
	return e.m.obs.CallBegin(ctx, p.Endpoint(), poolName(p), group)
}

func (e steerEnv) Resent(group, from, to string) {
	e.m.obs.Metrics().Resent(group, from, to)
}

func (e steerEnv) Cooling(endpoint string, length time.Duration, fromInfo bool, repeats int) {
	e.m.obs.Cooling(endpoint, e.m.endpointName(endpoint), length, fromInfo, repeats)
	e.m.judge.EvaluateAll()
	e.m.changed.Signal()
}

func (e steerEnv) Cooled(endpoint string, length time.Duration) {
	e.m.obs.Cooled(endpoint, e.m.endpointName(endpoint), length)
	e.m.judge.EvaluateAll()
	e.m.changed.Signal()
}

func (e steerEnv) Answered(cooling []string, by string) {
	for _, c := range cooling {
		e.m.obs.CooldownAnswered(c, e.m.endpointName(c), by)
	}
	e.m.judge.EvaluateAll()
	e.m.changed.Signal()
}

// hedgeEnv is what the Hedger reaches of the other mechanisms (hedge.Env).
type hedgeEnv struct{ m *mechanisms }

func (e hedgeEnv) Other(me *multiendpoint.MultiEndpoint, exclude string) (*pool.Pool, bool) {
	return e.m.steering.Other(me, exclude)
}

func (e hedgeEnv) Begin(ctx context.Context, p *pool.Pool, group string) time.Time {
	return e.m.obs.CallBegin(ctx, p.Endpoint(), poolName(p), group)
}

// endpointNameIn returns the name of the pool that serves endpoint e in s, "" when it has
// none, no pool serves e or s is nil (closed).
func endpointNameIn(s *route.Table, e string) string {
	if s != nil {
		if p := s.Pools[e]; p != nil {
			return poolName(p)
		}
	}
	return ""
}

// poolEvents receives one pool's reports (pool.Observer) and hands them on: availability to
// the groups (judge.Judge.Publish) and to the calls waiting for a change, transitions and ejections to
// the observer's logs and metrics and to Settings.OnHealth, and the end of calls to the
// metrics with the pool's own attribute sets. One per pool, made before its dial
// (newPoolEvents). It also holds the endpoint's name, which a reload may change.
type poolEvents struct {
	m        *mechanisms
	endpoint string
	// label is the endpoint's name and the metric attributes of the pool's calls under it;
	// replaced whole by rename, never modified.
	label atomic.Pointer[endpointLabel]
}

// endpointLabel is how one pool's endpoint is shown: its EndpointOptions.Name ("" for none)
// and the metric attribute sets of its calls under that name, per group.
type endpointLabel struct {
	name  string
	attrs observe.AttrCache
}

func newPoolEvents(m *mechanisms, endpoint, name string) *poolEvents {
	e := &poolEvents{m: m, endpoint: endpoint}
	e.label.Store(&endpointLabel{name: name})
	return e
}

// name returns the endpoint's name, "" for none.
func (e *poolEvents) name() string {
	if l := e.label.Load(); l != nil {
		return l.name
	}
	return "" // not made by newPoolEvents
}

// rename gives the endpoint a new name (EndpointOptions.Name); calls that end from then on
// are measured under it. The GCPMultiEndpoint's updateMu must be held (it serializes renames).
func (e *poolEvents) rename(name string) {
	if e.name() != name {
		e.label.Store(&endpointLabel{name: name})
		e.m.obs.Metrics().EndpointSeries(e.endpoint, name)
	}
}

// eventsOf returns the poolEvents of a pool that a GCPMultiEndpoint dialed, nil for any
// other pool.
func eventsOf(p *pool.Pool) *poolEvents {
	e, _ := p.Observer().(*poolEvents)
	return e
}

var _ pool.Observer = (*poolEvents)(nil)

// Availability publishes p's availability to the groups and wakes the waiting calls: a
// session call waiting on the Default group picks a group by availability (route.Table.SessionGroup), so
// it must hear of a pool that became available even when no group switches.
//
// A pool available again (connected and not ejected) also tells the tiered groups, before
// they hear of it, that its path works: a latency score kept since its path failed is
// dropped (route.Tiering.PathRecovered).
func (e *poolEvents) Availability(p *pool.Pool) {
	if p.Available() {
		e.m.tiers.PathRecovered(e.endpoint)
	}
	e.m.judge.SampleBrownouts(p) // the fallback of the group's other endpoints may have changed
	e.m.judge.Publish(p)
	e.m.changed.Signal()
}

func (e *poolEvents) StateChanged(*pool.Pool) { e.m.changed.Signal() }

func (e *poolEvents) Unreachable(ce pool.ConnError, how pool.Unreachability) {
	e.m.obs.Unreachable(e.endpoint, e.name(), ce, how)
}

func (e *poolEvents) Up(at time.Time, downFor time.Duration) {
	e.m.obs.Up(e.endpoint, e.name(), at, downFor)
}

// Down also tells the tiered groups that the endpoint's path failed: its latency score is
// dropped when the path works again or it rejoins its tier (route.Tiering.PathFailed).
func (e *poolEvents) Down(at time.Time, reason pool.ConnError) {
	e.m.tiers.PathFailed(e.endpoint)
	e.m.obs.Down(e.endpoint, e.name(), at, reason)
}

// Health receives the pool's ejections and readmissions (no lock held): the event goes to
// the logger and Settings.OnHealth, then the groups hear the new availability and waiting
// calls pick again. In that order, so that a switch the event causes at once
// (RecoveryTimeout or SwitchingDelay 0) is queued after it.
func (e *poolEvents) Health(p *pool.Pool, ev health.Event) {
	m, name := e.m, e.name()
	if ev.Kind == health.Ejected {
		m.tiers.PathFailed(e.endpoint) // its score measured the fault: dropped at its readmission or return
		m.obs.Ejected(e.endpoint, name, ev.Reason.String(), ev.Class.String(), ev.Detail, ev.Until, ev.Ejections)
	} else {
		if p.Available() { // connected too: the path works
			m.tiers.PathRecovered(e.endpoint) // before the groups hear of it: no pick on the fault's score
		}
		m.obs.Readmitted(e.endpoint, name, ev.Reason.String())
	}
	m.events.pushHealth(HealthEvent{Endpoint: e.endpoint, Kind: HealthEventKind(ev.Kind), Reason: EjectionReason(ev.Reason),
		Detail: ev.Detail, Class: ev.Class.String(), At: ev.At, Until: ev.Until, Ejections: ev.Ejections})
	m.judge.SampleBrownouts(p)
	m.judge.Publish(p)
	m.changed.Signal()
	if ev.Kind == health.Ejected {
		m.judge.ConfirmFallbacks(p, ev.Class)
	} else {
		m.judge.RecheckEjected(p)
	}
}

// Latency receives a latency sample of the pool (or the loss of its samples): the
// brownout rule is evaluated for every group that lists the endpoint.
// A tiered group's endpoint is told of it too (route.Tiering.Probe).
func (e *poolEvents) Latency(p *pool.Pool) {
	e.m.judge.SampleBrownouts(p)
	e.m.tiers.Probe(p, e.m.judge.Latency())
}

func (e *poolEvents) CallEnd(ctx context.Context, group string, start time.Time, err error) {
	l := e.label.Load()
	e.m.obs.CallEnd(ctx, l.attrs.Of(group, e.endpoint, l.name), start, err)
}

// poolName returns the name of p's endpoint, "" for none.
func poolName(p *pool.Pool) string {
	if e := eventsOf(p); e != nil {
		return e.name()
	}
	return ""
}
