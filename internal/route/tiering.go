package route

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/internal/spread"
)

// KindOf returns the spread.Kind of a call to method (a full gRPC method name): one per
// Spanner RPC method whose calls take a time of their own (a streaming query, counted to its
// first response, takes 0.1-0.5 s on the Cloud Spanner emulator where a point read takes
// 1-30 ms), 0 for the rest (sessions, rollbacks, partitions, other services). A tier member
// is compared with its peer on calls of the same kind (spread, "Kinds of call"). It
// allocates nothing.
func KindOf(method string) spread.Kind {
	name, ok := strings.CutPrefix(method, spannerreq.Service)
	if !ok {
		return 0
	}
	switch name {
	case "ExecuteStreamingSql":
		return 1
	case "StreamingRead":
		return 2
	case "ExecuteSql":
		return 3
	case "Read":
		return 4
	case "Commit":
		return 5
	case "BeginTransaction":
		return 6
	case "ExecuteBatchDml":
		return 7
	}
	return 0
}

// Tiering is a GCPMultiEndpoint's spreading state: one spread.Registry (an endpoint's calls
// in flight and latency are the endpoint's, whatever group sends them), one spread.Picker per
// tiered group. New reads the pickers (a call finds its group's Picker in the
// Table); the call path reads endpoints with atomic loads to count a call; Update writes
// both, serialized by its caller (the GCPMultiEndpoint's updateMu).
type Tiering struct {
	reg *spread.Registry
	clk clock.Clock
	// pickers maps each tiered group to its Picker; endpoints each endpoint of a tiered
	// group to its spread.Endpoint. Both are replaced, never mutated.
	pickers   atomic.Pointer[map[*multiendpoint.MultiEndpoint]*groupPicker]
	endpoints atomic.Pointer[map[string]*spread.Endpoint]

	logged map[string]string // each tiered group's tiers as last logged; under updateMu

	shareMu sync.Mutex   // guards shares; taken by Status only
	shares  *ShareSample // the calls started at the previous sample, for the tier status
}

type groupPicker struct {
	picker    *spread.Picker
	slowStart time.Duration
	endpoints []string // the group's endpoints, every tier's
}

// Group is one group as Update reads it: its name, its endpoints by priority (every tier's)
// and, for a group with tiers, its tiers and slow start (nil Tiers: none).
type Group struct {
	Name      string
	Endpoints []string
	Tiers     [][]string
	SlowStart time.Duration
}

// Init prepares t for Update; clk is the GCPMultiEndpoint's clock (nil: real).
func (t *Tiering) Init(clk clock.Clock) {
	if clk == nil {
		clk = clock.Real
	}
	t.clk = clk
	t.reg = spread.NewRegistry(spread.EndpointOptions{Clock: clk})
}

// Update publishes the pickers of the tiered groups of cfg (their state machines in groups, by
// name), keeping a kept group's Picker when its slow start is unchanged, and forgets the
// endpoints no tiered group lists. Called by the GCPMultiEndpoint's reconfiguration,
// serialized, after the groups are reconfigured. Each group whose tiers change (given, changed,
// or taken away) is logged at Info.
func (t *Tiering) Update(cfg []Group, groups map[string]*multiendpoint.MultiEndpoint, log *slog.Logger) {
	if t.reg == nil {
		return
	}
	logged := make(map[string]string)
	for _, g := range cfg {
		if g.Tiers == nil {
			if was, ok := t.logged[g.Name]; ok {
				log.Info("spannerme: MultiEndpoint no longer has tiers: a strict priority list", "multiendpoint", g.Name, "was", was)
			}
			continue
		}
		desc := fmt.Sprint(g.Tiers)
		if g.SlowStart > 0 {
			desc += " slowStart " + g.SlowStart.String()
		}
		logged[g.Name] = desc
		if t.logged[g.Name] != desc {
			log.Info("spannerme: MultiEndpoint spreads its calls over tiers of equal priority", "multiendpoint", g.Name,
				"tiers", fmt.Sprint(g.Tiers), "slowStart", g.SlowStart)
		}
	}
	t.logged = logged
	old := t.pickers.Load()
	pickers := make(map[*multiendpoint.MultiEndpoint]*groupPicker)
	keep := make(map[string]bool)
	eps := make(map[string]*spread.Endpoint)
	for _, g := range cfg {
		if g.Tiers == nil {
			continue
		}
		me := groups[g.Name]
		for _, e := range g.Endpoints {
			keep[e] = true
			eps[e] = t.reg.Endpoint(e)
		}
		if old != nil {
			if gp := (*old)[me]; gp != nil && gp.slowStart == g.SlowStart {
				pickers[me] = &groupPicker{picker: gp.picker, slowStart: g.SlowStart, endpoints: g.Endpoints}
				continue
			}
		}
		// The options are valid: Resolve is set and SlowStart was checked by the settings' parser.
		p, err := spread.New(spread.Options{SlowStart: g.SlowStart, Clock: t.clk, Resolve: t.reg.Endpoint})
		if err != nil {
			continue // unreachable; the group then picks its current endpoint
		}
		pickers[me] = &groupPicker{picker: p, slowStart: g.SlowStart, endpoints: g.Endpoints}
	}
	t.reg.Retain(keep)
	t.pickers.Store(&pickers)
	t.endpoints.Store(&eps)
}

// route returns the Picker that t has published for the group me, and the Endpoint and the
// pool in pools of each endpoint of the group; nil, nil for a group without one.
func (t *Tiering) route(me *multiendpoint.MultiEndpoint, pools map[string]*pool.Pool) (*spread.Picker, []member) {
	pm, eps := t.pickers.Load(), t.endpoints.Load()
	if pm == nil || eps == nil {
		return nil, nil
	}
	gp := (*pm)[me]
	if gp == nil {
		return nil, nil
	}
	members := make([]member, 0, len(gp.endpoints))
	for _, e := range gp.endpoints {
		if ep, p := (*eps)[e], pools[e]; ep != nil && p != nil {
			members = append(members, member{ep: ep, pool: p})
		}
	}
	return gp.picker, members
}

// Call is one call counted on a spread.Endpoint: begin counts it in flight, done folds
// its latency in. The zero value (a group without tiers) does nothing.
type Call struct {
	ep    *spread.Endpoint
	clk   clock.Clock
	start time.Time
	kind  spread.Kind
}

// Begin counts a call to method (KindOf) that the group me sends to p's endpoint, when me has
// tiers.
func (t *Tiering) Begin(me *multiendpoint.MultiEndpoint, p *pool.Pool, method string) Call {
	if me.Tier() == nil {
		return Call{}
	}
	m := t.endpoints.Load()
	if m == nil {
		return Call{}
	}
	ep := (*m)[p.Endpoint()]
	if ep == nil {
		return Call{}
	}
	k := KindOf(method)
	ep.Begin(k)
	return Call{ep: ep, clk: t.clk, start: t.clk.Now(), kind: k}
}

// Done ends the call: err is its outcome. Only a failure of the path to the endpoint
// (health.Classify's Failure or Timeout: UNAVAILABLE, a transport reset, a deadline with no
// response) counts as failed; an answer with an application error (NOT_FOUND, ABORTED...) is
// an answer.
func (c Call) Done(err error) {
	if c.ep == nil {
		return
	}
	failed := false
	if err != nil {
		o := health.Classify(err, false, false)
		failed = o == health.Failure || o == health.Timeout
	}
	c.ep.Done(c.kind, c.clk.Now().Sub(c.start), failed)
}

// FirstResponse ends a tiered stream's call at its first response (pool.FirstResponder).
func (c *Call) FirstResponse(err error) { c.Done(err) }

// First returns the pool.FirstResponder of a stream counted by c: nil for a group without
// tiers (no allocation), else a copy of c on the heap.
func (c Call) First() pool.FirstResponder {
	if c.ep == nil {
		return nil
	}
	h := new(Call) // not &c: c itself would move to the heap on every call
	*h = c
	return h
}

// PathFailed tells endpoint's spread.Endpoint, when a tiered group lists it, that its path
// failed (its pool lost every connection, or health ejected it): its latency score is
// dropped when the path recovers or it rejoins its tier (spread.Endpoint.PathFailed).
func (t *Tiering) PathFailed(endpoint string) {
	if ep := t.endpoint(endpoint); ep != nil {
		ep.PathFailed()
	}
}

// PathRecovered tells endpoint's spread.Endpoint, when a tiered group lists it, that its
// path works again (its pool has a connection again, or health readmitted it): a score kept
// since a PathFailed is dropped (spread.Endpoint.PathRecovered).
func (t *Tiering) PathRecovered(endpoint string) {
	if ep := t.endpoint(endpoint); ep != nil {
		ep.PathRecovered()
	}
}

// endpoint returns the spread.Endpoint of endpoint when a tiered group lists it, else nil.
func (t *Tiering) endpoint(endpoint string) *spread.Endpoint {
	if m := t.endpoints.Load(); m != nil {
		return (*m)[endpoint]
	}
	return nil
}

// Probe tells p's spread.Endpoint of its latency probe median, when a tiered group lists it
// (spread.Endpoint.Probe: no score takes it, but it may drop the scores of a failure; pool
// latency probes run with brownout detection on: HealthSettings.Brownout).
func (t *Tiering) Probe(p *pool.Pool, latency func(*pool.Pool) (time.Duration, bool)) {
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

// ShareSample is the calls each endpoint had started at a moment, for Share.
type ShareSample struct {
	At      time.Time
	Started map[string]uint64 // by endpoint
}

// SampleShares returns the sample that shares are measured from, and takes a new one when
// it is a second old or more.
func (t *Tiering) SampleShares(now time.Time) *ShareSample {
	t.shareMu.Lock()
	defer t.shareMu.Unlock()
	prev := t.shares
	if prev != nil && now.Sub(prev.At) < time.Second {
		return prev
	}
	next := &ShareSample{At: now, Started: map[string]uint64{}}
	if eps := t.endpoints.Load(); eps != nil {
		for e, ep := range *eps {
			next.Started[e] = ep.Stats().Started
		}
	}
	t.shares = next
	return prev
}

// Scores returns the latency score of each endpoint of a group with tiers that has one, for
// the metrics; nil without tiers.
func (t *Tiering) Scores() map[string]time.Duration {
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

// On reports whether t has been initialized (Init): false for a zero Tiering.
func (t *Tiering) On() bool { return t.reg != nil }

// Clock returns t's clock.
func (t *Tiering) Clock() clock.Clock { return t.clk }

// Stats returns the spreading statistics of endpoint (spread.Endpoint.Stats); false when no
// tiered group lists it.
func (t *Tiering) Stats(endpoint string) (spread.Stats, bool) {
	eps := t.endpoints.Load()
	if eps == nil || (*eps)[endpoint] == nil {
		return spread.Stats{}, false
	}
	return (*eps)[endpoint].Stats(), true
}

// Endpoints returns the spread.Endpoint of each endpoint of a tiered group (not to be
// modified); nil before the first Update.
func (t *Tiering) Endpoints() map[string]*spread.Endpoint {
	if eps := t.endpoints.Load(); eps != nil {
		return *eps
	}
	return nil
}
