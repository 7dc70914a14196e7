package spannerme

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spread"
)

// assignTiers gives each group of cfg its tiers from settings, checking that the group's
// endpoints are its tiers flattened. With the emulator (every group collapsed to one
// address) no group has tiers.
func assignTiers(cfg *config, settings map[string]tierConfig, emulator bool) error {
	if emulator {
		return nil
	}
	for i := range cfg.groups {
		g := &cfg.groups[i]
		tc, ok := settings[g.name]
		if !ok {
			continue
		}
		if err := tc.matches(g.name, g.endpoints); err != nil {
			return err
		}
		g.tiers, g.slowStart = tc.tiers, tc.slowStart
	}
	return nil
}

// tiering is a GCPMultiEndpoint's spreading state: one spread.Registry (an endpoint's calls
// in flight and latency are the endpoint's, whatever group sends them), one spread.Picker per
// tiered group. newSnapshot reads the pickers (a call finds its group's Picker in the
// snapshot); the call path reads endpoints with atomic loads to count a call; apply writes
// both under updateMu.
type tiering struct {
	settings map[string]tierConfig // the tiers of the settings, validated; set at creation
	reg      *spread.Registry
	clk      clock.Clock
	// pickers maps each tiered group to its Picker; endpoints each endpoint of a tiered
	// group to its spread.Endpoint. Both are replaced, never mutated.
	pickers   atomic.Pointer[map[*multiendpoint.MultiEndpoint]*groupPicker]
	endpoints atomic.Pointer[map[string]*spread.Endpoint]

	logged map[string]string // each tiered group's tiers as last logged; under updateMu

	shareMu sync.Mutex   // guards shares; taken by Status only
	shares  *shareSample // the calls started at the previous sample, for TiersStatus
}

type groupPicker struct {
	picker    *spread.Picker
	slowStart time.Duration
	endpoints []string // the group's endpoints, every tier's
}

// init prepares t for apply; clk is the GCPMultiEndpoint's clock (nil: real).
func (t *tiering) init(settings map[string]tierConfig, clk clock.Clock) {
	if clk == nil {
		clk = clock.Real
	}
	t.settings, t.clk = settings, clk
	t.reg = spread.NewRegistry(spread.EndpointOptions{Clock: clk})
}

// update publishes the pickers of the tiered groups of cfg (groups by name), keeping a kept
// group's Picker when its slow start is unchanged, and forgets the endpoints no tiered group
// lists. Called by apply under updateMu, after the groups are reconfigured.
// Each group whose tiers change (given, changed, or taken away) is logged at Info.
func (t *tiering) update(cfg *config, groups map[string]*multiendpoint.MultiEndpoint, log *slog.Logger) {
	if t.reg == nil {
		return
	}
	logged := make(map[string]string)
	for _, g := range cfg.groups {
		if g.tiers == nil {
			if was, ok := t.logged[g.name]; ok {
				log.Info("spannerme: MultiEndpoint no longer has tiers: a strict priority list", "multiendpoint", g.name, "was", was)
			}
			continue
		}
		desc := fmt.Sprint(g.tiers)
		if g.slowStart > 0 {
			desc += " slowStart " + g.slowStart.String()
		}
		logged[g.name] = desc
		if t.logged[g.name] != desc {
			log.Info("spannerme: MultiEndpoint spreads its calls over tiers of equal priority", "multiendpoint", g.name,
				"tiers", fmt.Sprint(g.tiers), "slowStart", g.slowStart)
		}
	}
	t.logged = logged
	old := t.pickers.Load()
	pickers := make(map[*multiendpoint.MultiEndpoint]*groupPicker)
	keep := make(map[string]bool)
	eps := make(map[string]*spread.Endpoint)
	for _, g := range cfg.groups {
		if g.tiers == nil {
			continue
		}
		me := groups[g.name]
		for _, e := range g.endpoints {
			keep[e] = true
			eps[e] = t.reg.Endpoint(e)
		}
		if old != nil {
			if gp := (*old)[me]; gp != nil && gp.slowStart == g.slowStart {
				pickers[me] = &groupPicker{picker: gp.picker, slowStart: g.slowStart, endpoints: g.endpoints}
				continue
			}
		}
		// The options are valid: Resolve is set and SlowStart was checked by parseTiers.
		p, err := spread.New(spread.Options{SlowStart: g.slowStart, Clock: t.clk, Resolve: t.reg.Endpoint})
		if err != nil {
			continue // unreachable; the group then picks its current endpoint
		}
		pickers[me] = &groupPicker{picker: p, slowStart: g.slowStart, endpoints: g.endpoints}
	}
	t.reg.Retain(keep)
	t.pickers.Store(&pickers)
	t.endpoints.Store(&eps)
}

// route returns the Picker that t has published for the group me, and the Endpoint and the
// pool in pools of each endpoint of the group; nil, nil for a group without one.
func (t *tiering) route(me *multiendpoint.MultiEndpoint, pools map[string]*pool.Pool) (*spread.Picker, []spreadMember) {
	pm, eps := t.pickers.Load(), t.endpoints.Load()
	if pm == nil || eps == nil {
		return nil, nil
	}
	gp := (*pm)[me]
	if gp == nil {
		return nil, nil
	}
	members := make([]spreadMember, 0, len(gp.endpoints))
	for _, e := range gp.endpoints {
		if ep, p := (*eps)[e], pools[e]; ep != nil && p != nil {
			members = append(members, spreadMember{ep: ep, pool: p})
		}
	}
	return gp.picker, members
}

// tierCall is one call counted on a spread.Endpoint: begin counts it in flight, done folds
// its latency in. The zero value (a group without tiers) does nothing.
type tierCall struct {
	ep    *spread.Endpoint
	clk   clock.Clock
	start time.Time
}

// begin counts a call that the group me sends to p's endpoint, when me has tiers.
func (t *tiering) begin(me *multiendpoint.MultiEndpoint, p *pool.Pool) tierCall {
	if me.Tier() == nil {
		return tierCall{}
	}
	m := t.endpoints.Load()
	if m == nil {
		return tierCall{}
	}
	ep := (*m)[p.Endpoint()]
	if ep == nil {
		return tierCall{}
	}
	ep.Begin()
	return tierCall{ep: ep, clk: t.clk, start: t.clk.Now()}
}

// done ends the call: err is its outcome. Only a failure of the path to the endpoint
// (health.Classify's Failure or Timeout: UNAVAILABLE, a transport reset, a deadline with no
// response) counts as failed; an answer with an application error (NOT_FOUND, ABORTED...) is
// an answer.
func (c tierCall) done(err error) {
	if c.ep == nil {
		return
	}
	failed := false
	if err != nil {
		o := health.Classify(err, false, false)
		failed = o == health.Failure || o == health.Timeout
	}
	c.ep.Done(c.clk.Now().Sub(c.start), failed)
}

// FirstResponse ends a tiered stream's call at its first response (pool.FirstResponder).
func (c *tierCall) FirstResponse(err error) { c.done(err) }

// first returns the pool.FirstResponder of a stream counted by c: nil for a group without
// tiers (no allocation), else a copy of c on the heap.
func (c tierCall) first() pool.FirstResponder {
	if c.ep == nil {
		return nil
	}
	h := new(tierCall) // not &c: c itself would move to the heap on every call
	*h = c
	return h
}

// probe feeds p's latency probe median to its spread.Endpoint, when a tiered group lists
// it (pool latency probes run with brownout detection on: HealthSettings.Brownout).
func (t *tiering) probe(p *pool.Pool, latency func(*pool.Pool) (time.Duration, bool)) {
	m := t.endpoints.Load()
	if m == nil {
		return
	}
	ep := (*m)[p.Endpoint()]
	if ep == nil {
		return
	}
	if d, ok := latency(p); ok {
		ep.Probe(d)
	}
}

// shareSample is the calls each endpoint had started at a moment, for Share.
type shareSample struct {
	at      time.Time
	started map[string]uint64
}

// status returns the TiersStatus of a group with tiers (st.Tiers not nil), else nil.
func (t *tiering) status(st multiendpoint.Status) *TiersStatus {
	if st.Tiers == nil || t.reg == nil {
		return nil
	}
	ts := &TiersStatus{Tiers: st.Tiers, CurrentTier: st.CurrentTier, SlowStartFrom: -1}
	if !st.SlowStartSince.IsZero() {
		ts.SlowStartFrom, ts.SlowStartSince = st.SlowStartFrom, st.SlowStartSince
	}
	now := t.clk.Now()
	prev := t.sampleShares(now)
	if prev != nil {
		ts.ShareWindow = now.Sub(prev.at)
	}
	eps := t.endpoints.Load()
	for i, tier := range st.Tiers {
		var total uint64
		delta := make([]uint64, len(tier))
		for j, e := range tier {
			m := TierMemberStatus{Endpoint: e, Tier: i}
			if eps != nil && (*eps)[e] != nil {
				s := (*eps)[e].Stats()
				m.Latency, m.InFlight = s.Latency, s.InFlight
				if prev != nil {
					delta[j] = s.Started - prev.started[e]
					total += delta[j]
				}
			}
			ts.Members = append(ts.Members, m)
		}
		if total > 0 {
			for j := range tier {
				ts.Members[len(ts.Members)-len(tier)+j].Share = float64(delta[j]) / float64(total)
			}
		}
	}
	return ts
}

// sampleShares returns the sample that shares are measured from, and takes a new one when
// it is a second old or more.
func (t *tiering) sampleShares(now time.Time) *shareSample {
	t.shareMu.Lock()
	defer t.shareMu.Unlock()
	prev := t.shares
	if prev != nil && now.Sub(prev.at) < time.Second {
		return prev
	}
	next := &shareSample{at: now, started: map[string]uint64{}}
	if eps := t.endpoints.Load(); eps != nil {
		for e, ep := range *eps {
			next.started[e] = ep.Stats().Started
		}
	}
	t.shares = next
	return prev
}

// scores returns the latency score of each endpoint of a group with tiers that has one, for
// the metrics; nil without tiers.
func (t *tiering) scores() map[string]time.Duration {
	eps := t.endpoints.Load()
	if eps == nil || len(*eps) == 0 {
		return nil
	}
	out := make(map[string]time.Duration, len(*eps))
	for e, ep := range *eps {
		if l := ep.Stats().Latency; l > 0 {
			out[e] = l
		}
	}
	return out
}

// observeTiers observes the tier metrics: each endpoint's tier in each group with tiers, and
// the latency scores.
func (m *metrics) observeTiers(o metric.Observer, v metricsView) {
	for _, st := range v.groups {
		for i, tier := range st.Tiers {
			for _, e := range tier {
				o.ObserveInt64(m.tier, int64(i), metric.WithAttributes(append([]attribute.KeyValue{
					attribute.String(AttrMultiEndpoint, st.Name)}, endpointAttrs(e, v.names[e])...)...))
			}
		}
	}
	for e, l := range v.scores {
		o.ObserveFloat64(m.latencyScore, l.Seconds(), metric.WithAttributes(endpointAttrs(e, v.names[e])...))
	}
}
