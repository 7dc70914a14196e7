package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/rig"
)

// invariantsOfData adds the rows about what the database holds.
func (r *Report) invariantsOfData(v *verdict, verr error, l *load) {
	if verr != nil {
		r.Invariants = append(r.Invariants, Invariant{Name: "the database could be verified", Status: Fail, Result: verr.Error()})
		return
	}
	inv := Invariant{Name: "total balance conserved", Status: Pass, Result: fmt.Sprintf("%d at the end, %d seeded", v.total, v.wantTotal)}
	if v.total != v.wantTotal {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	inv = Invariant{Name: "every balance = seed + the transfers that committed", Status: Pass,
		Result: fmt.Sprintf("%d accounts, %d differ", len(l.accounts), len(v.balances)), Details: firstLines(v.balances, 20)}
	if len(v.balances) > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	r.Acked = v.transfersAcked + v.insertsAcked
	r.Lost = v.lost()
	inv = Invariant{Name: "every acknowledged commit present exactly once", Status: Pass,
		Result:  fmt.Sprintf("%d transfers + %d inserts acknowledged; %d missing, %d duplicated", v.transfersAcked, v.insertsAcked, len(v.missing), len(v.duplicated)),
		Details: firstLines(append(append([]string(nil), v.missing...), v.duplicated...), 20)}
	if r.Lost > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	inv = Invariant{Name: "no unexplained rows (double commits, failed-then-committed)", Status: Pass,
		Result: fmt.Sprintf("%d unexplained rows", len(v.wrong)), Details: firstLines(v.wrong, 20)}
	if len(v.wrong) > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	r.UnknownCommitted = v.unknownCommitted
	r.Invariants = append(r.Invariants, Invariant{Name: "commits with unknown outcome settled by their ID", Status: Pass,
		Result: fmt.Sprintf("%d failed writes had sent Commit: %d committed (counted as done), %d did not (failed calls below)",
			v.unknown, v.unknownCommitted, v.unknown-v.unknownCommitted)})
	l.mu.Lock()
	anomalies := append([]string(nil), l.anomalies...)
	l.mu.Unlock()
	inv = Invariant{Name: "every successful read consistent (sum, rows, balances >= 0)", Status: Pass,
		Result:  fmt.Sprintf("%d reads, %d wrong", l.ok[opPointRead].Load()+l.ok[opSum].Load()+l.ok[opStream].Load(), len(anomalies)),
		Details: firstLines(anomalies, 20)}
	if len(anomalies) > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
}

// invariantsOfCalls classifies every failed call and adds the rows about them.
func (r *Report) invariantsOfCalls(cfg Config, l *load, v *verdict, tl *faultTimeline) {
	l.mu.Lock()
	failures := append([]outcome(nil), l.failures...)
	l.mu.Unlock()
	sort.Slice(failures, func(i, j int) bool { return failures[i].start.Before(failures[j].start) })
	var byClass [numClasses][]classified
	for _, f := range failures {
		if v != nil && f.kind.isWrite() && v.settled[f.id] {
			continue // committed: settled by its ID
		}
		c := classify(f, tl)
		byClass[c.class] = append(byClass[c.class], c)
		r.failed = append(r.failed, c)
	}
	r.Unexplained, r.Silent, r.NoHealthy = len(byClass[classUnexplained]), len(byClass[classSilent]), len(byClass[classNoHealthy])
	r.overloaded = byClass[classOverload]
	list := func(cs []classified, n int) []string {
		var out []string
		for _, c := range cs {
			msg := c.err.Error()
			if len(msg) > 200 {
				msg = msg[:200] + "..."
			}
			out = append(out, fmt.Sprintf("%7.1fs %-16s %v after %v; faults in force: %s; %s; attempts: %s",
				c.start.Sub(tl.start).Seconds(), c.worker, c.code(), c.end.Sub(c.start).Round(time.Millisecond), c.faults, msg, c.attempts))
		}
		return firstLines(out, n)
	}
	inv := Invariant{Name: "failed calls while every group had a healthy endpoint", Status: Pass,
		Result:  fmt.Sprintf("%d, none allowed (no silent fault on their groups either)", r.Unexplained),
		Details: list(byClass[classUnexplained], 30)}
	if r.Unexplained > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	r.Invariants = append(r.Invariants, tierInvariant(byClass[classUnexplained], tl, list))

	silent := byClass[classSilent]
	inv = Invariant{Name: "failed calls under silent faults (READY but failing/hung)", Details: list(silent, 30)}
	summary := countBy(silent)
	if !cfg.HealthDetection {
		inv.Status = Counted
		inv.Result = fmt.Sprintf("%d (%s); this build has no outcome-based health (issue 8), so a group stays on such an endpoint: bound = every call routed there during the fault", len(silent), summary)
	} else {
		over := overSilentBound(silent)
		inv.Status = Pass
		inv.Result = fmt.Sprintf("%d (%s); bound per worker per fault: 1 + ceil(%v / its deadline) (the call in flight, and those before failover)",
			len(silent), summary, silentDetection)
		if len(over) > 0 {
			inv.Status = Fail
			inv.Details = append(firstLines(over, 10), inv.Details...)
		}
	}
	r.Invariants = append(r.Invariants, inv)
	r.Invariants = append(r.Invariants, Invariant{Name: "failed calls while a group had no healthy endpoint", Status: Counted,
		Result:  fmt.Sprintf("%d (%s); allowed: nothing could serve them", r.NoHealthy, countBy(byClass[classNoHealthy])),
		Details: list(byClass[classNoHealthy], 10)})
	perOp := map[string]int{}
	for _, c := range byClass[classOverload] {
		perOp[c.kind.String()]++
	}
	var ops []string
	for k, n := range perOp {
		ops = append(ops, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ops)
	r.Invariants = append(r.Invariants, Invariant{Name: "failed calls the database refused (query-overload, db-overload)", Status: Counted,
		Result:  fmt.Sprintf("%d (%s); RESOURCE_EXHAUSTED from the database at every endpoint, as a plain client gets it: no loss, judged by the overload rows", len(byClass[classOverload]), joinOr(ops, "none")),
		Details: list(byClass[classOverload], 5)})
}

// countBy summarizes failed calls by code: "DeadlineExceeded x3, Unavailable x1", or "none".
func countBy(cs []classified) string {
	counts := map[string]int{}
	for _, c := range cs {
		counts[c.code().String()]++
	}
	var parts []string
	for code, n := range counts {
		parts = append(parts, fmt.Sprintf("%s x%d", code, n))
	}
	sort.Strings(parts)
	return joinOr(parts, "none")
}

// invariantsOfRun adds the rows about the schedule and the client's recovery.
func (r *Report) invariantsOfRun(x *executor, settled time.Duration, settleErr error, switches *rig.SwitchLog, health *healthLog) {
	x.mu.Lock()
	errs := append([]string(nil), x.errs...)
	n := len(x.timeline.steps)
	x.mu.Unlock()
	var applied []string
	for k := KindNone + 1; k < numKinds; k++ {
		if c := r.Applied[k]; c > 0 {
			applied = append(applied, fmt.Sprintf("%s %d", k, c))
		}
	}
	inv := Invariant{Name: "every scheduled step applied", Status: Pass,
		Result: fmt.Sprintf("%d of %d steps: %s", n, len(x.plan.Steps), strings.Join(applied, ", ")), Details: firstLines(errs, 20)}
	switch {
	case len(errs) > 0:
		inv.Status = Fail
	case r.Interrupted > 0:
		inv.Status = NotChecked
		inv.Result = fmt.Sprintf("interrupted at %v: ", r.Interrupted.Round(100*time.Millisecond)) + inv.Result
	case n < len(x.plan.Steps):
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	reasons := map[string]int{}
	for _, ev := range switches.Events() {
		reasons[ev.Reason.String()]++
	}
	var rs []string
	for k, v := range reasons {
		rs = append(rs, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(rs)
	inv = Invariant{Name: "client settled after the last heal", Status: Pass,
		Result: fmt.Sprintf("every group on an Available, READY endpoint %v after the last heal; switches: %s; health: %s; KB served by e1/e2/e3: %d/%d/%d",
			settled.Round(time.Millisecond), joinOr(rs, "none"), health.summary(), r.Served[0], r.Served[1], r.Served[2])}
	if settleErr != nil {
		inv.Status, inv.Result = Fail, settleErr.Error()
	}
	r.Invariants = append(r.Invariants, inv)
}
