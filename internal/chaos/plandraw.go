package chaos

import (
	"slices"
	"time"
)

// eligible returns the endpoints that kind k can hit at t: not shielded by a brownout, the
// layer is free (for reset: the endpoint forwards), and a hard fault leaves every group a
// healthy endpoint. A brownout also needs the phase to leave it room (brownoutMin before
// phaseEnd), no other brownout in force, an endpoint with no fault on either layer and not
// the GOAWAY storm's (its latency must stay known), and a fallback (see fallbacks).
func (g *planner) eligible(k Kind, t time.Duration) []int {
	if k == KindFrontendBrownout && (g.phaseEnd-t < brownoutMin || t < g.brown.until) {
		return nil
	}
	if k == KindFrontendCommitFailLong && g.phaseEnd-t < commitLongMin {
		return nil
	}
	if k == KindFlapDown && (g.phaseEnd-t < flapMin || t < g.flap.until) {
		return nil
	}
	if kinds[k].layer == layerDatabase { // every endpoint at once: one at a time
		if g.state.Database.active() {
			return nil
		}
		return []int{-1}
	}
	// A long commit failure hits an endpoint that serves a group (its writes with it), with
	// no fault on its TCP layer: the client must see its commits fail and eject it for them.
	longCommitOn := func(e int) bool { return !g.state.TCP[e].active() && g.state.serves(e) }
	var out []int
	for e := range NumEndpoints {
		if g.shielded(e, t) {
			continue
		}
		if k == KindFrontendBrownout && (e == g.plan.Storm.Endpoint || g.state.TCP[e].active() || len(g.fallbacks(e)) == 0) {
			continue
		}
		if k == KindFrontendCommitFailLong && !longCommitOn(e) {
			continue
		}
		// A member flap hits a fault-free member of a tiered group's top tier that has a
		// fault-free peer, neither of them shielded.
		if k == KindFlapDown && (!g.state.faultFree(e) || !slices.ContainsFunc(g.flapPeers(e, t), func(p int) bool { return !g.shielded(p, t) })) {
			continue
		}
		switch kinds[k].layer {
		case layerTCP:
			cur := g.state.TCP[e].Kind
			if k == KindReset {
				if cur != KindNone && cur != KindSlow {
					continue
				}
			} else if cur != KindNone {
				continue
			}
		case layerFrontend:
			if !kinds[k].instant && g.state.Frontend[e].active() {
				continue
			}
		}
		if kinds[k].hard || k == KindFrontendPartial { // partial may draw a hard fraction
			next := g.worst(t)
			f := Fault{Kind: k, Fraction: 1}
			if kinds[k].layer == layerTCP {
				next.TCP[e] = f
			} else {
				next.Frontend[e] = f
			}
			if !next.allGroupsHealthy() {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

// params draws the parameters of fault kind k.
func (g *planner) params(k Kind) Fault {
	f := Fault{Kind: k}
	switch k {
	case KindSlow:
		f.Latency = g.between(5*time.Millisecond, 80*time.Millisecond).Round(time.Millisecond)
		if g.rng.IntN(2) == 0 {
			f.Bandwidth = (128 + g.rng.IntN(897)) << 10 // 128 KiB/s to 1 MiB/s
		}
	case KindFrontendLatency:
		f.Latency = g.between(10*time.Millisecond, 300*time.Millisecond).Round(time.Millisecond)
	case KindFrontendBrownout:
		f.Latency = g.between(350*time.Millisecond, 600*time.Millisecond).Round(time.Millisecond)
	case KindFrontendPartial:
		f.Fraction = partialFractions[g.rng.IntN(len(partialFractions))]
	case KindDatabaseOverload:
		f.Fraction = dbOverloadFraction
	}
	return f
}

// reconfiguration draws a configuration in which every group without tiers lists 1 to 3
// endpoints in a random order, every tiered group its tiers, each group a healthy endpoint
// (the member of a member flap in force counted down), and, while a brownout holds at t, a group lists its
// endpoint and its fallback; one draw in four restores the initial one. It reports false when
// 20 draws found none.
func (g *planner) reconfiguration(t time.Duration) (Groups, bool) {
	for range 20 {
		var next Groups
		if g.rng.IntN(4) == 0 {
			next = initialGroups
		} else {
			for i := range numGroups {
				if groupTiers[i] != nil { // a tiered group keeps its tiers (see groupTiers)
					next[i] = initialGroups[i]
					continue
				}
				next[i] = g.rng.Perm(NumEndpoints)[:1+g.rng.IntN(NumEndpoints)]
			}
		}
		s := g.worst(t)
		s.Groups = next
		if t < g.brown.until && !slices.ContainsFunc(next[:], func(eps []int) bool {
			return slices.Contains(eps, g.brown.e) && slices.Contains(eps, g.brown.fallback)
		}) {
			continue
		}
		if s.allGroupsHealthy() {
			return next, true
		}
	}
	return Groups{}, false
}
