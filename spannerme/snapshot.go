package spannerme

import (
	"maps"
	"slices"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// snapshot is an immutable routing table. The call path loads it with one atomic read.
type snapshot struct {
	defaultName string
	def         *multiendpoint.MultiEndpoint
	groups      map[string]*multiendpoint.MultiEndpoint
	byName      []*multiendpoint.MultiEndpoint // groups sorted by name, for sessionGroup
	pools       map[string]*pool.Pool
	directed    directedReads // Settings.DirectedReads; nil when no group has a policy
}

func newSnapshot(defaultName string, groups map[string]*multiendpoint.MultiEndpoint, pools map[string]*pool.Pool, directed directedReads) *snapshot {
	s := &snapshot{defaultName: defaultName, def: groups[defaultName], groups: groups, pools: pools, directed: directed}
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		s.byName = append(s.byName, groups[name])
	}
	return s
}

// sessionGroup is the group of a session call that names none (the Spanner client creates,
// refreshes and deletes sessions on its own contexts): the Default group while its current
// endpoint is available, else the first group by name whose current endpoint is, else the
// Default group. A session is valid through every endpoint of the instance, so a region that
// is up serves its callers while the Default group is down (F29).
func (s *snapshot) sessionGroup() *multiendpoint.MultiEndpoint {
	if p := s.pools[s.def.Current()]; p != nil && p.Available() {
		return s.def
	}
	for _, g := range s.byName {
		if p := s.pools[g.Current()]; p != nil && p.Available() {
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

// groupsOrNil returns the groups sorted by name; nil for a nil snapshot (closed).
func (s *snapshot) groupsOrNil() []*multiendpoint.MultiEndpoint {
	if s == nil {
		return nil
	}
	return s.byName
}

func (s *snapshot) defaultNameOrEmpty() string {
	if s == nil {
		return ""
	}
	return s.defaultName
}
