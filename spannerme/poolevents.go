package spannerme

import (
	"context"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// poolEvents receives one pool's reports (pool.Observer) and hands them on: availability to
// the groups (publish) and to the calls waiting for a change, transitions and ejections to
// the observer's logs and metrics and to Settings.OnHealth, and the end of calls to the
// metrics with the pool's own attribute sets. One per pool, made before its dial.
type poolEvents struct {
	gme      *GCPMultiEndpoint
	endpoint string
	attrs    attrCache // the metric attributes of the pool's calls, per group
}

var _ pool.Observer = (*poolEvents)(nil)

// Availability publishes p's availability to the groups and wakes the waiting calls: a
// session call waiting on the Default group picks a group by availability (sessionGroup), so
// it must hear of a pool that became available even when no group switches.
func (e *poolEvents) Availability(p *pool.Pool) {
	e.gme.sampleBrownouts(p) // the fallback of the group's other endpoints may have changed
	e.gme.publish(p)
	e.gme.changed.signal()
}

func (e *poolEvents) StateChanged(*pool.Pool) { e.gme.changed.signal() }

func (e *poolEvents) Unreachable(ce pool.ConnError, how pool.Unreachability) {
	e.gme.obs.unreachable(e.endpoint, ce, how)
}

func (e *poolEvents) Up(at time.Time, downFor time.Duration) { e.gme.obs.up(e.endpoint, at, downFor) }

func (e *poolEvents) Down(at time.Time, reason pool.ConnError) {
	e.gme.obs.down(e.endpoint, at, reason)
}

// Health receives the pool's ejections and readmissions (no lock held): the event goes to
// the logger and Settings.OnHealth, then the groups hear the new availability and waiting
// calls pick again. In that order, so that a switch the event causes at once
// (RecoveryTimeout or SwitchingDelay 0) is queued after it.
func (e *poolEvents) Health(p *pool.Pool, ev health.Event) {
	gme := e.gme
	if ev.Kind == health.Ejected {
		gme.obs.ejected(e.endpoint, ev.Reason.String(), ev.Class.String(), ev.Detail, ev.Until, ev.Ejections)
	} else {
		gme.obs.readmitted(e.endpoint, ev.Reason.String())
	}
	gme.events.pushHealth(HealthEvent{Endpoint: e.endpoint, Kind: HealthEventKind(ev.Kind), Reason: EjectionReason(ev.Reason),
		Detail: ev.Detail, Class: ev.Class.String(), At: ev.At, Until: ev.Until, Ejections: ev.Ejections})
	gme.sampleBrownouts(p)
	gme.publish(p)
	gme.changed.signal()
}

// Latency receives a latency sample of the pool (or the loss of its samples): the
// brownout rule is evaluated for every group that lists the endpoint.
func (e *poolEvents) Latency(p *pool.Pool) { e.gme.sampleBrownouts(p) }

func (e *poolEvents) CallEnd(ctx context.Context, group string, start time.Time, err error) {
	e.gme.obs.callEnd(ctx, e.attrs.of(group, e.endpoint), start, err)
}
