package brownout

import (
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// Groups holds the degraded state of every group's endpoints: each group's Group, and each
// endpoint's last verdict in it with the time its Degraded last changed. A GCPMultiEndpoint
// has one, evaluated at each latency sample of a pool for every group that lists the pool's
// endpoint.
//
// Safe for concurrent use: one mutex guards every group; Evaluate calls its changed callback
// under it, which must therefore not block (a log line is queued). The zero value is not
// usable: use NewGroups. A nil *Groups, or one made off, finds nothing degraded.
type Groups struct {
	on   bool
	rule Rule

	mu     sync.Mutex // guards groups
	groups map[string]*groupState
}

// groupState is one group's rule state and its endpoints' last verdicts.
type groupState struct {
	rule     *Group
	verdicts map[string]Status
}

// Status is one endpoint's last verdict in a group.
type Status struct {
	Verdict
	// Known: the endpoint's latency was known at that evaluation.
	Known bool
	// Since is when Degraded last changed; zero: never.
	Since time.Time
}

// Change is a verdict that changed at an evaluation of group, at At.
type Change struct {
	Group string
	Verdict
	At time.Time
}

// NewGroups returns the state of every group under rule; when on is false (brownout
// detection off) it keeps nothing and finds nothing degraded.
func NewGroups(on bool, rule Rule) *Groups {
	return &Groups{on: on, rule: rule, groups: make(map[string]*groupState)}
}

// On reports whether brownout detection is on.
func (b *Groups) On() bool { return b != nil && b.on }

// Degraded reports whether endpoint is degraded in group.
func (b *Groups) Degraded(group, endpoint string) bool {
	if !b.On() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[group]
	return g != nil && g.rule.Degraded(endpoint)
}

// Evaluate applies the rule to group's endpoints, sampled in samples, at clk's time read
// under the lock (so that evaluations from several pools' goroutines see increasing times),
// and returns the verdicts that changed, each first passed to changed (nil: none) under the
// lock, in order. It does nothing when off.
func (b *Groups) Evaluate(group string, clk clock.Clock, samples []Sample, changed func(Change)) []Change {
	if !b.On() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := clk.Now()
	g := b.groups[group]
	if g == nil {
		g = &groupState{rule: NewGroup(b.rule), verdicts: make(map[string]Status)}
		b.groups[group] = g
	}
	var out []Change
	seen := make(map[string]bool, len(samples))
	for i, v := range g.rule.Evaluate(now, samples) {
		seen[v.Endpoint] = true
		st := Status{Verdict: v, Known: samples[i].Known, Since: g.verdicts[v.Endpoint].Since}
		if v.Changed {
			st.Since = now
			c := Change{Group: group, Verdict: v, At: now}
			if changed != nil {
				changed(c)
			}
			out = append(out, c)
		}
		g.verdicts[v.Endpoint] = st
	}
	for e := range g.verdicts {
		if !seen[e] {
			delete(g.verdicts, e)
		}
	}
	return out
}

// Retain forgets the groups for which keep is false.
func (b *Groups) Retain(keep func(group string) bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for name := range b.groups {
		if !keep(name) {
			delete(b.groups, name)
		}
	}
}

// StatusOf returns endpoint's last verdict in group; false when there is none yet.
func (b *Groups) StatusOf(group, endpoint string) (Status, bool) {
	if !b.On() {
		return Status{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.groups[group]; g != nil {
		st, ok := g.verdicts[endpoint]
		return st, ok
	}
	return Status{}, false
}

// DegradedSet returns, per group, whether each endpoint with a verdict is degraded in it;
// nil when off.
func (b *Groups) DegradedSet() map[string]map[string]bool {
	if !b.On() {
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
