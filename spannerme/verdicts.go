package spannerme

import (
	"slices"

	"context"
	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"time"
)

// What a pool's reports ask of the groups' verdicts (internal/verdict, evaluated by
// GCPMultiEndpoint.evaluate): a new evaluation when an endpoint's connectivity or ejection
// changes (publish) or its brownout state does (sampleBrownouts), and, at an ejection, a probe
// of the other endpoints (confirmFallbacks).

// confirmFallbacks probes at once, for the class c of calls that ejected p's endpoint, every
// other endpoint of the groups that list it (pool.Pool.Confirm): if they fail the same way
// (their writes too, say), they are ejected too within one probe, every connected endpoint of the group is then ejected, and the group stays
// where it is (rule 4 of internal/verdict) instead of moving to an endpoint that fails as well.
func (gme *GCPMultiEndpoint) confirmFallbacks(p *pool.Pool, c health.Class) {
	s := gme.snap.Load()
	if s == nil || s.Pools[p.Endpoint()] != p {
		return
	}
	confirmed := map[*pool.Pool]bool{p: true}
	for _, r := range s.ByName {
		eps := r.ME.Status().Endpoints
		if !slices.ContainsFunc(eps, func(e multiendpoint.EndpointStatus) bool { return e.Endpoint == p.Endpoint() }) {
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

// publish asks for the verdicts of every group of the current snapshot after a change of
// p's inputs (connectivity, ejection, brownout), if p is still the pool serving its endpoint
// (verdicts.go).
func (gme *GCPMultiEndpoint) publish(p *pool.Pool) {
	s := gme.snap.Load()
	if s == nil || s.Pools[p.Endpoint()] != p {
		return // closed, or a retired pool: its news concern nobody
	}
	gme.evaluateAll()
}

// sampleBrownouts evaluates the brownout rule at a latency sample or an availability change
// of p (sampleBrownout) and, when an endpoint's degraded state changed, every group's
// verdicts. Called on a pool's goroutines with no lock held.
func (gme *GCPMultiEndpoint) sampleBrownouts(p *pool.Pool) {
	if changes := gme.sampleBrownout(gme.snap.Load(), p); len(changes) > 0 {
		gme.evaluateAll()
		gme.changed.signal()
	}
}

// sampleBrownout evaluates the brownout rule (internal/brownout) for every group of the
// routing snapshot s that lists p's endpoint (when p still serves it in s), with every
// endpoint's latency (pool.Pool.Latency, or plumbing.latency in tests), logs each change of an
// endpoint's degraded state (in the order of the changes) and returns the changes. Nil when
// brownout detection is off, s is nil (closed) or p is retired. Called on a pool's goroutines
// with no lock held.
func (gme *GCPMultiEndpoint) sampleBrownout(s *route.Table, p *pool.Pool) []brownout.Change {
	if !gme.brown.On() {
		return nil
	}
	endpoint := p.Endpoint()
	if s == nil || s.Pools[endpoint] != p {
		return nil // closed, or a retired pool
	}
	latency := gme.pl.latency
	if latency == nil {
		latency = (*pool.Pool).Latency
	}
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
			changes = append(changes, gme.brown.Evaluate(name, gme.pl.clock, samples, gme.obs.brownout)...)
		}
	}
	return changes
}

// steerEnv is what the Steerer reaches of its GCPMultiEndpoint (steer.Env).
type steerEnv struct{ gme *GCPMultiEndpoint }

func (e steerEnv) Table() *route.Table             { return e.gme.snap.Load() }
func (e steerEnv) Available(group string) []string { return e.gme.verdicts.Available(group) }
func (e steerEnv) Rerouted(reason string)          { e.gme.obs.metrics.rerouted(reason) }

func (e steerEnv) Begin(ctx context.Context, p *pool.Pool, group string) time.Time {
	return e.gme.obs.callBegin(ctx, p.Endpoint(), poolName(p), group)
}

func (e steerEnv) Resent(group, from, to string) {
	e.gme.obs.metrics.resends.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(AttrMultiEndpoint, group), attribute.String(AttrResendFrom, from), attribute.String(AttrEndpoint, to)))
}

func (e steerEnv) Cooling(endpoint string, length time.Duration, fromInfo bool, repeats int) {
	e.gme.obs.cooling(endpoint, e.gme.endpointName(endpoint), length, fromInfo, repeats)
	e.gme.evaluateAll()
	e.gme.changed.signal()
}

func (e steerEnv) Cooled(endpoint string, length time.Duration) {
	e.gme.obs.cooled(endpoint, e.gme.endpointName(endpoint), length)
	e.gme.evaluateAll()
	e.gme.changed.signal()
}
