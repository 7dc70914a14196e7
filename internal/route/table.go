// Package route is the routing of a GCPMultiEndpoint's calls: the immutable routing table
// that a call loads with one atomic read (Table: each group's state machine, its tier
// spreading, and the pool of each endpoint), and the spreading of the calls of groups with
// tiers over the members of their current tier (Tiering, on internal/spread). It knows
// nothing of the GCPMultiEndpoint, which builds a new Table at every reconfiguration.
package route

import (
	"maps"
	"slices"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc/connectivity"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spread"
)

// Table is an immutable routing table. The call path loads it with one atomic read; every
// field is read-only once New returns.
type Table struct {
	DefaultName string
	Default     *Route            // the Default group's route
	Groups      map[string]*Route // by name
	ByName      []*Route          // Groups sorted by name
	Pools       map[string]*pool.Pool
	// Directed is each group's directed-reads policy (spannerme Settings.DirectedReads); nil
	// when no group has one.
	Directed map[string]*spannerpb.DirectedReadOptions
}

// Route is one group of a Table: its state machine and, for a group with tiers, what
// spreads its calls.
type Route struct {
	ME *multiendpoint.MultiEndpoint
	// picker spreads the calls of a group with tiers; nil for a group without, and for one
	// whose Picker was not yet published when the table was made (its current endpoint
	// then serves). members pairs each endpoint of the group that the Picker may return with
	// its pool in the table: a pick finds its pool by comparing pointers, where a pool by
	// address would hash a string.
	picker  *spread.Picker
	members []member
}

type member struct {
	ep   *spread.Endpoint
	pool *pool.Pool
}

// New returns the routing table of groups over pools, with the directed-reads policies
// directed. t gives the Pickers that it has published for the groups with tiers (nil t:
// none).
func New(defaultName string, groups map[string]*multiendpoint.MultiEndpoint, pools map[string]*pool.Pool,
	directed map[string]*spannerpb.DirectedReadOptions, t *Tiering) *Table {
	s := &Table{DefaultName: defaultName, Groups: make(map[string]*Route, len(groups)), Pools: pools, Directed: directed}
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		r := &Route{ME: groups[name]}
		if t != nil {
			r.picker, r.members = t.route(r.ME, pools)
		}
		s.Groups[name] = r
		s.ByName = append(s.ByName, r)
	}
	s.Default = s.Groups[defaultName]
	return s
}

// Group returns the state machine of the group named name; nil when s has no such group.
func (s *Table) Group(name string) *multiendpoint.MultiEndpoint {
	if r := s.Groups[name]; r != nil {
		return r.ME
	}
	return nil
}

// Pool returns the pool that a call to method of r's group goes to, or nil when its endpoint
// has none in s (a reconfiguration moved on: the caller loads the newer table). A group with
// tiers spreads its calls: its Picker's choice in its current tier view, for the method's
// kind of call (KindOf). Safe for concurrent use; it takes no lock and allocates nothing.
func (r *Route) Pool(s *Table, method string) *pool.Pool {
	if r.picker != nil {
		if v := r.ME.Tier(); v != nil {
			ep := r.picker.Pick(v, KindOf(method))
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
			return s.Pools[ep.Name()]
		}
	}
	return s.Pools[r.ME.Current()]
}

// SessionGroup is the group of a session call that names none (the Spanner client creates,
// refreshes and deletes sessions on its own contexts): the Default group while its current
// endpoint is available, else the first group by name whose current endpoint is, else the
// Default group. A session is valid through every endpoint of the instance, so a region that
// is up serves its callers while the Default group is down (F29).
func (s *Table) SessionGroup() *Route {
	if p := s.Pools[s.Default.ME.Current()]; p != nil && p.Available() {
		return s.Default
	}
	for _, g := range s.ByName {
		if p := s.Pools[g.ME.Current()]; p != nil && p.Available() {
			return g
		}
	}
	return s.Default
}

// DirectedReads returns the policies of s (nil when no group has one, and for a nil s: after
// Close). It allocates nothing; indexing the nil map costs no hashing.
func (s *Table) DirectedReads() map[string]*spannerpb.DirectedReadOptions {
	if s == nil {
		return nil
	}
	return s.Directed
}

// DefaultNameOrEmpty returns the Default group's name; "" for a nil s (after Close).
func (s *Table) DefaultNameOrEmpty() string {
	if s == nil {
		return ""
	}
	return s.DefaultName
}

// Serves reports whether p is the pool that serves its endpoint in s: false for a nil s
// (closed) and for a retired pool, whose news concern nobody.
func (s *Table) Serves(p *pool.Pool) bool { return s != nil && s.Pools[p.Endpoint()] == p }

// Other returns the acquired pool of another endpoint of group me than exclude: the first of
// available (the group's endpoints its last verdicts find available, in priority order)
// whose pool in s is connected (READY) and not retired. False when there is none, when s is
// nil (closed) or me is not s's group of its name (an update replaced it). It never waits.
func (s *Table) Other(me *multiendpoint.MultiEndpoint, available []string, exclude string) (*pool.Pool, bool) {
	if s == nil || s.Group(me.Name()) != me {
		return nil, false
	}
	for _, e := range available {
		if e == exclude {
			continue
		}
		q := s.Pools[e]
		if q == nil || q.State() != connectivity.Ready {
			continue
		}
		if q.Acquire() {
			return q, true
		}
	}
	return nil, false
}

// Spreads reports whether r's group spreads its calls with a Picker.
func (r *Route) Spreads() bool { return r.picker != nil }

// Members returns the endpoints r's Picker may return, each paired with its pool in the
// table, in the group's order; nil for a group that does not spread its calls.
func (r *Route) Members() ([]*spread.Endpoint, []*pool.Pool) {
	if len(r.members) == 0 {
		return nil, nil
	}
	eps, pools := make([]*spread.Endpoint, len(r.members)), make([]*pool.Pool, len(r.members))
	for i, m := range r.members {
		eps[i], pools[i] = m.ep, m.pool
	}
	return eps, pools
}
