package verdict

import (
	"sync"
	"sync/atomic"
)

// Store holds each group's last verdicts, by endpoint, and serializes each group's
// evaluations: Evaluate reads the inputs, decides and tells the state machine under the
// group's own lock, so that the last evaluation, which follows the last change of any input,
// lands last. The zero value is empty and ready to use.
//
// Safe for concurrent use. Lock order: a group's lock, then whatever Evaluate's function
// takes (the brownout state's and the state machine's own locks); the store's own lock
// guards the map of groups alone and is never held with a group's.
type Store struct {
	mu     sync.Mutex // guards groups
	groups map[string]*groupVerdicts
}

// groupVerdicts is one group's last evaluation.
type groupVerdicts struct {
	mu      sync.Mutex        // serializes the group's evaluations
	reasons map[string]Reason // by endpoint; guarded by mu
	// available lists the endpoints the last evaluation found available, in the group's
	// priority order; replaced whole, never modified.
	available atomic.Pointer[[]string]
}

// of returns group's verdicts, created on first use.
func (v *Store) of(group string) *groupVerdicts {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.groups == nil {
		v.groups = make(map[string]*groupVerdicts)
	}
	g := v.groups[group]
	if g == nil {
		g = &groupVerdicts{}
		v.groups[group] = g
	}
	return g
}

// Evaluate runs eval under group's lock (creating the group's entry on first use), passing it
// the group's previous verdicts (nil before the first; eval must not modify them), and keeps
// the verdicts, by endpoint, that it returns, with the endpoints they make available in the
// group's priority order; eval returning nil verdicts keeps the previous ones (the group was
// removed or replaced meanwhile, say). eval must not call back into the Store for the same
// group.
func (v *Store) Evaluate(group string, eval func(prev map[string]Reason) (reasons map[string]Reason, available []string)) {
	g := v.of(group)
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, a := eval(g.reasons); r != nil {
		g.reasons = r
		g.available.Store(&a)
	}
}

// Available returns the endpoints that group's last evaluation found available, in the
// group's priority order; nil before its first evaluation. The slice is shared: read only.
// It takes the store's lock, not the group's.
func (v *Store) Available(group string) []string {
	v.mu.Lock()
	g := v.groups[group]
	v.mu.Unlock()
	if g == nil {
		return nil
	}
	if a := g.available.Load(); a != nil {
		return *a
	}
	return nil
}

// Reason returns endpoint's last verdict in group; false before the group's first
// evaluation that knew the endpoint. It creates nothing.
func (v *Store) Reason(group, endpoint string) (Reason, bool) {
	v.mu.Lock()
	g := v.groups[group]
	v.mu.Unlock()
	if g == nil {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.reasons[endpoint]
	return r, ok
}

// All returns a copy of every group's last verdicts, by group and endpoint.
func (v *Store) All() map[string]map[string]Reason {
	v.mu.Lock()
	groups := make(map[string]*groupVerdicts, len(v.groups))
	for name, g := range v.groups {
		groups[name] = g
	}
	v.mu.Unlock()
	out := make(map[string]map[string]Reason, len(groups))
	for name, g := range groups {
		g.mu.Lock()
		m := make(map[string]Reason, len(g.reasons))
		for e, r := range g.reasons {
			m[e] = r
		}
		g.mu.Unlock()
		out[name] = m
	}
	return out
}

// Retain forgets the groups for which keep is false.
func (v *Store) Retain(keep func(group string) bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for name := range v.groups {
		if !keep(name) {
			delete(v.groups, name)
		}
	}
}
