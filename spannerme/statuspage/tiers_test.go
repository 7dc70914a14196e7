package statuspage

import (
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// A group with tiers shows its tier state in its head and each member's tier, share, latency
// score and calls in flight beside its priority; a group without tiers shows none of it.
func TestStatusPageShowsTiers(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	eps := []spannerme.EndpointStatus{{Endpoint: "a:1", State: spannerme.Available}, {Endpoint: "b:1", Priority: 1, State: spannerme.Available},
		{Endpoint: "c:1", Priority: 2, State: spannerme.Available}}
	st := spannerme.Status{At: now, Default: "g",
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "a:1", Endpoints: eps, Tiers: &spannerme.TiersStatus{
			Tiers: [][]string{{"a:1", "b:1"}, {"c:1"}}, CurrentTier: 0, SlowStartFrom: 1, SlowStartSince: now.Add(-4 * time.Second),
			ShareWindow: 10 * time.Second, Members: []spannerme.TierMemberStatus{
				{Endpoint: "a:1", Tier: 0, Latency: 12 * time.Millisecond, InFlight: 3, Waiting: 30 * time.Millisecond, Share: 0.9},
				{Endpoint: "b:1", Tier: 0, Latency: 42 * time.Millisecond, Share: 0.1},
				{Endpoint: "c:1", Tier: 1}}}},
			{Name: "flat", Current: "a:1", Endpoints: eps}},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY"}, {Endpoint: "b:1", Connectivity: "READY"},
			{Endpoint: "c:1", Connectivity: "READY"}}}
	v := newPageView(st)
	g, flat := v.Groups[0], v.Groups[1]
	if want := "2 tiers · current tier 0 · slow start from tier 1 since 4s"; g.TierState != want {
		t.Errorf("tier state %q, want %q", g.TierState, want)
	}
	for i, want := range []string{"tier 0 · 90% of calls · score 12ms · 3 in flight, waiting 30ms", "tier 0 · 10% of calls · score 42ms · 0 in flight", "tier 1 · 0% of calls · 0 in flight"} {
		if g.Endpoints[i].Tier != want {
			t.Errorf("%s: %q, want %q", g.Endpoints[i].Endpoint, g.Endpoints[i].Tier, want)
		}
	}
	if flat.TierState != "" || flat.Endpoints[0].Tier != "" {
		t.Errorf("a group without tiers shows %q, %q", flat.TierState, flat.Endpoints[0].Tier)
	}
	var b strings.Builder
	if err := statusPage.Execute(&b, v); err != nil {
		t.Fatal(err)
	}
	if page := b.String(); !strings.Contains(page, `<span class="muted tiers" data-group="g">2 tiers`) ||
		!strings.Contains(page, `<div class="muted tier">tier 0 · 90% of calls`) || strings.Contains(page, `data-group="flat">2 tiers`) {
		t.Errorf("page lacks the tiers:\n%s", page)
	}
}
