package spannerme

import (
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// brownouts holds the degraded state of every group's endpoints (BrownoutSettings): which
// endpoint is far slower than the other endpoints of its group. It is evaluated at each
// latency sample of a pool (and at each change of a pool's availability), for every group
// that lists the pool's endpoint; publish reads it, so that a degraded endpoint is not
// available to that group.
//
// Safe for concurrent use. Lock order: a pool's report lock (publish), then mu; evaluate
// takes mu without any other lock and publishes after releasing it.
type brownouts struct {
	on   bool // BrownoutSettings not disabled and health on; set at creation
	rule brownout.Rule
	// latency reads a pool's latency: (*pool.Pool).Latency unless plumbing.latency is set;
	// set at creation.
	latency func(*pool.Pool) (time.Duration, bool)

	mu     sync.Mutex // guards groups
	groups map[string]*groupBrownout
}

// groupBrownout is one group's rule state and its endpoints' last verdicts.
type groupBrownout struct {
	rule     *brownout.Group
	verdicts map[string]endpointVerdict
}

// endpointVerdict is one endpoint's last verdict in a group and when Degraded last changed
// (zero: never).
type endpointVerdict struct {
	brownout.Verdict
	known bool // the endpoint's latency was known at that evaluation
	since time.Time
}

// brownoutChange is a verdict that changed at an evaluation.
type brownoutChange struct {
	group string
	v     brownout.Verdict
	at    time.Time
}

// newBrownouts returns the brownout state of settings h (with its defaults), reading the
// pools' latencies with latency (nil: (*pool.Pool).Latency).
func newBrownouts(h HealthSettings, latency func(*pool.Pool) (time.Duration, bool)) *brownouts {
	if latency == nil {
		latency = (*pool.Pool).Latency
	}
	return &brownouts{on: h.brownoutOn(), rule: h.Brownout.rule(), latency: latency, groups: make(map[string]*groupBrownout)}
}

// degraded reports whether endpoint is degraded in group.
func (b *brownouts) degraded(group, endpoint string) bool {
	if b == nil || !b.on {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[group]
	return g != nil && g.rule.Degraded(endpoint)
}

// evaluate applies the rule to group's endpoints, sampled in samples, at clk's time read
// under b.mu (so that evaluations from several pools' goroutines see increasing times), and
// returns the verdicts that changed, each first passed to changed (nil: none) under b.mu, in
// order: changed must not block (a log line is queued).
func (b *brownouts) evaluate(group string, clk clock.Clock, samples []brownout.Sample, changed func(brownoutChange)) []brownoutChange {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := clk.Now()
	g := b.groups[group]
	if g == nil {
		g = &groupBrownout{rule: brownout.NewGroup(b.rule), verdicts: make(map[string]endpointVerdict)}
		b.groups[group] = g
	}
	var out []brownoutChange
	seen := make(map[string]bool, len(samples))
	for i, v := range g.rule.Evaluate(now, samples) {
		seen[v.Endpoint] = true
		ev := endpointVerdict{Verdict: v, known: samples[i].Known, since: g.verdicts[v.Endpoint].since}
		if v.Changed {
			ev.since = now
			c := brownoutChange{group: group, v: v, at: now}
			if changed != nil {
				changed(c)
			}
			out = append(out, c)
		}
		g.verdicts[v.Endpoint] = ev
	}
	for e := range g.verdicts {
		if !seen[e] {
			delete(g.verdicts, e)
		}
	}
	return out
}

// retain forgets the groups for which keep is false.
func (b *brownouts) retain(keep func(group string) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name := range b.groups {
		if !keep(name) {
			delete(b.groups, name)
		}
	}
}

// statusOf returns endpoint's brownout status in group; nil when brownout detection is off.
func (b *brownouts) statusOf(group, endpoint string) *BrownoutStatus {
	if !b.on {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := &BrownoutStatus{}
	if g := b.groups[group]; g != nil {
		if v, ok := g.verdicts[endpoint]; ok {
			st.Degraded, st.Since, st.Fallback, st.FallbackLatency = v.Degraded, v.since, v.Fallback, v.FallbackLatency
			if v.known {
				st.Latency = v.Latency
			}
		}
	}
	return st
}

// degradedSet returns, per group, the endpoints degraded in it; nil when off.
func (b *brownouts) degradedSet() map[string]map[string]bool {
	if b == nil || !b.on {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]map[string]bool, len(b.groups))
	for name, g := range b.groups {
		m := make(map[string]bool, len(g.verdicts))
		for e, v := range g.verdicts {
			m[e] = v.Degraded
		}
		out[name] = m
	}
	return out
}

// sample evaluates the brownout rule for every group of the routing snapshot s that lists
// p's endpoint (when p still serves it in s), logs each change of an endpoint's degraded
// state through logChange (in the order of the changes) and returns the changes, whose
// endpoints' availability the caller publishes. Nil when brownout detection is off, s is nil
// (closed) or p is retired. Called on a pool's goroutines with no lock held.
func (b *brownouts) sample(s *snapshot, p *pool.Pool, clk clock.Clock, logChange func(brownoutChange)) []brownoutChange {
	if !b.on {
		return nil
	}
	endpoint := p.Endpoint()
	if s == nil || s.pools[endpoint] != p {
		return nil // closed, or a retired pool
	}
	var changes []brownoutChange
	for name, me := range s.groups {
		st := me.Status()
		listed := false
		samples := make([]brownout.Sample, 0, len(st.Endpoints))
		for _, e := range st.Endpoints {
			listed = listed || e.Endpoint == endpoint
			smp := brownout.Sample{Endpoint: e.Endpoint}
			if p := s.pools[e.Endpoint]; p != nil {
				smp.Latency, smp.Known = b.latency(p)
				smp.Available = p.Available()
			}
			samples = append(samples, smp)
		}
		if listed {
			changes = append(changes, b.evaluate(name, clk, samples, logChange)...)
		}
	}
	return changes
}

// brownout logs one change of an endpoint's degraded state in a group: WARN when it becomes
// degraded, INFO when it is no longer. It queues the line and never blocks.
func (o *observer) brownout(c brownoutChange) {
	v := c.v
	args := []any{"multiendpoint", c.group, "endpoint", v.Endpoint, "latency", v.Latency.Round(time.Millisecond),
		"fallback", v.Fallback, "fallback_latency", v.FallbackLatency.Round(time.Millisecond)}
	if v.Degraded {
		o.log(slog.LevelWarn, c.at, "spannerme: endpoint degraded (brownout): far slower than its fallback", args...)
		return
	}
	o.log(slog.LevelInfo, c.at, "spannerme: endpoint no longer degraded (brownout)", args...)
}

// BrownoutStatus is an endpoint's brownout state in one group (BrownoutSettings), in an
// EndpointStatus. In JSON the latencies are Go duration strings such as "402ms".
type BrownoutStatus struct {
	// Degraded reports that the endpoint is far slower than its fallback: it is not
	// available to this group (its State says Recovering or Unavailable).
	Degraded bool `json:"degraded"`
	// Since is when Degraded last changed; zero if it never has.
	Since time.Time `json:"since,omitzero"`
	// Latency is the endpoint's latency at the last evaluation: the median of its last
	// three latency probes; zero while unknown.
	Latency time.Duration `json:"-"`
	// Fallback is the endpoint it was compared with (the fastest other available endpoint
	// of the group), "" when none; FallbackLatency is that endpoint's latency.
	Fallback        string        `json:"fallback,omitempty"`
	FallbackLatency time.Duration `json:"-"`
}

type brownoutStatusAlias BrownoutStatus

type brownoutStatusJSON struct {
	brownoutStatusAlias
	Latency         string `json:"latency,omitempty"`
	FallbackLatency string `json:"fallbackLatency,omitempty"`
}

// MarshalJSON writes the latencies as Go duration strings, omitted when zero.
func (b BrownoutStatus) MarshalJSON() ([]byte, error) {
	j := brownoutStatusJSON{brownoutStatusAlias: brownoutStatusAlias(b)}
	if b.Latency != 0 {
		j.Latency = b.Latency.String()
	}
	if b.FallbackLatency != 0 {
		j.FallbackLatency = b.FallbackLatency.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (b *BrownoutStatus) UnmarshalJSON(data []byte) error {
	var j brownoutStatusJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*b = BrownoutStatus(j.brownoutStatusAlias)
	var err error
	if b.Latency, err = parseDurationOrZero(j.Latency); err != nil {
		return err
	}
	b.FallbackLatency, err = parseDurationOrZero(j.FallbackLatency)
	return err
}
