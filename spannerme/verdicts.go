package spannerme

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// verdicts holds each group's last verdicts (internal/verdict): whether each of its endpoints
// is available to it, and why. evaluate is their only writer, and the only caller of the
// state machines' SetEndpointAvailability: every change of an endpoint's inputs (its pool's
// connectivity or ejection, a brownout verdict) and every reconfiguration ends in an
// evaluation of every group (publish, sampleBrownouts, apply).
//
// Safe for concurrent use. Lock order: a group's mu, then (inside the evaluation) the
// brownout state's and the state machine's own locks; mu guards the map alone. A group's mu
// is held while its state machine runs, and so while a switch is counted on the meter
// provider's switches counter (an OpenTelemetry instrument's Add, which must not block);
// never across a gRPC call, a dial, or OnSwitch, OnHealth or the Logger (switch events are
// queued for them).
type verdicts struct {
	mu     sync.Mutex // guards groups
	groups map[string]*groupVerdicts
}

// groupVerdicts is one group's last evaluation.
type groupVerdicts struct {
	// mu serializes the group's evaluations (read the inputs, evaluate, tell the state
	// machine), so that the last evaluation, which follows the last change of any input,
	// lands last.
	mu      sync.Mutex
	reasons map[string]verdict.Reason // by endpoint; guarded by mu
	// available lists the endpoints the last evaluation found available, in the group's
	// priority order (pickOther); replaced whole, never modified.
	available atomic.Pointer[[]string]
}

// of returns group's verdicts, created on first use.
func (v *verdicts) of(group string) *groupVerdicts {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.groups == nil {
		v.groups = make(map[string]*groupVerdicts)
	}
	g := v.groups[group]
	if g == nil {
		g = &groupVerdicts{}
		v.groups[group] = g
	}
	return g
}

// reason returns endpoint's last verdict in group; false before the group's first
// evaluation that knew the endpoint. It creates nothing.
func (v *verdicts) reason(group, endpoint string) (verdict.Reason, bool) {
	v.mu.Lock()
	g := v.groups[group]
	v.mu.Unlock()
	if g == nil {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.reasons[endpoint]
	return r, ok
}

// retain forgets the groups for which keep is false.
func (v *verdicts) retain(keep func(group string) bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for name := range v.groups {
		if !keep(name) {
			delete(v.groups, name)
		}
	}
}

// evaluateAll evaluates every group of the routing snapshot in force. Called with no lock
// held, on the goroutine of the change (a pool's monitor or probe, an update).
func (gme *GCPMultiEndpoint) evaluateAll() {
	for _, me := range gme.snap.Load().groupsOrNil() {
		gme.evaluate(me)
	}
}

// evaluate reads the inputs of every endpoint of group me from the routing snapshot in force,
// takes the group's verdicts and tells the state machine each endpoint's availability, except
// for an endpoint whose pool is still in its first connection attempt (nothing is known of it
// yet: the group keeps it Recovering, rule 1 of internal/multiendpoint).
func (gme *GCPMultiEndpoint) evaluate(me *multiendpoint.MultiEndpoint) {
	name := me.Name()
	if s := gme.snap.Load(); s == nil || s.groups[name] != me {
		return // closed, or a group an update removed or replaced: nothing to create for it
	}
	g := gme.verdicts.of(name)
	g.mu.Lock()
	defer g.mu.Unlock()
	s := gme.snap.Load()
	if s == nil || s.groups[name] != me {
		return // replaced meanwhile
	}
	eps := me.Status().Endpoints
	in := make([]verdict.Input, len(eps))
	out := make([]verdict.Reason, len(eps))
	known := make([]bool, len(eps))
	for i, e := range eps {
		p := s.pools[e.Endpoint]
		if p == nil {
			continue
		}
		in[i] = verdict.Input{Connected: p.Connected(), Ejected: p.Ejected(), Degraded: gme.brown.degraded(name, e.Endpoint),
			Cooling: gme.cool.cooling(e.Endpoint)}
		known[i] = in[i].Connected || p.Settled()
	}
	verdict.Evaluate(in, out)
	reasons := make(map[string]verdict.Reason, len(eps))
	var available []string
	for i, e := range eps {
		reasons[e.Endpoint] = out[i]
		if out[i].Available() {
			available = append(available, e.Endpoint)
		}
		if known[i] {
			me.SetEndpointAvailability(e.Endpoint, out[i].Available())
		}
	}
	g.reasons = reasons
	g.available.Store(&available)
}

// confirmFallbacks probes at once, for the class c of calls that ejected p's endpoint, every
// other endpoint of the groups that list it (pool.Pool.Confirm): if they fail the same way
// (their writes too, say), they are ejected too
// within one probe, every connected endpoint of the group is then ejected, and the group stays
// where it is (rule 4 of internal/verdict) instead of moving to an endpoint that fails as well.
func (gme *GCPMultiEndpoint) confirmFallbacks(p *pool.Pool, c health.Class) {
	s := gme.snap.Load()
	if s == nil || s.pools[p.Endpoint()] != p {
		return
	}
	confirmed := map[*pool.Pool]bool{p: true}
	for _, me := range s.byName {
		eps := me.Status().Endpoints
		if !slices.ContainsFunc(eps, func(e multiendpoint.EndpointStatus) bool { return e.Endpoint == p.Endpoint() }) {
			continue
		}
		for _, e := range eps {
			if q := s.pools[e.Endpoint]; q != nil && !confirmed[q] {
				confirmed[q] = true
				q.Confirm(c)
			}
		}
	}
}
