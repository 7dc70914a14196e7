package spannerme

import (
	"slices"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// recheckEjected asks every ejected endpoint of the groups that list p's endpoint, which was
// just readmitted, to probe at once (pool.Pool.Recheck). While every connected endpoint of a
// group was ejected, each stayed available (rule 4 of internal/verdict) and the group stayed
// on its endpoint; the first readmission ends that rule, and the group's current endpoint,
// still ejected, would be left after RecoveryTimeout if its own readmission waited for its
// next probe, up to ProbeInterval later. A fault that every endpoint showed ends for all of
// them at once, so they are readmitted within one probe of each other and the group does
// not move.
func (gme *GCPMultiEndpoint) recheckEjected(p *pool.Pool) {
	s := gme.snap.Load()
	if s == nil || s.Pools[p.Endpoint()] != p {
		return
	}
	asked := map[*pool.Pool]bool{p: true}
	for _, r := range s.ByName {
		eps := r.ME.Status().Endpoints
		if !slices.ContainsFunc(eps, func(e multiendpoint.EndpointStatus) bool { return e.Endpoint == p.Endpoint() }) {
			continue
		}
		for _, e := range eps {
			if q := s.Pools[e.Endpoint]; q != nil && !asked[q] && q.Ejected() {
				asked[q] = true
				q.Recheck()
			}
		}
	}
}
