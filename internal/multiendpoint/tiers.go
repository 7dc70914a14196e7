package multiendpoint

// Tiers (issue 28). A MultiEndpoint's endpoints may be partitioned into tiers of equal
// priority (Options.Tiers, ReconfigureTiers). The tier is the unit of failover: the rules of
// the package doc apply to tiers, where
//
//   - a tier is Available when one of its members is, else Recovering when one of them is,
//     else Unavailable;
//   - a switch to a higher tier that waits SwitchingDelay lands when one of the tier's
//     Available members has been Available for its own SwitchingDelay (with its jitter) since
//     its last return or arrival (rule 3 on that member): the member whose delay ends first
//     times the switch, and Status.PendingSwitch names it;
//   - a reconfiguration raises an endpoint when it puts it in a higher tier than an endpoint
//     whose tier was higher than its own (rule 3, scenario F2).
//
// Current is the current tier's lead: its first Available member in list order (when none is
// Available, the current endpoint is kept). A member going down while a peer of its tier is
// Available moves Current to the peer at once, with no Event: only a change of tier is a
// switch. Without tiers each endpoint is its own tier and all of this is the package doc's
// rules exactly; Tier then returns nil and nothing more is computed or allocated.

import (
	"fmt"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// Tier is the current tier as the call path sees it (Tier()). It is immutable and shared by
// every reader: never modify it.
type Tier struct {
	// Index is the tier's position, 0 the top tier.
	Index int
	// Members are the tier's Available members in list order; when none is Available (the
	// tier is Recovering, or nothing is Available), only the current endpoint. Never empty.
	Members []string
	// Joined[i] is when Members[i] last became Available or joined this tier (created, added,
	// or moved to this tier by a reconfiguration): where its slow start starts.
	Joined []time.Time
	// Previous are the Available members of the tier the group switched away from at its last
	// switch back (Reason Recovery), while Options.SlowStart lasts from RampStart: during that
	// ramp, calls may still go there. Nil when there is no ramp. A ramp ends for good when
	// none of Previous's tier's members is Available, at a reconfiguration, at any other
	// switch, or at Close.
	Previous []string
	// RampStart is when the switch back happened; zero when Previous is nil.
	RampStart time.Time
}

// Tier returns the current tier: one atomic load, no lock, no allocation. It returns nil for
// a MultiEndpoint without tiers (neither Options.Tiers nor ReconfigureTiers), whose calls use
// Current. Safe for concurrent use; the Tier returned is immutable.
func (m *MultiEndpoint) Tier() *Tier { return m.view.Load() }

// ValidateTiers checks a tier list as ReconfigureTiers does: at least one tier, no empty tier,
// and the flattened list valid for ValidateEndpoints (an endpoint's index is its position in
// the flattened list). group names the MultiEndpoint in the error. The error is a
// *ConfigError.
func ValidateTiers(group string, tiers [][]string) error {
	_, _, err := flattenTiers(group, tiers)
	return err
}

// flattenTiers validates tiers and returns the flattened list and each endpoint's tier.
func flattenTiers(group string, tiers [][]string) ([]string, []int, error) {
	if len(tiers) == 0 {
		return nil, nil, &ConfigError{Group: group, Index: -1, Problem: "the tier list is empty"}
	}
	var list []string
	var tierOf []int
	for t, members := range tiers {
		if len(members) == 0 {
			return nil, nil, &ConfigError{Group: group, Index: -1, Problem: fmt.Sprintf("tier %d is empty", t)}
		}
		for _, id := range members {
			list = append(list, id)
			tierOf = append(tierOf, t)
		}
	}
	if err := ValidateEndpoints(group, list); err != nil {
		return nil, nil, err
	}
	return list, tierOf, nil
}

// flattenOptions validates the endpoints of opts (Endpoints, or Tiers) and returns them as
// reconfigure takes them.
func flattenOptions(opts Options) ([]string, []int, error) {
	if opts.Tiers == nil {
		return opts.Endpoints, nil, ValidateEndpoints(opts.Name, opts.Endpoints)
	}
	if len(opts.Endpoints) > 0 {
		return nil, nil, &ConfigError{Group: opts.Name, Index: -1, Problem: "both Endpoints and Tiers are set"}
	}
	return flattenTiers(opts.Name, opts.Tiers)
}

// tierAt is the tier of the i-th endpoint of a list: tierOf[i], or i without tiers.
func tierAt(tierOf []int, i int) int {
	if tierOf == nil {
		return i
	}
	return tierOf[i]
}

// ReconfigureTiers is Reconfigure with tiers: it replaces the endpoints by tiers (top tier
// first) and sets both durations, applying rule 3 once. Kept endpoints keep their state; an
// endpoint that changes tier joins the new one now (Tier.Joined); any slow start ramp ends.
// Afterwards the MultiEndpoint has tiers (Tier is not nil), also if a later Reconfigure
// gives it a flat list (each endpoint then its own tier). It returns a *ConfigError (and
// changes nothing) for an invalid tier list (ValidateTiers) or a negative duration, and
// ErrClosed after Close.
func (m *MultiEndpoint) ReconfigureTiers(tiers [][]string, recoveryTimeout, switchingDelay time.Duration) error {
	list, tierOf, err := flattenTiers(m.name, tiers)
	if err != nil {
		return err
	}
	if err := ValidateDurations(m.name, recoveryTimeout, switchingDelay); err != nil {
		return err
	}
	m.mu.Lock()
	if !m.closed {
		m.tiered = true
	}
	m.mu.Unlock()
	return m.reconfigure(list, tierOf, &durations{recoveryTimeout, switchingDelay})
}

// leadLocked returns tier t's first Available member, nil if none. m.mu must be held.
func (m *MultiEndpoint) leadLocked(t int) *endpoint {
	for _, e := range m.tiers[t] {
		if e.state == Available {
			return e
		}
	}
	return nil
}

// tierStateLocked is tier t's state: Available if a member is, else Recovering if a member
// is, else Unavailable. m.mu must be held.
func (m *MultiEndpoint) tierStateLocked(t int) State {
	s := Unavailable
	for _, e := range m.tiers[t] {
		switch e.state {
		case Available:
			return Available
		case Recovering:
			s = Recovering
		}
	}
	return s
}

// firstDueLocked returns the Available member of tier t whose switch would land first (the
// first in list order among equals); t must have one. m.mu must be held.
func (m *MultiEndpoint) firstDueLocked(t int) *endpoint {
	var best *endpoint
	var bestDue time.Time
	for _, e := range m.tiers[t] {
		if e.state != Available {
			continue
		}
		if due := m.switchDueLocked(e); best == nil || due.Before(bestDue) {
			best, bestDue = e, due
		}
	}
	return best
}

// ramp is the slow start of a switch back: the tier switched away from keeps a share.
type ramp struct {
	from  int
	start time.Time
	timer clock.Timer
}

// switchedLocked follows a switch of the current endpoint from one tier to another: a switch
// back starts a ramp (with tiers and a SlowStart), any other switch ends the running one. m.mu
// must be held.
func (m *MultiEndpoint) switchedLocked(from, to string, reason Reason, now time.Time) {
	m.endRampLocked()
	f, t := m.endpoints[from], m.endpoints[to]
	if !m.tiered || m.slowStart <= 0 || reason != Recovery || f == nil || t == nil || f.tier <= t.tier {
		return
	}
	r := &ramp{from: f.tier, start: now}
	r.timer = m.clock.AfterFunc(m.slowStart, func() {
		m.mu.Lock()
		if m.closed || m.ramp != r {
			m.mu.Unlock()
			return
		}
		m.ramp = nil
		m.publishLocked()
		m.mu.Unlock()
	})
	m.ramp = r
}

// endRampLocked ends the running ramp, if any. m.mu must be held.
func (m *MultiEndpoint) endRampLocked() {
	if r := m.ramp; r != nil {
		r.timer.Stop()
		m.ramp = nil
	}
}

// publishLocked stores a new Tier view if the MultiEndpoint has tiers and the view changed;
// it ends a ramp whose tier has no Available member left. m.mu must be held.
func (m *MultiEndpoint) publishLocked() {
	if !m.tiered {
		return
	}
	cur := m.endpoints[m.Current()]
	if r := m.ramp; r != nil && (r.from >= len(m.tiers) || m.leadLocked(r.from) == nil) {
		m.endRampLocked() // the old tier failed during the ramp: the ramp ends at once
	}
	old := m.view.Load()
	if old != nil && m.sameViewLocked(old, cur) {
		return
	}
	v := &Tier{Index: cur.tier}
	for _, e := range m.tiers[cur.tier] {
		if e.state == Available {
			v.Members = append(v.Members, e.id)
			v.Joined = append(v.Joined, e.joined)
		}
	}
	if len(v.Members) == 0 {
		v.Members, v.Joined = []string{cur.id}, []time.Time{cur.joined}
	}
	if r := m.ramp; r != nil {
		v.RampStart = r.start
		for _, e := range m.tiers[r.from] {
			if e.state == Available {
				v.Previous = append(v.Previous, e.id)
			}
		}
	}
	m.view.Store(v)
}

// sameViewLocked reports whether v is the view publishLocked would build now, without
// allocating. m.mu must be held.
func (m *MultiEndpoint) sameViewLocked(v *Tier, cur *endpoint) bool {
	if v.Index != cur.tier {
		return false
	}
	i := 0
	for _, e := range m.tiers[cur.tier] {
		if e.state != Available {
			continue
		}
		if i >= len(v.Members) || v.Members[i] != e.id || !v.Joined[i].Equal(e.joined) {
			return false
		}
		i++
	}
	if i == 0 {
		if len(v.Members) != 1 || v.Members[0] != cur.id || !v.Joined[0].Equal(cur.joined) {
			return false
		}
	} else if i != len(v.Members) {
		return false
	}
	r := m.ramp
	if r == nil {
		return v.Previous == nil
	}
	if !v.RampStart.Equal(r.start) {
		return false
	}
	j := 0
	for _, e := range m.tiers[r.from] {
		if e.state != Available {
			continue
		}
		if j >= len(v.Previous) || v.Previous[j] != e.id {
			return false
		}
		j++
	}
	return j == len(v.Previous)
}

// tierIDs is the tiers as ids, for Status.
func tierIDs(tiers [][]*endpoint) [][]string {
	out := make([][]string, len(tiers))
	for i, t := range tiers {
		for _, e := range t {
			out[i] = append(out[i], e.id)
		}
	}
	return out
}
