package chaos

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Status is the verdict on one invariant.
type Status int

const (
	// Pass: checked and held.
	Pass Status = iota
	// Fail: checked and broken; the run exits non-zero.
	Fail
	// Counted: figures reported, not a pass/fail check (the row says why).
	Counted
	// NotChecked: the run could not check it (the row says why).
	NotChecked
)

func (s Status) String() string {
	return [...]string{"PASS", "FAIL", "COUNTED", "N/A"}[s]
}

// Invariant is one row of the closing table.
type Invariant struct {
	Name   string
	Status Status
	// Result is one line of figures.
	Result string
	// Details lists what the row is about (failed calls, missing rows), at most a few dozen.
	Details []string
}

// Report is the outcome of a run.
type Report struct {
	Seed     uint64
	Duration time.Duration
	Backend  string
	// Invariants is the closing table, in order.
	Invariants []Invariant
	// Lost is the number of acknowledged commits not present exactly once at the end;
	// Acked the number of acknowledged commits.
	Lost, Acked int
	// Calls and FailedCalls count the load's calls.
	Calls, FailedCalls int64
	// Unexplained, Silent and NoHealthy count the failed calls of each class (see
	// failureClass); UnknownCommitted the failed writes settled as committed by their ID.
	Unexplained, Silent, NoHealthy, UnknownCommitted int
	// Applied counts the steps applied, by kind.
	Applied map[Kind]int
	// Served counts, per endpoint, the kilobytes it carried from the backend.
	Served [NumEndpoints]int64
	// Reproduce is the command that replays the run.
	Reproduce string
	// Interrupted is how far the schedule got when the run was interrupted (its context
	// ended); zero for a whole run. An interrupted run is not OK, whatever the table says.
	Interrupted time.Duration
	// Failover is the failover table (issue 43): per kind of fault that made an endpoint
	// unusable, how long the affected groups took to move and to come back.
	Failover []FailoverRow
	// failed are the load's failed calls, classified (writes settled as committed left out).
	failed []classified
	// overloaded are the failed calls the database's overloads refused (classOverload).
	overloaded []classified
}

// OK reports whether the whole schedule ran and no invariant failed.
func (r *Report) OK() bool {
	if r.Interrupted > 0 {
		return false
	}
	for _, inv := range r.Invariants {
		if inv.Status == Fail {
			return false
		}
	}
	return true
}

// Summary is the closing line.
func (r *Report) Summary() string {
	var failed []string
	for i, inv := range r.Invariants {
		if inv.Status == Fail {
			failed = append(failed, fmt.Sprint(i+1))
		}
	}
	verdict := "PASS: every invariant held"
	switch {
	case len(failed) > 0:
		verdict = "FAIL: invariants " + strings.Join(failed, ", ") + " broken"
	case r.Interrupted > 0:
		verdict = fmt.Sprintf("INTERRUPTED at %v: the invariants held for the part that ran, not a whole soak", r.Interrupted.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("lost: %d (acknowledged commits, of %d, not present exactly once at the end); calls %d, failed %d (%d unexplained); %s; seed %d; reproduce: %s",
		r.Lost, r.Acked, r.Calls, r.FailedCalls, r.Unexplained, verdict, r.Seed, r.Reproduce)
}

// Print writes the table of invariants and the summary line.
func (r *Report) Print(w io.Writer) {
	printFailover(w, r.Failover)
	fmt.Fprintf(w, "\nInvariants (seed %d, %v, %s)\n", r.Seed, r.Duration, r.Backend)
	fmt.Fprintf(w, "  %-3s %-7s %-58s %s\n", "#", "result", "invariant", "figures")
	for i, inv := range r.Invariants {
		fmt.Fprintf(w, "  %-3d %-7s %-58s %s\n", i+1, inv.Status, inv.Name, inv.Result)
		for _, d := range inv.Details {
			fmt.Fprintf(w, "  %-3s %-7s   - %s\n", "", "", d)
		}
	}
	fmt.Fprintf(w, "\n%s\n", r.Summary())
}
