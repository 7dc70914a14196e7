package spannerme

import (
	"maps"
	"slices"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spread"
)

// snapshot is an immutable routing table. The call path loads it with one atomic read.
type snapshot struct {
	defaultName string
	def         *groupRoute
	groups      map[string]*groupRoute
	byName      []*groupRoute // groups sorted by name, for sessionGroup
	pools       map[string]*pool.Pool
	directed    directedReads // Settings.DirectedReads; nil when no group has a policy
}

// groupRoute is one group of a snapshot: its state machine and, for a group with tiers
// (tiers.go), what spreads its calls.
type groupRoute struct {
	me *multiendpoint.MultiEndpoint
	// picker spreads the calls of a group with tiers; nil for a group without, and for one
	// whose Picker was not yet published when the snapshot was made (its current endpoint
	// then serves). members pairs each endpoint of the group that the Picker may return with
	// its pool in the snapshot: a pick finds its pool by comparing pointers, where a pool by
	// address would hash a string.
	picker  *spread.Picker
	members []spreadMember
}

type spreadMember struct {
	ep   *spread.Endpoint
	pool *pool.Pool
}

// newSnapshot returns the routing table of groups over pools. t gives the Pickers that it has
// published for the groups with tiers (nil t: none).
func newSnapshot(defaultName string, groups map[string]*multiendpoint.MultiEndpoint, pools map[string]*pool.Pool, directed directedReads, t *tiering) *snapshot {
	s := &snapshot{defaultName: defaultName, groups: make(map[string]*groupRoute, len(groups)), pools: pools, directed: directed}
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		r := &groupRoute{me: groups[name]}
		if t != nil {
			r.picker, r.members = t.route(r.me, pools)
		}
		s.groups[name] = r
		s.byName = append(s.byName, r)
	}
	s.def = s.groups[defaultName]
	return s
}

// group returns the state machine of the group named name; nil when s has no such group.
func (s *snapshot) group(name string) *multiendpoint.MultiEndpoint {
	if r := s.groups[name]; r != nil {
		return r.me
	}
	return nil
}

// pool returns the pool that a call of r's group goes to, or nil when its endpoint has none
// in s (a reconfiguration moved on: the caller loads the newer snapshot). A group with tiers
// spreads its calls: its Picker's choice in its current tier view. Safe for concurrent use;
// it takes no lock and allocates nothing.
func (r *groupRoute) pool(s *snapshot) *pool.Pool {
	if r.picker != nil {
		if v := r.me.Tier(); v != nil {
			ep := r.picker.Pick(v)
			// Every member is compared, and the match is a conditional move: the member picked
			// is random, and leaving the loop at it would mispredict a branch on most picks.
			var p *pool.Pool
			for _, m := range r.members {
				if m.ep == ep {
					p = m.pool
				}
			}
			if p != nil {
				return p
			}
			// An Endpoint the Registry has forgotten stays in the Picker's view until the view
			// changes (spread.Registry.Retain): its address names the pool.
			return s.pools[ep.Name()]
		}
	}
	return s.pools[r.me.Current()]
}

// sessionGroup is the group of a session call that names none (the Spanner client creates,
// refreshes and deletes sessions on its own contexts): the Default group while its current
// endpoint is available, else the first group by name whose current endpoint is, else the
// Default group. A session is valid through every endpoint of the instance, so a region that
// is up serves its callers while the Default group is down (F29).
func (s *snapshot) sessionGroup() *groupRoute {
	if p := s.pools[s.def.me.Current()]; p != nil && p.Available() {
		return s.def
	}
	for _, g := range s.byName {
		if p := s.pools[g.me.Current()]; p != nil && p.Available() {
			return g
		}
	}
	return s.def
}

// directedReads returns the policies of s (nil when no group has one, and for a nil s: after
// Close). It allocates nothing; indexing the nil map costs no hashing.
func (s *snapshot) directedReads() directedReads {
	if s == nil {
		return nil
	}
	return s.directed
}

func (s *snapshot) defaultNameOrEmpty() string {
	if s == nil {
		return ""
	}
	return s.defaultName
}
