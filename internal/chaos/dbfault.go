package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// dbServeBound is how soon after a database-wide fault heals each group's first endpoint must
// serve an application call. Nothing in the client stands between the heal and that call:
// with every connected endpoint of a group ejected, each stays available (rule 4 of
// internal/verdict), so no group has left its first endpoint (the plan's dbLeadIn puts it
// there before the fault) and the next call of the load goes to it, whether or not its
// readmission probe has run yet. What remains is the load's own pace: its workers (see
// workers) pause 2ms to 100ms between calls, and the Spanner client's retries of UNAVAILABLE inside
// the calls in flight, which back off from 20ms by 1.3x up to 32s (DefaultRetryBackoff,
// cloud.google.com/go/spanner v1.96.1 retry.go); the point and sum readers, whose deadlines
// are 3s to 5s, start fresh calls, with fresh backoffs, every few seconds of the fault. 1s
// is the bound issue 26 states for this case; measured: 20ms to 200ms.
const dbServeBound = time.Second

// dbRun is one database-wide fault as the run applied it.
type dbRun struct {
	// start is when its first step was applied, heal when its last heal was (zero: not
	// healed, the run ended first).
	start, heal time.Time
	// groups is the configuration in force (none changes during the phase).
	groups Groups
	// unsettled lists how the client was not settled when it began (a group not on its first
	// endpoint, or that endpoint not usable, or an endpoint of the group ejected): the plan
	// leaves dbLeadIn without faults before it so that it is. Empty: settled.
	unsettled []string
	// served is, per endpoint, the arrival of the first application call its frontend
	// forwarded at or after heal; zero if none did before the load stopped.
	served [NumEndpoints]time.Time
}

// dbWatch follows the database-wide faults as the executor applies them: the client's state
// as each begins, and after its heal the first application call each frontend forwards.
// Its methods are no-ops on a nil *dbWatch (a run without frontends). Safe for concurrent use.
type dbWatch struct {
	gme  *spannerme.GCPMultiEndpoint
	topo *topology

	mu   sync.Mutex // guards runs
	runs []dbRun
}

// before is called before step s is applied: at the first step of a database-wide fault it
// records whether the client is settled.
func (w *dbWatch) before(s Step) {
	if w == nil || s.Kind != KindDatabaseUnavailable || s.Endpoint != 0 {
		return
	}
	run := dbRun{groups: s.After.Groups, unsettled: unsettledGroups(w.gme.Status(), w.topo.name)}
	w.mu.Lock()
	w.runs = append(w.runs, run)
	w.mu.Unlock()
}

// unsettledGroups returns, for each group of st not settled, why: its current endpoint is not
// its first, or that one's verdict is not "usable", or an endpoint of the group is ejected.
func unsettledGroups(st spannerme.Status, name func(string) string) []string {
	var out []string
	for _, g := range st.Groups {
		if len(g.Endpoints) == 0 {
			continue
		}
		first := g.Endpoints[0]
		for _, e := range g.Endpoints {
			if e.Priority < first.Priority {
				first = e
			}
		}
		if g.Current != first.Endpoint {
			out = append(out, fmt.Sprintf("%s on %s, not its first endpoint %s", g.Name, name(g.Current), name(first.Endpoint)))
		} else if first.Verdict != "usable" {
			out = append(out, fmt.Sprintf("%s's first endpoint %s %q", g.Name, name(first.Endpoint), first.Verdict))
		}
		for _, e := range g.Endpoints {
			if strings.HasPrefix(e.Verdict, "ejected") {
				out = append(out, fmt.Sprintf("%s's %s ejected", g.Name, name(e.Endpoint)))
			}
		}
	}
	return out
}

// after is called once step s was applied at at: it dates the fault's start, and at the heal
// that ends it (no endpoint left with db-unavailable) its heal, from which each frontend
// watches for the first application call it forwards.
func (w *dbWatch) after(s Step, at time.Time) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.runs)
	if n == 0 {
		return
	}
	r := &w.runs[n-1]
	switch {
	case s.Kind == KindDatabaseUnavailable && s.Endpoint == 0:
		r.start = at
	case r.heal.IsZero() && !r.start.IsZero() && !dbFaultIn(s.After):
		if n > 1 {
			w.saveServedLocked(n - 2) // the previous fault's watch ends here
		}
		r.heal = at
		for _, e := range w.topo.eps {
			e.calls.watchFrom(at)
		}
	}
}

// dbFaultIn reports whether any endpoint has db-unavailable in force in s.
func dbFaultIn(s State) bool {
	for e := range NumEndpoints {
		if s.Frontend[e].Kind == KindDatabaseUnavailable {
			return true
		}
	}
	return false
}

// saveServedLocked copies into run i what the frontends' watches found since its heal. w.mu
// must be held; the watches must still be run i's (faults are dbLeadIn+dbMin+dbAfter apart,
// far more than dbServeBound, so one watch at a time suffices).
func (w *dbWatch) saveServedLocked(i int) {
	for e, ep := range w.topo.eps {
		if at, ok := ep.calls.served(); ok {
			w.runs[i].served[e] = at
		}
	}
}

// collect returns the faults seen, each with the first application calls forwarded after its
// heal. Call it once the load stopped.
func (w *dbWatch) collect() []dbRun {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.runs); n > 0 && !w.runs[n-1].heal.IsZero() {
		w.saveServedLocked(n - 1)
	}
	return append([]dbRun(nil), w.runs...)
}

// dbVerdict is the judgement of one database-wide fault.
type dbVerdict struct {
	line string
	bad  bool
	// worst is the longest wait, after the heal, for a group's first endpoint to serve; -1
	// when one never served.
	worst time.Duration
}

// judgeDatabaseFaults judges each run (see dbRun): no group switched from its start to
// dbAfter after its heal (a switch that a reconfiguration of the schedule made is the
// operator's, and is listed apart, not judged); every group's first endpoint served an
// application call within dbServeBound of the heal; and the client was settled when it began (the plan's dbLeadIn is
// meant for that, so a client that is not 24s after the last fault is a finding of its own).
// switches are the run's switch events, name turns an address into e1..e3, t0 is the run's
// start.
func judgeDatabaseFaults(runs []dbRun, switches []spannerme.SwitchEvent, name func(string) string, t0 time.Time) []dbVerdict {
	out := make([]dbVerdict, 0, len(runs))
	for _, r := range runs {
		v := dbVerdict{}
		var b strings.Builder
		fmt.Fprintf(&b, "%7.1fs db-unavailable", r.start.Sub(t0).Seconds())
		if r.heal.IsZero() {
			fmt.Fprintf(&b, " not healed before the run ended: not judged")
			v.line = b.String()
			out = append(out, v)
			continue
		}
		fmt.Fprintf(&b, " for %v:", r.heal.Sub(r.start).Round(100*time.Millisecond))
		if len(r.unsettled) > 0 {
			v.bad = true
			fmt.Fprintf(&b, " client not settled %v after every fault was healed (%s);", dbLeadIn, strings.Join(r.unsettled, "; "))
		}
		var sw, ordered []string
		for _, ev := range switches {
			if ev.At.Before(r.start) || ev.At.After(r.heal.Add(dbAfter)) {
				continue
			}
			desc := fmt.Sprintf("%s %s->%s (%v) at %+.1fs", ev.Name, name(ev.From), name(ev.To), ev.Reason, ev.At.Sub(r.heal).Seconds())
			if ev.Reason == spannerme.Reconfiguration {
				// The schedule's reconfiguration changed the group: the operator's move, not
				// the client's (the row judges what the client does about the fault).
				ordered = append(ordered, desc)
				continue
			}
			sw = append(sw, desc)
		}
		if len(sw) > 0 {
			v.bad = true
		}
		fmt.Fprintf(&b, " %d switches from its start to %v after the heal", len(sw), dbAfter)
		if len(sw) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(sw, ", "))
		}
		if len(ordered) > 0 {
			fmt.Fprintf(&b, " (and %d by a reconfiguration of the schedule: %s)", len(ordered), strings.Join(ordered, ", "))
		}
		b.WriteString("; first endpoints served")
		seen := map[int]bool{}
		for g, eps := range r.groups {
			if len(eps) == 0 || seen[eps[0]] {
				continue
			}
			e := eps[0]
			seen[e] = true
			if r.served[e].IsZero() {
				v.bad, v.worst = true, -1
				fmt.Fprintf(&b, " %s (%s) never", endpointName(e), groupNames[g])
				continue
			}
			d := r.served[e].Sub(r.heal)
			if d > dbServeBound {
				v.bad = true
			}
			if v.worst >= 0 && d > v.worst {
				v.worst = d
			}
			fmt.Fprintf(&b, " %s (%s) %v", endpointName(e), groupNames[g], d.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, " after the heal (bound %v)", dbServeBound)
		v.line = b.String()
		out = append(out, v)
	}
	return out
}

// dbInvariant is the row of the database-wide faults.
func dbInvariant(runs []dbRun, switches []spannerme.SwitchEvent, name func(string) string, t0 time.Time, frontends bool) Invariant {
	inv := Invariant{Name: "db-unavailable: no switch, first endpoints serve after heal"}
	if !frontends {
		inv.Status, inv.Result = NotChecked, "no frontends (-no-frontends): no database-wide fault drawn"
		return inv
	}
	if len(runs) == 0 {
		inv.Status, inv.Result = NotChecked, fmt.Sprintf("none in this schedule (one all-down phase in %d becomes one where the run leaves it %v)", dbOdds, dbLeadIn+dbMax+dbAfter)
		return inv
	}
	inv.Status = Pass
	bad := 0
	worst := time.Duration(0)
	for _, v := range judgeDatabaseFaults(runs, switches, name, t0) {
		inv.Details = append(inv.Details, v.line)
		if v.bad {
			bad++
		}
		if v.worst < 0 || worst < 0 {
			worst = -1
		} else {
			worst = max(worst, v.worst)
		}
	}
	ws := worst.Round(time.Millisecond).String()
	if worst < 0 {
		ws = "never (for one)"
	}
	inv.Result = fmt.Sprintf("%d faults (every endpoint UNAVAILABLE %v-%v), %d broken: switches from the start to %v after the heal: none allowed; first endpoints served %s after the heal at worst (bound %v)",
		len(runs), dbMin, dbMax, bad, dbAfter, ws, dbServeBound)
	if bad > 0 {
		inv.Status = Fail
	}
	return inv
}
