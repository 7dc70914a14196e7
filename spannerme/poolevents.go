package spannerme

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// poolEvents receives one pool's reports (pool.Observer) and hands them on: availability to
// the groups (publish) and to the calls waiting for a change, transitions and ejections to
// the observer's logs and metrics and to Settings.OnHealth, and the end of calls to the
// metrics with the pool's own attribute sets. One per pool, made before its dial
// (newPoolEvents). It also holds the endpoint's name, which a reload may change.
type poolEvents struct {
	gme      *GCPMultiEndpoint
	endpoint string
	// label is the endpoint's name and the metric attributes of the pool's calls under it;
	// replaced whole by rename, never modified.
	label atomic.Pointer[endpointLabel]
}

// endpointLabel is how one pool's endpoint is shown: its EndpointOptions.Name ("" for none)
// and the metric attribute sets of its calls under that name, per group.
type endpointLabel struct {
	name  string
	attrs attrCache
}

func newPoolEvents(gme *GCPMultiEndpoint, endpoint, name string) *poolEvents {
	e := &poolEvents{gme: gme, endpoint: endpoint}
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
// are measured under it. gme.updateMu must be held (it serializes renames).
func (e *poolEvents) rename(name string) {
	if e.name() != name {
		e.label.Store(&endpointLabel{name: name})
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
// session call waiting on the Default group picks a group by availability (sessionGroup), so
// it must hear of a pool that became available even when no group switches.
func (e *poolEvents) Availability(p *pool.Pool) {
	e.gme.judge.SampleBrownouts(p) // the fallback of the group's other endpoints may have changed
	e.gme.judge.Publish(p)
	e.gme.changed.signal()
}

func (e *poolEvents) StateChanged(*pool.Pool) { e.gme.changed.signal() }

func (e *poolEvents) Unreachable(ce pool.ConnError, how pool.Unreachability) {
	e.gme.obs.unreachable(e.endpoint, e.name(), ce, how)
}

func (e *poolEvents) Up(at time.Time, downFor time.Duration) {
	e.gme.obs.up(e.endpoint, e.name(), at, downFor)
}

func (e *poolEvents) Down(at time.Time, reason pool.ConnError) {
	e.gme.obs.down(e.endpoint, e.name(), at, reason)
}

// Health receives the pool's ejections and readmissions (no lock held): the event goes to
// the logger and Settings.OnHealth, then the groups hear the new availability and waiting
// calls pick again. In that order, so that a switch the event causes at once
// (RecoveryTimeout or SwitchingDelay 0) is queued after it.
func (e *poolEvents) Health(p *pool.Pool, ev health.Event) {
	gme, name := e.gme, e.name()
	if ev.Kind == health.Ejected {
		gme.obs.ejected(e.endpoint, name, ev.Reason.String(), ev.Class.String(), ev.Detail, ev.Until, ev.Ejections)
	} else {
		gme.obs.readmitted(e.endpoint, name, ev.Reason.String())
	}
	gme.events.pushHealth(HealthEvent{Endpoint: e.endpoint, Kind: HealthEventKind(ev.Kind), Reason: EjectionReason(ev.Reason),
		Detail: ev.Detail, Class: ev.Class.String(), At: ev.At, Until: ev.Until, Ejections: ev.Ejections})
	gme.judge.SampleBrownouts(p)
	gme.judge.Publish(p)
	gme.changed.signal()
	if ev.Kind == health.Ejected {
		gme.judge.ConfirmFallbacks(p, ev.Class)
	} else {
		gme.judge.RecheckEjected(p)
	}
}

// Latency receives a latency sample of the pool (or the loss of its samples): the
// brownout rule is evaluated for every group that lists the endpoint.
// A tiered group's endpoint also takes it as a latency sample (tiers.go).
func (e *poolEvents) Latency(p *pool.Pool) {
	e.gme.judge.SampleBrownouts(p)
	e.gme.tiers.Probe(p, e.gme.judge.Latency())
}

func (e *poolEvents) CallEnd(ctx context.Context, group string, start time.Time, err error) {
	l := e.label.Load()
	e.gme.obs.callEnd(ctx, l.attrs.of(group, e.endpoint, l.name), start, err)
}

// poolName returns the name of p's endpoint, "" for none.
func poolName(p *pool.Pool) string {
	if e := eventsOf(p); e != nil {
		return e.name()
	}
	return ""
}
