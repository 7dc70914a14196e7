package chaos

import (
	"fmt"
	"slices"
	"time"
)

// burstGrace is how long after a group's failover an application Commit may still reach the
// endpoint it left and count in the first burst: calls picked before the switch and still on
// their way, and the delivery of the ejection to the group's state machine, on a loaded
// machine under -race (on loopback both take milliseconds).
const burstGrace = 500 * time.Millisecond

// commitRun is one long commit failure (fe-commit-fail-long) as the run applied it.
type commitRun struct {
	endpoint int
	step     int // the plan's index of the step that began it
	// start is when it was applied; heal when the step that ended it was (the run's end if
	// none did).
	start, heal time.Time
}

// commitRuns returns the long commit failures of a run's timeline, in order; end closes one
// no step ended.
func commitRuns(tl *faultTimeline, end time.Time) []commitRun {
	var out []commitRun
	open := [NumEndpoints]int{-1, -1, -1}
	for _, a := range tl.steps {
		for e := range NumEndpoints {
			f := a.step.After.Frontend[e]
			switch {
			case open[e] < 0 && f.Kind == KindFrontendCommitFailLong:
				open[e] = len(out)
				out = append(out, commitRun{endpoint: e, step: f.Step, start: a.at})
			case open[e] >= 0 && f.Kind != KindFrontendCommitFailLong:
				out[open[e]].heal = a.at
				open[e] = -1
			}
		}
	}
	for e := range NumEndpoints {
		if open[e] >= 0 {
			out[open[e]].heal = end
		}
	}
	return out
}

// commitBurst is the judgement of one long commit failure on endpoint E.
//
// A refused commit is an application Commit (not a probe's) that E's frontend answered with
// the fault's UNAVAILABLE while the fault held. The first burst is the refused commits that
// arrived before E's first ejection for its writes during the fault, plus RecoveryTimeout
// (the groups that were on E fail over then) and burstGrace: the writes that showed the
// fault. late counts those that arrived after: each is a write the client sent to E after it
// knew that E's commits fail, a burst beyond the first (as every readmission by a probe that
// E's reads pass used to cause). It must be 0. readmitted counts E's readmissions after that
// ejection while the fault held: only a probe of the writes class may readmit E, and every
// Commit fails, so it must be 0 too. Refused commits before a first ejection for another
// class (an ejection by timeouts, readmitted by the probe of that class) are part of the
// first burst, which ends at the ejection for writes. With no ejection for writes during the
// fault, every refused commit is in the one burst (the groups never went to E, or the fault
// ended before the thresholds were reached).
//
// A refused commit after the first burst is excused when, at some time in the
// RecoveryTimeout + burstGrace before it, a group that lists E had no endpoint but E that was
// usable: each of the others was ejected (the health events) or under a hard fault (the
// plan's state); or the client logged that a group used E under rule 4 then (lastResortLog:
// an endpoint that a reset or a frontend restart left unconnected for a moment counts for
// rule 4, and the plan does not see that). Then every connected endpoint of that group could
// be ejected, and rule 4 of internal/verdict makes each available again, E included, so
// writes may go back to E: the product's rule, not a second burst. The plan keeps a healthy
// endpoint besides E in every group, but an ejection outlives its fault (up to
// MaxEjectionTime), and a short fe-commit-fail on the others ejects them for their writes
// too.
type commitBurst struct {
	run                  commitRun
	refused, first, late int
	lateAt               []time.Time // when each late one arrived
	excused              int         // refused after the first burst while a group had only E (see above)
	ejectedAt            time.Time   // E's first ejection for writes during the fault; zero: none
	readmitted           int
}

func (b commitBurst) bad() bool { return b.late > 0 || b.readmitted > 0 }

// excuseStep is the period at which excused samples the RecoveryTimeout + burstGrace before a
// refused commit.
const excuseStep = 25 * time.Millisecond

// ejectedAt reports whether the endpoint named name was ejected at t, from the run's ejections
// and readmissions (in time order).
func ejectedAt(evs []healthEvent, name string, t time.Time) bool {
	out := false
	for _, ev := range evs {
		if ev.at.After(t) {
			break
		}
		if ev.endpoint == name {
			out = ev.ejected
		}
	}
	return out
}

// excused reports whether, at some time in the RecoveryTimeout + burstGrace before t, a group
// that lists endpoint e had no other endpoint that was neither ejected nor under a hard fault,
// or used e as its last resort by rule 4 as lr records (see commitBurst).
func excused(tl *faultTimeline, evs []healthEvent, lr []lastResort, e int, t time.Time) bool {
	for _, l := range lr {
		if l.endpoint == endpointName(e) && l.covers(t.Add(-RecoveryTimeout-burstGrace), t) {
			return true
		}
	}
	for at := t.Add(-RecoveryTimeout - burstGrace); !at.After(t); at = at.Add(excuseStep) {
		st := tl.during(at, at)[0]
		for _, eps := range st.Groups {
			if !slices.Contains(eps, e) {
				continue
			}
			if !slices.ContainsFunc(eps, func(f int) bool {
				return f != e && st.healthy(f) && !ejectedAt(evs, endpointName(f), at)
			}) {
				return true
			}
		}
	}
	return false
}

// judgeCommitBursts judges each run: refused[e] are the arrival times of endpoint e's
// refused application commits (in order), evs the run's ejections and readmissions (in time
// order), lr the client's own record of rule 4 (lastResortLog), tl the states the run went
// through.
func judgeCommitBursts(runs []commitRun, refused [NumEndpoints][]time.Time, evs []healthEvent, lr []lastResort, tl *faultTimeline) []commitBurst {
	out := make([]commitBurst, 0, len(runs))
	for _, r := range runs {
		b := commitBurst{run: r}
		name := endpointName(r.endpoint)
		for _, ev := range evs {
			if ev.endpoint != name || ev.at.Before(r.start) || ev.at.After(r.heal) {
				continue
			}
			switch {
			case b.ejectedAt.IsZero() && ev.ejected && ev.class == "writes":
				b.ejectedAt = ev.at
			case !b.ejectedAt.IsZero() && !ev.ejected:
				b.readmitted++
			}
		}
		end := r.heal
		if !b.ejectedAt.IsZero() {
			end = b.ejectedAt.Add(RecoveryTimeout + burstGrace)
		}
		for _, at := range refused[r.endpoint] {
			if at.Before(r.start) || at.After(r.heal) {
				continue
			}
			b.refused++
			switch {
			case !at.After(end):
				b.first++
			case excused(tl, evs, lr, r.endpoint, at):
				b.excused++
			default:
				b.late++
				b.lateAt = append(b.lateAt, at)
			}
		}
		out = append(out, b)
	}
	return out
}

// line describes b for the table, times from t0.
func (b commitBurst) line(t0 time.Time) string {
	r := b.run
	s := fmt.Sprintf("%7.1fs fe-commit-fail-long %s for %v (step %d): %d application commits refused",
		r.start.Sub(t0).Seconds(), endpointName(r.endpoint), r.heal.Sub(r.start).Round(100*time.Millisecond), r.step, b.refused)
	if b.ejectedAt.IsZero() {
		return s + ", no ejection for writes (every refused commit is the one burst)"
	}
	s += fmt.Sprintf("; ejected for writes %+.1fs into it; %d in the first burst, %d after it", b.ejectedAt.Sub(r.start).Seconds(), b.first, b.late)
	for i, at := range b.lateAt {
		sep := ", at"
		if i == 0 {
			sep = " (at"
		}
		s += fmt.Sprintf("%s %.1fs", sep, at.Sub(t0).Seconds())
		if i == len(b.lateAt)-1 {
			s += ")"
		}
	}
	if b.excused > 0 {
		s += fmt.Sprintf(" (and %d while a group of %s had no other usable endpoint: rule 4)", b.excused, endpointName(r.endpoint))
	}
	if b.readmitted > 0 {
		s += fmt.Sprintf("; readmitted %d times while its commits failed", b.readmitted)
	}
	return s
}

// commitInvariant is the row of the long commit failures.
func commitInvariant(runs []commitRun, refused [NumEndpoints][]time.Time, evs []healthEvent, lr []lastResort, tl *faultTimeline, frontends bool) Invariant {
	t0 := tl.start
	inv := Invariant{Name: "fe-commit-fail-long: one burst of refused writes per fault"}
	if !frontends {
		inv.Status, inv.Result = NotChecked, "no frontends (-no-frontends): no commit failure drawn"
		return inv
	}
	if len(runs) == 0 {
		inv.Status, inv.Result = NotChecked, fmt.Sprintf("none in this schedule (drawn only where a phase leaves it %v)", commitLongMin)
		return inv
	}
	inv.Status = Pass
	var refusedAll, first, late, excusedAll, readmitted, most, bad int
	for _, b := range judgeCommitBursts(runs, refused, evs, lr, tl) {
		inv.Details = append(inv.Details, b.line(t0))
		refusedAll += b.refused
		first += b.first
		late += b.late
		excusedAll += b.excused
		readmitted += b.readmitted
		most = max(most, b.first)
		if b.bad() {
			bad++
		}
	}
	inv.Result = fmt.Sprintf("%d faults (%v-%v); application commits refused: %d, %d in first bursts (at most %d in one), %d after the first ejection for writes + RecoveryTimeout + %v (and %d while a group had no other usable endpoint: rule 4); readmissions while commits failed: %d",
		len(runs), commitLongMin, commitLongMax, refusedAll, first, most, late, burstGrace, excusedAll, readmitted)
	if bad > 0 {
		inv.Status = Fail
	}
	return inv
}
