// Package judge turns what the pools report (connectivity, ejections, readmissions, latency
// samples) and the overload cooldowns into each group's verdicts (internal/verdict): which of
// its endpoints it may use, and why. It tells each group's state machine the availability of
// its endpoints, evaluates the brownout rule (internal/brownout), probes a group's other
// endpoints at an ejection (ConfirmFallbacks) and its ejected ones at a readmission
// (RecheckEjected). A Judge reaches the routing table and the logs through its Env and knows
// nothing of the GCPMultiEndpoint that holds it.
package judge

import (
	"slices"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// Env is what a Judge needs of the connection it judges for. Its methods are called with no
// lock of the Judge's held, except VerdictChanged and Brownout, which are called under a
// group's lock and must not block (a log line, a counter).
type Env interface {
	// Table returns the routing table in force; nil after Close.
	Table() *route.Table
	// Cooling reports whether endpoint is in an overload cooldown.
	Cooling(endpoint string) bool
	// ConfirmedBy reports whether endpoint's cooldown has heard an answer from one of by (the
	// endpoints its group would use instead) since it began: only then does it take the
	// endpoint out of the group's choice (steer.Steerer.ConfirmedBy).
	ConfirmedBy(endpoint string, by []string) bool
	// VerdictChanged is told when group's verdict on endpoint changes from was to now, in
	// the evaluation of the routing table s.
	VerdictChanged(s *route.Table, group, endpoint string, was, now verdict.Reason)
	// Brownout is told of each change of an endpoint's degraded state.
	Brownout(c brownout.Change)
	// Changed wakes the calls waiting for a pool's state or a group's endpoint to change.
	Changed()
}

// Judge keeps each group's verdicts and brownout state. Init makes it ready. Safe for
// concurrent use; the verdict store serializes each group's evaluations.
type Judge struct {
	env      Env
	verdicts verdict.Store
	brown    *brownout.Groups
	clock    clock.Clock
	latency  func(*pool.Pool) (time.Duration, bool)
}

// Init prepares j: env reaches the connection, brown are the groups' brownout detectors
// (brownout.NewGroups), clk their clock, and latency, if not nil, replaces
// (*pool.Pool).Latency as the source of endpoints' latencies (tests: to drive the rule on a
// fake clock).
func (j *Judge) Init(env Env, brown *brownout.Groups, clk clock.Clock, latency func(*pool.Pool) (time.Duration, bool)) {
	j.env, j.brown, j.clock, j.latency = env, brown, clk, latency
}

// Verdicts returns the verdict store: each group's verdicts, for the status, the metrics and
// the steering's choice of another endpoint.
func (j *Judge) Verdicts() *verdict.Store { return &j.verdicts }

// Brownouts returns the groups' brownout detectors, for the status and the metrics.
func (j *Judge) Brownouts() *brownout.Groups { return j.brown }

// Latency returns the source of endpoints' latencies: (*pool.Pool).Latency unless Init was
// given another.
func (j *Judge) Latency() func(*pool.Pool) (time.Duration, bool) {
	if j.latency == nil {
		return (*pool.Pool).Latency
	}
	return j.latency
}

// Retain forgets the verdicts and brownout state of the groups keep refuses (groups an
// update removed).
func (j *Judge) Retain(keep func(group string) bool) {
	j.brown.Retain(keep)
	j.verdicts.Retain(keep)
}

// EvaluateAll evaluates every group of the routing snapshot in force. Called with no lock
// held, on the goroutine of the change (a pool's monitor or probe, an update).
func (j *Judge) EvaluateAll() {
	s := j.env.Table()
	if s == nil {
		return // closed
	}
	for _, r := range s.ByName {
		j.evaluate(r.ME)
	}
}

// evaluate reads the inputs of every endpoint of group me from the routing snapshot in force,
// takes the group's verdicts and tells the state machine each endpoint's availability, except
// for an endpoint whose pool is still in its first connection attempt (nothing is known of it
// yet: the group keeps it Recovering, rule 1 of internal/multiendpoint). It holds the group's
// lock in the verdict store while the state machine runs, and so while a switch is counted on the
// meter provider's switches counter (an OpenTelemetry instrument's Add, which must not block);
// never across a gRPC call, a dial, or OnSwitch, OnHealth or the Logger (switch events are
// queued for them).
func (j *Judge) evaluate(me *multiendpoint.MultiEndpoint) {
	name := me.Name()
	if s := j.env.Table(); s == nil || s.Group(name) != me {
		return // closed, or a group an update removed or replaced: nothing to create for it
	}
	j.verdicts.Evaluate(name, func(prev map[string]verdict.Reason) (map[string]verdict.Reason, []string) {
		s := j.env.Table()
		if s == nil || s.Group(name) != me {
			return nil, nil // replaced meanwhile
		}
		eps := me.Status().Endpoints
		in := make([]verdict.Input, len(eps))
		out := make([]verdict.Reason, len(eps))
		known := make([]bool, len(eps))
		for i, e := range eps {
			p := s.Pools[e.Endpoint]
			if p == nil {
				continue
			}
			in[i] = verdict.Input{Connected: p.Connected(), Ejected: p.Ejected(), Degraded: j.brown.Degraded(name, e.Endpoint),
				Cooling: j.env.Cooling(e.Endpoint)}
			known[i] = in[i].Connected || p.Settled()
		}
		confirmCooling(eps, in, j.env.ConfirmedBy)
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
			if was, ok := prev[e.Endpoint]; ok && was != out[i] {
				j.env.VerdictChanged(s, name, e.Endpoint, was, out[i])
			}
		}
		return reasons, available
	})
}

// What a pool's reports ask of the groups' verdicts (internal/verdict, evaluated by evaluate):
// a new evaluation when an endpoint's connectivity or ejection changes (Publish) or its
// brownout state does (SampleBrownouts), and, at an ejection, a probe of the other endpoints
// (ConfirmFallbacks).

// ConfirmFallbacks probes at once, for the class c of calls that ejected p's endpoint, every
// other endpoint of the groups that list it (pool.Pool.Confirm): if they fail the same way
// (their writes too, say), they are ejected too within one probe, every connected endpoint of
// the group is then ejected, and the group stays where it is (rule 4 of internal/verdict)
// instead of moving to an endpoint that fails as well.
func (j *Judge) ConfirmFallbacks(p *pool.Pool, c health.Class) {
	s := j.env.Table()
	if !s.Serves(p) {
		return
	}
	confirmed := map[*pool.Pool]bool{p: true}
	for _, r := range s.ByName {
		eps := r.ME.Status().Endpoints
		if !lists(eps, p.Endpoint()) {
			continue
		}
		for _, e := range eps {
			if q := s.Pools[e.Endpoint]; q != nil && !confirmed[q] {
				confirmed[q] = true
				q.Confirm(c)
			}
		}
	}
}

// Publish asks for the verdicts of every group of the current snapshot after a change of
// p's inputs (connectivity, ejection, brownout), if p is still the pool serving its endpoint.
func (j *Judge) Publish(p *pool.Pool) {
	if !j.env.Table().Serves(p) {
		return // closed, or a retired pool: its news concern nobody
	}
	j.EvaluateAll()
}

// SampleBrownouts evaluates the brownout rule at a latency sample or an availability change
// of p (SampleBrownout) and, when an endpoint's degraded state changed, every group's
// verdicts. Called on a pool's goroutines with no lock held.
func (j *Judge) SampleBrownouts(p *pool.Pool) {
	if changes := j.SampleBrownout(j.env.Table(), p); len(changes) > 0 {
		j.EvaluateAll()
		j.env.Changed()
	}
}

// SampleBrownout evaluates the brownout rule (internal/brownout) for every group of the
// routing snapshot s that lists p's endpoint (when p still serves it in s), with every
// endpoint's latency (Latency), logs each change of an
// endpoint's degraded state (in the order of the changes) and returns the changes. Nil when
// brownout detection is off, s is nil (closed) or p is retired. Called on a pool's goroutines
// with no lock held.
func (j *Judge) SampleBrownout(s *route.Table, p *pool.Pool) []brownout.Change {
	if !j.brown.On() {
		return nil
	}
	endpoint := p.Endpoint()
	if s == nil || s.Pools[endpoint] != p {
		return nil // closed, or a retired pool
	}
	latency := j.Latency()
	var changes []brownout.Change
	for name, r := range s.Groups {
		st := r.ME.Status()
		listed := false
		samples := make([]brownout.Sample, 0, len(st.Endpoints))
		for _, e := range st.Endpoints {
			listed = listed || e.Endpoint == endpoint
			smp := brownout.Sample{Endpoint: e.Endpoint}
			if q := s.Pools[e.Endpoint]; q != nil {
				smp.Latency, smp.Known = latency(q)
				smp.Available = q.Available()
			}
			samples = append(samples, smp)
		}
		if listed {
			changes = append(changes, j.brown.Evaluate(name, j.clock, samples, j.env.Brownout)...)
		}
	}
	return changes
}

// RecheckEjected asks every ejected endpoint of the groups that list p's endpoint, which was
// just readmitted, to probe at once (pool.Pool.Recheck). While every connected endpoint of a
// group was ejected, each stayed available (rule 4 of internal/verdict) and the group stayed
// on its endpoint; the first readmission ends that rule, and the group's current endpoint,
// still ejected, would be left after RecoveryTimeout if its own readmission waited for its
// next probe, up to ProbeInterval later. A fault that every endpoint showed ends for all of
// them at once, so they are readmitted within one probe of each other and the group does
// not move.
func (j *Judge) RecheckEjected(p *pool.Pool) {
	s := j.env.Table()
	if !s.Serves(p) {
		return
	}
	asked := map[*pool.Pool]bool{p: true}
	for _, r := range s.ByName {
		eps := r.ME.Status().Endpoints
		if !lists(eps, p.Endpoint()) {
			continue
		}
		for _, e := range eps {
			if q := s.Pools[e.Endpoint]; q != nil && !asked[q] && q.Ejected() {
				asked[q] = true
				q.Recheck()
			}
		}
	}
}

// lists reports whether eps, a group's endpoints, include endpoint.
func lists(eps []multiendpoint.EndpointStatus, endpoint string) bool {
	return slices.ContainsFunc(eps, func(e multiendpoint.EndpointStatus) bool { return e.Endpoint == endpoint })
}

// confirmCooling keeps an endpoint's cooldown as its verdict input only once the cooldown has
// heard an answer from the endpoint the group would move to: the first of its endpoints, in
// priority order, usable on every other input and not cooling (for a tiered group, a member
// of its best tier with one). Until then the calls Steer sends elsewhere (to that same
// endpoint first) are the test, and a group whose next endpoint does not answer (a restart,
// a path that hangs) stays; an answer to another group by some other endpoint does not
// count. A group with no such endpoint keeps every cooldown as its input: each is then a
// last resort (verdict.CoolingLastResort), available as it would be without. in is
// rewritten in place; it allocates only while an endpoint of the group cools.
func confirmCooling(eps []multiendpoint.EndpointStatus, in []verdict.Input, confirmedBy func(string, []string) bool) {
	next, cooling := -1, false
	for i, x := range in {
		switch {
		case x.Cooling:
			cooling = true
		case next < 0 && x.Connected && !x.Ejected && !x.Degraded:
			next = i
		}
	}
	if !cooling || next < 0 {
		return // with no endpoint to move to, a cooldown is a last resort's reason only
	}
	by := []string{eps[next].Endpoint}
	for i := range in {
		if in[i].Cooling {
			in[i].Cooling = confirmedBy(eps[i].Endpoint, by)
		}
	}
}
