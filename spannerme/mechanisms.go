package spannerme

// The GCPMultiEndpoint's mechanisms live in internal packages and know nothing of it: each
// reaches what it needs through a small interface, implemented here by an adapter over the
// GCPMultiEndpoint (docs/design.md, "Where a feature goes").
//
//   - internal/route: the routing table (gme.snap) and the tier spreading (gme.tiers);
//   - internal/judge: the verdicts and brownouts (gme.judge), through judgeEnv;
//   - internal/steer: retry elsewhere, the resend and the overload cooldown (gme.steering),
//     through steerEnv;
//   - internal/hedge: hedged reads (gme.hedger), through hedgeEnv.

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// judgeEnv is what the Judge reaches of its GCPMultiEndpoint (judge.Env).
type judgeEnv struct{ gme *GCPMultiEndpoint }

func (e judgeEnv) Table() *route.Table          { return e.gme.snap.Load() }
func (e judgeEnv) Cooling(endpoint string) bool { return e.gme.steering.Cooling(endpoint) }
func (e judgeEnv) Brownout(c brownout.Change)   { e.gme.obs.brownout(c) }
func (e judgeEnv) Changed()                     { e.gme.changed.signal() }

func (e judgeEnv) VerdictChanged(group, endpoint string, was, now verdict.Reason) {
	e.gme.obs.verdictChanged(group, endpoint, e.gme.endpointName(endpoint), was, now)
}

// steerEnv is what the Steerer reaches of its GCPMultiEndpoint (steer.Env).
type steerEnv struct{ gme *GCPMultiEndpoint }

func (e steerEnv) Table() *route.Table             { return e.gme.snap.Load() }
func (e steerEnv) Available(group string) []string { return e.gme.judge.Verdicts().Available(group) }
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
	e.gme.judge.EvaluateAll()
	e.gme.changed.signal()
}

func (e steerEnv) Cooled(endpoint string, length time.Duration) {
	e.gme.obs.cooled(endpoint, e.gme.endpointName(endpoint), length)
	e.gme.judge.EvaluateAll()
	e.gme.changed.signal()
}

// hedgeEnv is what the Hedger reaches of its GCPMultiEndpoint (hedge.Env).
type hedgeEnv struct{ gme *GCPMultiEndpoint }

func (e hedgeEnv) Other(me *multiendpoint.MultiEndpoint, exclude string) (*pool.Pool, bool) {
	return e.gme.steering.Other(me, exclude)
}

func (e hedgeEnv) Begin(ctx context.Context, p *pool.Pool, group string) time.Time {
	return e.gme.obs.callBegin(ctx, p.Endpoint(), poolName(p), group)
}
