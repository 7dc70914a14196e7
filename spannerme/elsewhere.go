package spannerme

import (
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// pickOther returns the acquired pool of another endpoint of group me than exclude: the first,
// in the group's priority order, whose verdict says it is available to the group
// (gme.verdicts) and whose pool has a ready connection. False when there is none (the caller
// then stays on exclude). The caller releases the pool. It takes the group's state machine
// lock and the verdicts' locks, and allocates (the group's status): it is meant for the rare
// call that leaves its endpoint (a hedge), not for every call.
func (gme *GCPMultiEndpoint) pickOther(me *multiendpoint.MultiEndpoint, exclude string) (*pool.Pool, bool) {
	s := gme.snap.Load()
	if s == nil {
		return nil, false
	}
	for _, e := range me.Status().Endpoints {
		if e.Endpoint == exclude {
			continue
		}
		if r, ok := gme.verdicts.Reason(me.Name(), e.Endpoint); !ok || !r.Available() {
			continue
		}
		p := s.pools[e.Endpoint]
		if p == nil || !p.Connected() || !p.Acquire() {
			continue
		}
		return p, true
	}
	return nil, false
}
