package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// NumEndpoints is the number of fake PSC endpoints, e1..e3, all in front of ONE backend.
const NumEndpoints = 3

// The three groups (MultiEndpoints). Session RPCs of the Spanner client use the default group.
const (
	GroupDefault = "default"
	GroupWest    = "west"
	// GroupTiered has tiers (groupTiers): its top tier has two members.
	GroupTiered = "tiered"
)

// groupNames lists the groups in a fixed order; Groups is indexed the same way.
var groupNames = [...]string{GroupDefault, GroupWest, GroupTiered}

const numGroups = len(groupNames)

// tieredGroup is GroupTiered's index in groupNames.
const tieredGroup = 2

// groupTiers are the tiers of the groups that have them (Settings.Tiers), by index in
// groupNames; nil for a group without tiers (each endpoint its own tier). A tiered group keeps
// its tiers for the whole run: UpdateMultiEndpoints keeps Settings.Tiers and refuses another
// list for such a group (docs/tiers.md), so a reconfiguration gives it its tiers flattened.
var groupTiers = [numGroups][][]int{tieredGroup: {{0, 1}, {2}}}

// tierSlowStart is the tiered group's TierSettings.SlowStart: compressed like the schedule
// (a member flap's member is down and up every 1-3s), so that a run sees ramps end.
const tierSlowStart = 2 * time.Second

// Groups is a configuration: for each group (in groupNames order) its endpoints' indexes in
// priority order (a tiered group: its tiers flattened). Slices are never modified once in a
// Groups.
type Groups [numGroups][]int

// initialGroups is the configuration the client starts with and the plan may restore.
var initialGroups = Groups{{0, 1, 2}, {2, 0}, flatten(groupTiers[tieredGroup])}

// flatten returns the endpoints of tiers in order.
func flatten(tiers [][]int) []int {
	var out []int
	for _, t := range tiers {
		out = append(out, t...)
	}
	return out
}

// tiersOf returns group g's tiers under the configuration eps (its list in Groups): its
// groupTiers, or each endpoint a tier of its own.
func tiersOf(g int, eps []int) [][]int {
	if groupTiers[g] != nil {
		return groupTiers[g]
	}
	out := make([][]int, len(eps))
	for i, e := range eps {
		out[i] = []int{e}
	}
	return out
}

func (g Groups) String() string {
	var b strings.Builder
	for i, name := range groupNames {
		if i > 0 {
			b.WriteString(" ")
		}
		if groupTiers[i] == nil {
			fmt.Fprintf(&b, "%s=[%s]", name, endpointList(g[i]))
			continue
		}
		var parts []string
		for _, t := range groupTiers[i] {
			if len(t) == 1 {
				parts = append(parts, endpointName(t[0]))
			} else {
				parts = append(parts, "["+endpointList(t)+"]")
			}
		}
		fmt.Fprintf(&b, "%s=[%s]", name, strings.Join(parts, " "))
	}
	return b.String()
}

// endpointName is e1, e2 or e3 for index 0, 1, 2.
func endpointName(i int) string { return fmt.Sprintf("e%d", i+1) }

func endpointList(eps []int) string {
	names := make([]string, len(eps))
	for i, e := range eps {
		names[i] = endpointName(e)
	}
	return strings.Join(names, " ")
}

// State is what the plan holds in force after a step: each endpoint's fault on each layer,
// and the configuration.
type State struct {
	TCP      [NumEndpoints]Fault
	Frontend [NumEndpoints]Fault
	// Database is the database-layer fault in force (query-overload, db-overload): it acts at
	// every endpoint's frontend at once and composes with their own faults.
	Database Fault
	Groups   Groups
}

// healthy reports whether calls through endpoint e can succeed: no hard fault on either layer.
func (s *State) healthy(e int) bool { return !s.TCP[e].hard() && !s.Frontend[e].hard() }

// serves reports whether endpoint e is a healthy member of a group's current tier (its first
// healthy endpoint, for a group without tiers): where the group's traffic belongs.
func (s *State) serves(e int) bool {
	for g := range numGroups {
		if slices.Contains(s.currentTier(g), e) && s.healthy(e) {
			return true
		}
	}
	return false
}

// currentTier returns group g's current tier as the plan sees it: its first tier with a
// healthy member (for a group without tiers, the first healthy endpoint alone); nil when no
// endpoint of g is healthy.
func (s *State) currentTier(g int) []int {
	for _, t := range tiersOf(g, s.Groups[g]) {
		if slices.ContainsFunc(t, s.healthy) {
			return t
		}
	}
	return nil
}

// faultFree reports whether endpoint e has no fault in force on either layer.
func (s *State) faultFree(e int) bool { return !s.TCP[e].active() && !s.Frontend[e].active() }

// groupHealthy reports whether group g lists at least one healthy endpoint.
func (s *State) groupHealthy(g int) bool {
	return slices.ContainsFunc(s.Groups[g], s.healthy)
}

// limitedOnly returns group g's healthy endpoints when it has some and each is on a slow
// path with a bandwidth limit (Fault.limited): no failover from there reaches a path that
// carries the load; nil otherwise.
func (s *State) limitedOnly(g int) []int {
	var out []int
	for _, e := range s.Groups[g] {
		if !s.healthy(e) {
			continue
		}
		if !s.TCP[e].limited() {
			return nil
		}
		out = append(out, e)
	}
	return out
}

// allGroupsHealthy reports whether every group lists a healthy endpoint.
func (s *State) allGroupsHealthy() bool {
	for g := range numGroups {
		if !s.groupHealthy(g) {
			return false
		}
	}
	return true
}

// faults returns the faults in force, "e1:down e3:fe-hang", or "none".
func (s *State) faults() string {
	var parts []string
	for e := range NumEndpoints {
		for _, f := range []Fault{s.TCP[e], s.Frontend[e]} {
			if f.active() {
				parts = append(parts, endpointName(e)+":"+f.String())
			}
		}
	}
	if s.Database.active() {
		parts = append(parts, "db:"+s.Database.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Step is one scheduled action.
type Step struct {
	// At is when the step is due, from the start of the schedule.
	At time.Duration
	// Kind is what it does.
	Kind Kind
	// Endpoint is the endpoint it acts on (an index; -1 for reconfigure and the database
	// layer's kinds, which act on every endpoint).
	Endpoint int
	// Fault holds the parameters of a fault kind.
	Fault Fault
	// For is how long a fault is planned to hold (0 for instant steps and heals).
	For time.Duration
	// Groups is the new configuration of a reconfigure step.
	Groups Groups
	// Phase names the step's phase: "" for a phase in which every group keeps a healthy
	// endpoint, "all-down" for the steps that start and end a phase with every endpoint down,
	// "db-unavailable" for the heals before, the steps and the heals of a database-wide fault,
	// "end" for the heals at the end of the schedule.
	Phase string
	// After is the plan's state once the step is applied.
	After State
}

func (s Step) String() string {
	var b strings.Builder
	switch {
	case s.Kind == KindReconfigure:
		fmt.Fprintf(&b, "reconfigure %v", s.Groups)
	case s.Endpoint < 0 && s.Fault.active():
		fmt.Fprintf(&b, "%s on every endpoint", s.Fault)
	case s.Endpoint < 0:
		fmt.Fprintf(&b, "%s on every endpoint", s.Kind)
	case s.Fault.active():
		fmt.Fprintf(&b, "%s %s", s.Fault, endpointName(s.Endpoint))
	default:
		fmt.Fprintf(&b, "%s %s", s.Kind, endpointName(s.Endpoint))
	}
	if s.For > 0 {
		fmt.Fprintf(&b, " for %v", s.For.Round(time.Millisecond))
	}
	if s.Phase != "" {
		fmt.Fprintf(&b, " [%s]", s.Phase)
	}
	return b.String()
}

// Plan is a whole schedule, a pure function of its seed, duration and whether frontends exist.
type Plan struct {
	Seed      uint64
	Duration  time.Duration
	Frontends bool
	// Steps are in order of At.
	Steps []Step
	// Initial is the state before the first step.
	Initial State
	// Storm is the GOAWAY storm of the whole run (with frontends): one endpoint's frontend
	// ends every connection once it is MaxAge old (gRPC adds ±10% jitter), and cuts the calls
	// still running Grace later. gRPC fixes the age when the frontend starts, so the storm
	// lasts the whole run, under every other fault.
	Storm GoAwayStorm
}

// GoAwayStorm is a frontend's connection age limit; see Plan.Storm. The zero value is none.
type GoAwayStorm struct {
	Endpoint      int
	MaxAge, Grace time.Duration
}

func (s GoAwayStorm) String() string {
	if s.MaxAge == 0 {
		return "none"
	}
	return fmt.Sprintf("%s's frontend sends GOAWAY on every connection %v old, cuts its calls %v later", endpointName(s.Endpoint), s.MaxAge, s.Grace)
}

// Print writes the plan, one step a line.
func (p *Plan) Print(w io.Writer) {
	fmt.Fprintf(w, "schedule of seed %d, duration %v, frontend faults %v: %d steps; initial configuration %v; GOAWAY storm: %v\n",
		p.Seed, p.Duration, p.Frontends, len(p.Steps), p.Initial.Groups, p.Storm)
	for _, s := range p.Steps {
		fmt.Fprintf(w, "%7.1fs %s\n", s.At.Seconds(), s)
	}
}

// soloWindows returns, for each endpoint, the longest stretch of the plan during which some
// group's traffic belongs on it: it has no fault on either layer and every endpoint listed
// before it in that group has a hard one. A soak whose plan gives every endpoint a stretch of a
// few seconds moves traffic to every endpoint whatever the timing of the machine.
func soloWindows(p *Plan) [NumEndpoints]time.Duration {
	var best, open [NumEndpoints]time.Duration
	var since [NumEndpoints]time.Duration
	serving := func(s *State) [NumEndpoints]bool {
		var on [NumEndpoints]bool
		for _, g := range s.Groups {
			for _, e := range g {
				if !s.TCP[e].active() && !s.Frontend[e].active() {
					on[e] = true
					break
				}
				if s.healthy(e) {
					break
				}
			}
		}
		return on
	}
	prev := serving(&p.Initial)
	close := func(e int, at time.Duration) {
		if open[e] = at - since[e]; open[e] > best[e] {
			best[e] = open[e]
		}
	}
	for _, s := range p.Steps {
		now := serving(&s.After)
		for e := range NumEndpoints {
			switch {
			case now[e] && !prev[e]:
				since[e] = s.At
			case !now[e] && prev[e]:
				close(e, s.At)
			}
		}
		prev = now
	}
	for e := range NumEndpoints {
		if prev[e] {
			close(e, p.Duration)
		}
	}
	return best
}
