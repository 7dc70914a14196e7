package spannerme

import (
	"slices"
	"sort"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/endpointname"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// TierSettings partitions one group's endpoints into tiers of equal priority (docs/tiers.md):
// the tier is the unit of failover, and a tier's calls are spread over its available members
// by their observed latency (power of two choices over latency × calls in flight, every member
// keeping a minimum share of 5 %).
type TierSettings struct {
	// Tiers lists the group's endpoints by tier, the top tier first. Flattened in order, it
	// must be exactly the group's Endpoints list (after normalization: "https://h" is
	// "h:443"), so that the flat list keeps the order of tiers and members: a group whose
	// endpoints differ from it (at creation or at UpdateMultiEndpoints) is a *ConfigError
	// naming the group and the first endpoint that differs, and nothing changes. At least
	// one tier, no empty tier, no endpoint twice. A tier of one endpoint behaves exactly as
	// that endpoint does without tiers.
	Tiers [][]string
	// SlowStart is how long a member that joins or rejoins its tier, and a tier the group
	// switches back to, takes to ramp its share of the calls up to its full share (Envoy's
	// slow start, linear, from 10 %). Zero means no slow start; negative is a *ConfigError.
	SlowStart time.Duration
}

// tierConfig is a validated TierSettings.
type tierConfig struct {
	tiers     [][]string // normalized
	slowStart time.Duration
}

// parseTiers validates Settings.Tiers. Entries of groups not configured are allowed (they
// apply once such a group exists). Errors are *ConfigError naming the group (and the endpoint).
func parseTiers(in map[string]TierSettings) (map[string]tierConfig, error) {
	if len(in) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(in))
	for name := range in {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(map[string]tierConfig, len(in))
	for _, name := range names {
		ts := in[name]
		if name == "" {
			return nil, configErr(name, "", -1, "Settings.Tiers: empty MultiEndpoint name")
		}
		if ts.SlowStart < 0 {
			return nil, configErr(name, "", -1, "Settings.Tiers: negative SlowStart %v", ts.SlowStart)
		}
		tc := tierConfig{slowStart: ts.SlowStart}
		i := 0
		for _, tier := range ts.Tiers {
			var norm []string
			for _, e := range tier {
				n, problem := endpointname.Normalize(e)
				if problem != "" {
					return nil, configErr(name, e, i, "Settings.Tiers: %s", problem)
				}
				norm = append(norm, n)
				i++
			}
			tc.tiers = append(tc.tiers, norm)
		}
		if err := multiendpoint.ValidateTiers(name, tc.tiers); err != nil {
			return nil, fromStateMachine(err)
		}
		out[name] = tc
	}
	return out, nil
}

// matches returns nil when endpoints, the normalized endpoints of group, are tc's tiers
// flattened, in order; else a *ConfigError naming the group and the first endpoint that
// differs.
func (tc tierConfig) matches(group string, endpoints []string) error {
	flat := slices.Concat(tc.tiers...)
	for j := range max(len(flat), len(endpoints)) {
		switch {
		case j >= len(endpoints):
			return configErr(group, flat[j], j, "Settings.Tiers lists an endpoint the group does not (its endpoints must be its tiers flattened, in order)")
		case j >= len(flat):
			return configErr(group, endpoints[j], j, "the group lists an endpoint its Settings.Tiers does not (its endpoints must be its tiers flattened, in order)")
		case flat[j] != endpoints[j]:
			return configErr(group, endpoints[j], j, "the group lists %q here and its Settings.Tiers %q (its endpoints must be its tiers flattened, in order)", endpoints[j], flat[j])
		}
	}
	return nil
}
