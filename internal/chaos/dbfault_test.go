package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// TestJudgeDatabaseFaults judges synthetic database-wide faults: a switch from the fault's
// start to dbAfter after its heal breaks it, one before or later does not, nor one that a
// reconfiguration of the schedule made; a group's first
// endpoint must serve within dbServeBound of the heal; a client not settled at the start
// breaks it; a fault the run did not heal is not judged.
func TestJudgeDatabaseFaults(t *testing.T) {
	t0 := time.Unix(1000, 0)
	start, heal := t0.Add(30*time.Second), t0.Add(40*time.Second)
	names := func(a string) string { return a }
	served := func(d1, d3 time.Duration) (s [NumEndpoints]time.Time) {
		if d1 >= 0 {
			s[0] = heal.Add(d1)
		}
		if d3 >= 0 {
			s[2] = heal.Add(d3)
		}
		return s
	}
	run := dbRun{start: start, heal: heal, groups: initialGroups, served: served(20*time.Millisecond, 30*time.Millisecond)}
	sw := func(at time.Time) []spannerme.SwitchEvent {
		return []spannerme.SwitchEvent{{Name: GroupDefault, From: "e1", To: "e2", Reason: spannerme.Fallback, At: at}}
	}
	with := func(f func(*dbRun)) dbRun { r := run; f(&r); return r }
	for _, tc := range []struct {
		name     string
		run      dbRun
		switches []spannerme.SwitchEvent
		bad      bool
		worst    time.Duration
		want     string // in the line
	}{
		{"held", run, nil, false, 30 * time.Millisecond, "0 switches"},
		{"switch before the fault", run, sw(start.Add(-time.Millisecond)), false, 30 * time.Millisecond, "0 switches"},
		{"switch at its start", run, sw(start), true, 30 * time.Millisecond, "default e1->e2"},
		{"switch during it", run, sw(start.Add(3 * time.Second)), true, 30 * time.Millisecond, "1 switches"},
		{"switch within dbAfter of the heal", run, sw(heal.Add(dbAfter)), true, 30 * time.Millisecond, "+5.0s"},
		{"switch after dbAfter", run, sw(heal.Add(dbAfter + time.Millisecond)), false, 30 * time.Millisecond, "0 switches"},
		{"switch by a reconfiguration during it", run, []spannerme.SwitchEvent{{Name: GroupWest, From: "e2", To: "e3", Reason: spannerme.Reconfiguration, At: heal.Add(dbAfter)}},
			false, 30 * time.Millisecond, "0 switches from its start to 5s after the heal (and 1 by a reconfiguration of the schedule: west e2->e3 (reconfiguration) at +5.0s)"},
		{"a reconfiguration does not hide a fallback", run, append(sw(start.Add(time.Second)), spannerme.SwitchEvent{Name: GroupWest, From: "e2", To: "e3", Reason: spannerme.Reconfiguration, At: heal}),
			true, 30 * time.Millisecond, "1 switches"},
		{"first endpoint served at the bound", with(func(r *dbRun) { r.served = served(dbServeBound, 0) }), nil, false, dbServeBound, "e1 (default) 1s"},
		{"first endpoint served late", with(func(r *dbRun) { r.served = served(dbServeBound+time.Millisecond, 0) }), nil, true, dbServeBound + time.Millisecond, "e1 (default) 1.001s"},
		{"first endpoint never served", with(func(r *dbRun) { r.served = served(0, -1) }), nil, true, -1, "e3 (west) never"},
		{"a second endpoint's service is not the first's", with(func(r *dbRun) { r.served = served(-1, 0); r.served[1] = heal }), nil, true, -1, "e1 (default) never"},
		{"one first endpoint for both groups", with(func(r *dbRun) {
			r.groups = Groups{{1, 0}, {1}}
			r.served = [NumEndpoints]time.Time{1: heal.Add(time.Millisecond)}
		}), nil, false, time.Millisecond, "e2 (default) 1ms after"},
		{"not settled at the start", with(func(r *dbRun) { r.unsettled = []string{"default on e2, not its first endpoint e1"} }), nil, true, 30 * time.Millisecond, "not settled"},
		{"not healed", with(func(r *dbRun) { r.heal = time.Time{} }), sw(start), false, 0, "not judged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := judgeDatabaseFaults([]dbRun{tc.run}, tc.switches, names, t0)
			if len(vs) != 1 {
				t.Fatalf("%d verdicts for one fault", len(vs))
			}
			v := vs[0]
			if v.bad != tc.bad || v.worst != tc.worst || !strings.Contains(v.line, tc.want) {
				t.Errorf("bad %v, worst %v, line %q; want %v, %v, containing %q", v.bad, v.worst, v.line, tc.bad, tc.worst, tc.want)
			}
		})
	}
}

// TestDatabaseInvariantRow checks the row: not checked without frontends or without a fault,
// failed when one fault is broken.
func TestDatabaseInvariantRow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	heal := t0.Add(40 * time.Second)
	ok := dbRun{start: t0.Add(30 * time.Second), heal: heal, groups: initialGroups, served: [NumEndpoints]time.Time{0: heal, 2: heal}}
	late := ok
	late.served = [NumEndpoints]time.Time{0: heal.Add(2 * time.Second), 2: heal}
	name := func(a string) string { return a }
	for _, tc := range []struct {
		name      string
		runs      []dbRun
		frontends bool
		want      Status
	}{
		{"no frontends", nil, false, NotChecked},
		{"none drawn", nil, true, NotChecked},
		{"held", []dbRun{ok, ok}, true, Pass},
		{"one broken", []dbRun{ok, late}, true, Fail},
	} {
		if inv := dbInvariant(tc.runs, nil, name, t0, tc.frontends); inv.Status != tc.want || len(inv.Details) != len(tc.runs) {
			t.Errorf("%s: %v with %d details (%s), want %v with %d", tc.name, inv.Status, len(inv.Details), inv.Result, tc.want, len(tc.runs))
		}
	}
}

// TestUnsettledGroups checks the precondition of a database-wide fault read from Status: each
// group on its first endpoint (by priority), that one usable, none of its endpoints ejected.
func TestUnsettledGroups(t *testing.T) {
	ep := func(addr string, prio int, verdict string) spannerme.EndpointStatus {
		return spannerme.EndpointStatus{Endpoint: addr, Priority: prio, Verdict: verdict}
	}
	name := func(a string) string { return a }
	for _, tc := range []struct {
		name  string
		group spannerme.GroupStatus
		want  string // "" for settled
	}{
		{"settled", spannerme.GroupStatus{Name: "g", Current: "e1", Endpoints: []spannerme.EndpointStatus{ep("e1", 0, "usable"), ep("e2", 1, "usable")}}, ""},
		{"a standby not connected", spannerme.GroupStatus{Name: "g", Current: "e1", Endpoints: []spannerme.EndpointStatus{ep("e1", 0, "usable"), ep("e2", 1, "not connected")}}, ""},
		{"priority, not list order", spannerme.GroupStatus{Name: "g", Current: "e2", Endpoints: []spannerme.EndpointStatus{ep("e1", 1, "usable"), ep("e2", 0, "usable")}}, ""},
		{"on its second", spannerme.GroupStatus{Name: "g", Current: "e2", Endpoints: []spannerme.EndpointStatus{ep("e1", 0, "usable"), ep("e2", 1, "usable")}}, "g on e2, not its first endpoint e1"},
		{"first degraded", spannerme.GroupStatus{Name: "g", Current: "e1", Endpoints: []spannerme.EndpointStatus{ep("e1", 0, "degraded, but no other endpoint is usable"), ep("e2", 1, "usable")}}, `g's first endpoint e1 "degraded`},
		{"a standby ejected", spannerme.GroupStatus{Name: "g", Current: "e1", Endpoints: []spannerme.EndpointStatus{ep("e1", 0, "usable"), ep("e2", 1, "ejected")}}, "g's e2 ejected"},
	} {
		got := strings.Join(unsettledGroups(spannerme.Status{Groups: []spannerme.GroupStatus{tc.group}}, name), "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// checkDatabaseFault checks the database-wide fault that step i begins: on every endpoint at
// one time, for dbMin to dbMax, after dbLeadIn in which no step is taken (the heals of the
// phase's start come first), healed on every endpoint at one time, and followed by dbAfter
// without a step.
func checkDatabaseFault(t *testing.T, where string, p *Plan, i int) {
	t.Helper()
	s := p.Steps[i]
	if s.For < dbMin || s.For > dbMax || s.Phase != phaseDatabase {
		t.Fatalf("%s: step %d (%v): want %v-%v [%s]", where, i, s, dbMin, dbMax, phaseDatabase)
	}
	for j := i - 1; j >= 0 && p.Steps[j].At > s.At-dbLeadIn; j-- {
		if h := p.Steps[j]; h.At != s.At-dbLeadIn || h.Phase != phaseDatabase || kinds[h.Kind].heal != 0 || kinds[h.Kind].instant {
			t.Fatalf("%s: step %d (%v) in the %v before the db-unavailable of step %d", where, j, h, dbLeadIn, i)
		}
	}
	if i+2*NumEndpoints > len(p.Steps) {
		t.Fatalf("%s: db-unavailable of step %d not healed", where, i)
	}
	for e := range NumEndpoints {
		f, h := p.Steps[i+e], p.Steps[i+NumEndpoints+e]
		if f.Kind != KindDatabaseUnavailable || f.Endpoint != e || f.At != s.At || f.For != s.For {
			t.Fatalf("%s: step %d (%v) in the db-unavailable of step %d", where, i+e, f, i)
		}
		if h.Kind != KindFrontendPass || h.Endpoint != e || h.At != s.At+s.For || h.Phase != phaseDatabase {
			t.Fatalf("%s: step %d (%v) heals the db-unavailable of step %d", where, i+NumEndpoints+e, h, i)
		}
	}
	if n := i + 2*NumEndpoints; n < len(p.Steps) && p.Steps[n].At < s.At+s.For+dbAfter {
		t.Fatalf("%s: step %d (%v) within %v after the db-unavailable of step %d healed", where, n, p.Steps[n], dbAfter, i)
	}
}

// TestPlanDrawsDatabaseFaults checks that runs long enough draw database-wide faults, with
// frontends only, and not so often that they take the run over.
func TestPlanDrawsDatabaseFaults(t *testing.T) {
	count := func(p *Plan) int {
		n := 0
		for _, s := range p.Steps {
			if s.Kind == KindDatabaseUnavailable && s.Endpoint == 0 {
				n++
			}
		}
		return n
	}
	total := 0
	for seed := uint64(1); seed <= 20; seed++ {
		p, err := NewPlan(seed, 30*time.Minute, true)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, p)
		n := count(p)
		total += n
		if busy := time.Duration(n) * (dbLeadIn + dbMax + dbAfter); busy > p.Duration/3 {
			t.Errorf("seed %d: %d db-unavailable phases take up to %v of %v", seed, n, busy, p.Duration)
		}
		q, _ := NewPlan(seed, 30*time.Minute, false)
		if count(q) != 0 {
			t.Errorf("seed %d: db-unavailable without frontends", seed)
		}
	}
	if total < 20*3 {
		t.Errorf("%d db-unavailable phases in 20 plans of 30 minutes, want at least 3 each on average", total)
	}
}
