// Package brownout decides, per group, which endpoints are degraded: far slower than the
// best of the group's other available endpoints (docs/health.md,
// "Brownout"). It keeps no clock and no timer: the caller passes the time of every
// evaluation (one per latency sample), so "sustained for Window" is checked at the samples,
// at most one sample interval late.
//
// Wired in spannerme (Groups, evaluated by internal/judge): each pool's latency probes (internal/pool, latency.go:
// the same probe RPC on every endpoint, every BrownoutSettings.ProbeInterval; the median of
// the last three) trigger an evaluation of every group that lists the endpoint, and a
// degraded endpoint is published as not available to that group. docs/health.md, Brownout.
//
// The rule, for endpoint E of a group, with F the lowest latency among the group's OTHER
// endpoints that are available (connected, not ejected) and have a latency:
//
//   - E enters degraded once lat(E) >= Ratio x F AND lat(E) - F >= Margin has held at every
//     evaluation for at least Window;
//   - a degraded E leaves once lat(E) < max(1, Ratio/2) x F OR lat(E) - F < Margin/2 has held
//     at every evaluation for at least Window (hysteresis: between the two bounds nothing
//     changes, so a latency near a threshold cannot flap);
//   - with no such F (a single endpoint, or every other one down or unmeasured) E is not
//     degraded, at once: a degraded endpoint is still better than none;
//   - while E's own latency is unknown (its pool lost its connection and forgot its samples)
//     its verdict stands: a degraded E that reconnects stays degraded until it has been
//     measured fast for Window.
package brownout

import (
	"math"
	"time"
)

// Rule holds the thresholds; Ratio >= 1, Margin and Window >= 0.
type Rule struct {
	Ratio  float64
	Margin time.Duration
	Window time.Duration
}

// Sample is one endpoint of a group at an evaluation.
type Sample struct {
	Endpoint string
	// Latency is the endpoint's recent probe latency; Known is false before its first
	// successful latency probe.
	Latency time.Duration
	Known   bool
	// Available: connected and not ejected (the pool's availability, not the group's).
	Available bool
}

// Verdict is one endpoint's state after an evaluation.
type Verdict struct {
	Endpoint string
	Degraded bool
	// Changed reports that Degraded changed at this evaluation.
	Changed bool
	// Latency and Fallback (its lowest-latency other endpoint, "" when none) and
	// FallbackLatency are what the decision compared.
	Latency         time.Duration
	Fallback        string
	FallbackLatency time.Duration
}

type endpointState struct {
	degraded bool
	since    time.Time // when the condition that would change degraded began; zero: not holding
}

// Group tracks one group's endpoints. It is not safe for concurrent use: the caller
// serializes Evaluate.
type Group struct {
	rule   Rule
	states map[string]*endpointState
}

// NewGroup returns a Group where nothing is degraded.
func NewGroup(r Rule) *Group { return &Group{rule: r, states: make(map[string]*endpointState)} }

// Degraded reports whether endpoint e was degraded at the last evaluation.
func (g *Group) Degraded(e string) bool {
	s := g.states[e]
	return s != nil && s.degraded
}

// Evaluate applies the rule at now to the group's endpoints (in any order) and returns one
// Verdict per sample. Endpoints not in samples are forgotten.
func (g *Group) Evaluate(now time.Time, samples []Sample) []Verdict {
	out := make([]Verdict, 0, len(samples))
	seen := make(map[string]bool, len(samples))
	for i, s := range samples {
		seen[s.Endpoint] = true
		st := g.states[s.Endpoint]
		if st == nil {
			st = &endpointState{}
			g.states[s.Endpoint] = st
		}
		v := Verdict{Endpoint: s.Endpoint, Latency: s.Latency}
		best := -1
		for j, o := range samples {
			if j != i && o.Available && o.Known && (best < 0 || o.Latency < samples[best].Latency) {
				best = j
			}
		}
		was := st.degraded
		switch {
		case best < 0:
			st.degraded, st.since = false, time.Time{}
		case !s.Known:
			// E's own latency is gone (its pool lost its connection, or has not measured
			// since): its verdict stands until it is measured again, so a degraded endpoint
			// that reconnects is not taken back before it has been fast for a Window.
			st.since = time.Time{}
		default:
			f := samples[best].Latency
			v.Fallback, v.FallbackLatency = samples[best].Endpoint, f
			var holds bool
			if st.degraded {
				holds = float64(s.Latency) < math.Max(1, g.rule.Ratio/2)*float64(f) || s.Latency-f < g.rule.Margin/2
			} else {
				holds = float64(s.Latency) >= g.rule.Ratio*float64(f) && s.Latency-f >= g.rule.Margin
			}
			switch {
			case !holds:
				st.since = time.Time{}
			case st.since.IsZero():
				st.since = now
			}
			if holds && now.Sub(st.since) >= g.rule.Window {
				st.degraded, st.since = !st.degraded, time.Time{}
			}
		}
		v.Degraded, v.Changed = st.degraded, st.degraded != was
		out = append(out, v)
	}
	for e := range g.states {
		if !seen[e] {
			delete(g.states, e)
		}
	}
	return out
}
