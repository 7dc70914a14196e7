package chaos

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// executor applies the plan's steps at their times and records when it did.
type executor struct {
	plan *Plan
	topo *topology
	gme  *spannerme.GCPMultiEndpoint
	out  io.Writer

	mu       sync.Mutex // guards timeline.steps (appended) and errs
	timeline faultTimeline
	errs     []string
	// db follows the database-wide faults (nil without frontends).
	db *dbWatch
	// w40 dates issue 40's overloads (nil in tests that build an executor alone).
	w40 *issue40Watch
}

// state returns the state in force now.
func (x *executor) state() State {
	x.mu.Lock()
	defer x.mu.Unlock()
	if n := len(x.timeline.steps); n > 0 {
		return x.timeline.steps[n-1].step.After
	}
	return x.timeline.initial
}

// run applies every step at start + its At, in order. When ctx ends first it heals what is
// in force and returns how long the schedule ran; it returns 0 after the whole schedule.
func (x *executor) run(ctx context.Context, start time.Time) (interrupted time.Duration) {
	for _, s := range x.plan.Steps {
		select {
		case <-time.After(time.Until(start.Add(s.At))):
		case <-ctx.Done():
			x.healNow(start)
			return max(time.Since(start), time.Nanosecond)
		}
		x.apply(start, s)
	}
	return 0
}

// apply performs s and records it.
func (x *executor) apply(start time.Time, s Step) {
	var err error
	x.db.before(s)
	prev, current := x.state(), x.currentEndpoints(s)
	if s.Kind == KindReconfigure {
		err = x.gme.UpdateMultiEndpoints(x.topo.options(s.Groups, RecoveryTimeout, SwitchingDelay))
	} else {
		err = x.topo.apply(s)
	}
	at := time.Now()
	x.mu.Lock()
	x.timeline.steps = append(x.timeline.steps, applied{at: at, step: s})
	if err != nil {
		x.errs = append(x.errs, fmt.Sprintf("%s: %v", s, err))
	}
	x.mu.Unlock()
	x.db.after(s, at)
	x.w40.after(s, at)
	x.topo.fo.after(s, at, prev, current)
	line := fmt.Sprintf("%7.1fs ** %s", at.Sub(start).Seconds(), s)
	if err != nil {
		line += fmt.Sprintf(" FAILED: %v", err)
	}
	fmt.Fprintln(x.out, line)
}

// currentEndpoints returns each group's current endpoint (an index, -1 for none) before a
// fault step that may start a failover (see failoverWatch.after); all -1 for other steps.
func (x *executor) currentEndpoints(s Step) [numGroups]int {
	cur := [numGroups]int{-1, -1, -1}
	if s.Endpoint < 0 || kinds[s.Kind].heal == 0 {
		return cur
	}
	for _, g := range x.gme.Status().Groups {
		if i := slices.Index(groupNames[:], g.Name); i >= 0 {
			for e := range NumEndpoints {
				if x.topo.addr(e) == g.Current {
					cur[i] = e
				}
			}
		}
	}
	return cur
}

// healNow heals every fault in force, at once (the run was interrupted).
func (x *executor) healNow(start time.Time) {
	s := x.state()
	if f := s.Database; f.active() {
		s.Database = Fault{}
		x.apply(start, Step{Kind: kinds[f.Kind].heal, Endpoint: -1, Phase: "interrupted", After: s})
	}
	for e := range NumEndpoints {
		if f := s.TCP[e]; f.active() {
			s.TCP[e] = Fault{}
			x.apply(start, Step{Kind: kinds[f.Kind].heal, Endpoint: e, Phase: "interrupted", After: s})
		}
		if f := s.Frontend[e]; f.active() {
			s.Frontend[e] = Fault{}
			x.apply(start, Step{Kind: kinds[f.Kind].heal, Endpoint: e, Phase: "interrupted", After: s})
		}
	}
}
