package chaos

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
)

// applied is one step as the run performed it: when, and the state it left.
type applied struct {
	at   time.Time
	step Step
}

// faultTimeline is the states the run went through: the initial one from start, then one per
// applied step.
type faultTimeline struct {
	start   time.Time
	initial State
	steps   []applied // in time order
}

// during returns the states in force at some time in [from, to]: the one in force at from,
// and each one a step entered before to.
func (tl *faultTimeline) during(from, to time.Time) []State {
	cur := tl.initial
	var out []State
	i := 0
	for ; i < len(tl.steps) && !tl.steps[i].at.After(from); i++ {
		cur = tl.steps[i].step.After
	}
	out = append(out, cur)
	for ; i < len(tl.steps) && !tl.steps[i].at.After(to); i++ {
		out = append(out, tl.steps[i].step.After)
	}
	return out
}

// failureClass sorts a failed call by what was in force while it ran.
type failureClass int

const (
	// classNoHealthy: the call's group, or the default group (the Spanner client's session
	// RPCs use it), had no healthy endpoint at some time during the call: nothing could
	// serve it then. Allowed.
	classNoHealthy failureClass = iota
	// classSilent: every group had a healthy endpoint, but a silent fault (calls fail or hang
	// on READY connections) was in force on an endpoint of those groups. Only outcome-based
	// health detection (issue 8) fails a group over from such an endpoint. So is a call that
	// ran out of its deadline while every healthy endpoint of one of those groups was on a
	// slow path with a bandwidth limit (State.limitedOnly): it waited behind the load's bytes
	// on a READY connection, and no failover could reach a path that carries them.
	classSilent
	// classUnexplained: every group had a healthy endpoint and no silent fault was in force
	// on them: the failover this project promises should have saved the call. Must be zero.
	classUnexplained
	// classOverload: refused by the database itself (query-overload, db-overload: an error
	// the overloads inject, RESOURCE_EXHAUSTED, at every endpoint): no endpoint could serve
	// it, and a plain client fails it the same way. Counted, and bounded by the overload rows.
	classOverload
	numClasses
)

// classified is a failed call with its class and the faults in force while it ran.
type classified struct {
	outcome
	class failureClass
	// faults lists the faults in force on any endpoint at some time during the call.
	faults string
	// silentSteps are the steps that started the silent faults blamed (classSilent).
	silentSteps []int
}

// classify sorts a failed call; see failureClass.
func classify(o outcome, tl *faultTimeline) classified {
	if o.code() == codes.ResourceExhausted && isOverloadRefusal(o.err) {
		return classified{outcome: o, class: classOverload, faults: "db:overload"}
	}
	states := tl.during(o.start, o.end)
	groups := []int{0} // the default group
	if g := slices.Index(groupNames[:], o.group); g > 0 {
		groups = append(groups, g)
	}
	c := classified{outcome: o, class: classUnexplained}
	var faults []string
	for _, s := range states {
		for _, f := range strings.Fields(s.faults()) {
			if f != "none" && !slices.Contains(faults, f) {
				faults = append(faults, f)
			}
		}
		for _, g := range groups {
			if !s.groupHealthy(g) {
				c.class = classNoHealthy
			}
			for _, e := range s.Groups[g] {
				for _, f := range []Fault{s.TCP[e], s.Frontend[e]} {
					if f.silent() && !slices.Contains(c.silentSteps, f.Step) {
						c.silentSteps = append(c.silentSteps, f.Step)
					}
				}
			}
			if o.code() != codes.DeadlineExceeded {
				continue
			}
			for _, e := range s.limitedOnly(g) {
				if f := s.TCP[e]; !slices.Contains(c.silentSteps, f.Step) {
					c.silentSteps = append(c.silentSteps, f.Step)
				}
			}
		}
	}
	if c.class == classUnexplained && len(c.silentSteps) > 0 {
		c.class = classSilent
	}
	c.faults = strings.Join(faults, " ")
	if c.faults == "" {
		c.faults = "none"
	}
	return c
}
