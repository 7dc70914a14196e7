package spannerme

import (
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
)

// assignTiers gives each group of cfg its tiers from settings, checking that the group's
// endpoints are its tiers flattened. With the emulator (every group collapsed to one
// address) no group has tiers.
func assignTiers(cfg *config, settings map[string]tierConfig, emulator bool) error {
	if emulator {
		return nil
	}
	for i := range cfg.groups {
		g := &cfg.groups[i]
		tc, ok := settings[g.name]
		if !ok {
			continue
		}
		if err := tc.matches(g.name, g.endpoints); err != nil {
			return err
		}
		g.tiers, g.slowStart = tc.tiers, tc.slowStart
	}
	return nil
}

// tieredGroups returns the groups of cfg as the Tiering reads them.
func tieredGroups(cfg *config) []route.Group {
	out := make([]route.Group, len(cfg.groups))
	for i, g := range cfg.groups {
		out[i] = route.Group{Name: g.name, Endpoints: g.endpoints, Tiers: g.tiers, SlowStart: g.slowStart}
	}
	return out
}

// tiersStatus returns the TiersStatus of a group with tiers (st.Tiers not nil) spread by t,
// else nil.
func tiersStatus(t *route.Tiering, st multiendpoint.Status) *TiersStatus {
	if st.Tiers == nil || !t.On() {
		return nil
	}
	ts := &TiersStatus{Tiers: st.Tiers, CurrentTier: st.CurrentTier, SlowStartFrom: -1}
	if !st.SlowStartSince.IsZero() {
		ts.SlowStartFrom, ts.SlowStartSince = st.SlowStartFrom, st.SlowStartSince
	}
	now := t.Clock().Now()
	prev := t.SampleShares(now)
	if prev != nil {
		ts.ShareWindow = now.Sub(prev.At)
	}
	for i, tier := range st.Tiers {
		var total uint64
		delta := make([]uint64, len(tier))
		for j, e := range tier {
			m := TierMemberStatus{Endpoint: e, Tier: i}
			if s, ok := t.Stats(e); ok {
				m.Latency, m.InFlight, m.Waiting = s.Latency, s.InFlight, s.Waiting
				if prev != nil {
					delta[j] = s.Started - prev.Started[e]
					total += delta[j]
				}
			}
			ts.Members = append(ts.Members, m)
		}
		if total > 0 {
			for j := range tier {
				ts.Members[len(ts.Members)-len(tier)+j].Share = float64(delta[j]) / float64(total)
			}
		}
	}
	return ts
}
