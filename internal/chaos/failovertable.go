package chaos

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// The bounds of the failover table: what the docs promise for each kind of fault, with the
// run's settings (RecoveryTimeout 500ms, SwitchingDelay 1s without jitter, ReconnectMaxDelay
// 250ms, MinConnectTimeout 1s, healthSettings, the default brownout settings, tierSlowStart).
const (
	// oneConnect is one reconnection: the reconnect backoff's most (ReconnectMaxDelay) and
	// one connection attempt's most (MinConnectTimeout).
	oneConnect = 250*time.Millisecond + time.Second
	// youngDwell is what an endpoint whose connections died young adds to a reconnection:
	// the jitter of its backoff's last wait (20% of ReconnectMaxDelay) and the dwell, 500ms,
	// before it is available (internal/pool young.go).
	youngDwell = 50*time.Millisecond + 500*time.Millisecond
	// brownoutDetection is how long a brownout takes to show: the Window, and two latency
	// samples (BrownoutSettings.ProbeInterval, 2s) to confirm it (docs/health.md, F26:
	// "Window + 2 samples + SwitchingDelay").
	brownoutDetection = brownoutWindow + 2*2*time.Second
	// ejectionReadmit is the longest an ejected endpoint waits after its fault healed before a
	// probe readmits it: MaxEjectionTime, then a ProbeInterval (docs/health.md).
	ejectionReadmit = 20*time.Second + time.Second
	// never stands for a failover or a switch-back that did not come within its bound while it
	// should have.
	never = time.Duration(math.MaxInt64)
)

// detection is how kind k's fault shows to the client: by connectivity, by the calls'
// outcomes (ejection), or by latency (brownout).
type detection int

const (
	byConnectivity detection = iota
	byEjection
	byLatency
)

func detectionOf(k Kind) detection {
	switch k {
	case KindSilentBlackhole, KindFrontendUnavailable, KindFrontendHang, KindFrontendPartial:
		return byEjection
	case KindFrontendBrownout:
		return byLatency
	}
	return byConnectivity // down, blackhole, die-young, a member flap's down
}

// failoverBound is the docs' bound from a fault's start to the arrival of the affected group's
// first successful call elsewhere: RecoveryTimeout plus one connect (connectivity;
// docs/failure-semantics.md, Failover); the ejection's detection window, silentDetection
// (docs/failure-semantics.md, Silent death; docs/health.md); the brownout's Window and its
// two samples, plus RecoveryTimeout (docs/health.md, Brownout).
func failoverBound(k Kind) time.Duration {
	switch detectionOf(k) {
	case byEjection:
		return silentDetection
	case byLatency:
		return brownoutDetection + RecoveryTimeout
	}
	return RecoveryTimeout + oneConnect
}

// backBound is the docs' bound from the heal to the arrival of the first successful call back:
// the endpoint usable again (one connect, and for connections that died young the backoff's
// jitter and the dwell; the ejection's end and a probe; the brownout's Window and two
// samples), then SwitchingDelay (no jitter in the run: Settings.SwitchingJitter 0); for a tier member,
// its slow start (tierSlowStart) and the window in which its share is measured instead.
func backBound(k Kind, tiered bool) time.Duration {
	usable := oneConnect
	if k == KindDieYoung {
		// Its pool backs off (the wait's most: ReconnectMaxDelay, +20% of jitter) and is
		// usable after the dwell (docs/channels.md, "Connections that die young").
		usable += youngDwell
	}
	switch detectionOf(k) {
	case byEjection:
		usable = ejectionReadmit
	case byLatency:
		usable = brownoutDetection
	}
	if tiered {
		return usable + tierSlowStart + shareWindow
	}
	return usable + SwitchingDelay
}

// FailoverRow is one row of the failover table: one kind of fault (a tier's episodes apart).
type FailoverRow struct {
	// Kind is the fault's kind, with " [tier]" for the tiered group's episodes.
	Kind string
	// Failover are the times from the fault's start to the arrival of the group's first
	// successful call on another endpoint; Back from the heal to that of its first successful
	// call back on the endpoint (a tier: the member's full share). A time that never came
	// while it should have is never (counted above any bound).
	Failover, Back []time.Duration
	// FailoverBound and BackBound are the docs' bounds for the kind.
	FailoverBound, BackBound time.Duration
	// HealedFirst counts the faults that healed before the group moved (too short to need a
	// failover); Censored the times that could not be measured (the group lost every
	// healthy endpoint, its configuration or the endpoint's state changed first, or the run
	// ended).
	HealedFirst, Censored int
	// AnsweredLate lists the times within their bound that would not be if they ended at the
	// group's first answer there rather than at its first success's arrival: the backend's
	// time, left out, made the difference (the episode, both times and the bound). A tier's
	// way back is never listed: its share windows count calls by arrival.
	AnsweredLate []string
	// Calls and Lost: the group's calls that ended from the fault's start to its heal, and
	// those of them that failed while the group had another usable endpoint.
	Calls, Lost int64
	// BackOver describes each way back over BackBound, the longest included, in the order
	// measured: the episode and its time (the invariant lists them when more than one).
	BackOver []string
	// WorstFailover and WorstBack describe the episode of the longest time measured (its
	// endpoint, when it started from the run's start, and the faults in force then), for
	// the invariant's details.
	WorstFailover, WorstBack string
	// worstBack is the episode of WorstBack, and worstBackEnd when its time ended (its
	// success back, or the bound's end for one that never came): for switchesOfWorst.
	worstBack    episode
	worstBackEnd time.Time
	// worstBackSwitches lists the group's switches during WorstBack (switchesOfWorst).
	worstBackSwitches string
	// worstBackTrace describes a tier's WorstBack step by step (traceWorst); nil otherwise.
	worstBackTrace []string
}

// maxTraceLines caps the lines of a way back's trace in the report: half from its start, half
// from its end.
const maxTraceLines = 24

// traceWorst sets each tier row's worstBackTrace from the tier trace's samples and the tiered
// group's successes (buckets, from t0).
func traceWorst(rows []FailoverRow, samples []tierSample, buckets [NumEndpoints][]int32, t0 time.Time) {
	for i := range rows {
		r := &rows[i]
		if r.WorstBack == "" || !r.worstBack.tiered {
			continue
		}
		tr := traceOf(r.worstBack, samples, buckets, t0, r.worstBackEnd)
		if n := len(tr); n > maxTraceLines {
			// Its start (the member's return) and its end (where it reached its share).
			tr = slices.Concat(tr[:maxTraceLines/2], []string{fmt.Sprintf("(%d lines left out)", n-maxTraceLines)}, tr[n-maxTraceLines/2:])
		}
		r.worstBackTrace = tr
	}
}

// describe says where and when episode ep was, and what else was in force at instant at:
// "e1 at +123.4s (in force: e1:down e2:fe-latency)".
func describe(ep episode, tl *faultTimeline, at time.Time) string {
	states := tl.during(at, at)
	return fmt.Sprintf("%s at +%.1fs (in force: %s)", endpointName(ep.endpoint), at.Sub(tl.start).Seconds(), states[len(states)-1].faults())
}

// answeredLater says how long after its arrival the first success that ended a time was
// answered (the backend's part, not counted): "; answered 0.31s after its arrival"; "" when
// it did not come.
func answeredLater(arrival, answered time.Time) string {
	if arrival.IsZero() || answered.IsZero() {
		return ""
	}
	return fmt.Sprintf("; answered %.2fs after its arrival", answered.Sub(arrival).Seconds())
}

// lateBy is an AnsweredLate line's figures: the time to the first success's arrival, to the
// first answer, and the bound.
func lateBy(arrived, answered, bound time.Duration) string {
	return fmt.Sprintf(": %s to the arrival, %s to the first answer, bound %v", fmtDur(arrived), fmtDur(answered), bound)
}

// percentile returns the p-th percentile (nearest rank) of sorted ds, 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// overBound reports whether the p99 of ds passes bound.
func overBound(ds []time.Duration, bound time.Duration) bool {
	return len(ds) > 0 && percentile(ds, 99) > bound
}

// otherHealthy reports whether group g lists a healthy endpoint other than e in s.
func otherHealthy(s State, g, e int) bool {
	return slices.ContainsFunc(s.Groups[g], func(o int) bool { return o != e && s.healthy(o) })
}

// preferred reports whether e is where group g's calls belong in s: its first healthy
// endpoint, or for a tiered group a member of its current tier.
func preferred(s State, g, e int, tiered bool) bool {
	if tiered {
		return slices.Contains(s.currentTier(g), e) && s.faultFree(e)
	}
	return firstHealthy(s, g) == e && s.faultFree(e)
}

// failoverTable turns the episodes into the table's rows, in the order of the kinds. tl is the
// run's timeline, failures the load's failed calls (classified), buckets the tiered group's
// successes per shareBucket from t0, stop when the load stopped, sw the groups' switches in
// time order.
func failoverTable(eps []episode, tl *faultTimeline, failures []classified, buckets [NumEndpoints][]int32, t0, stop time.Time, sw []groupSwitch) []FailoverRow {
	rows := map[string]*FailoverRow{}
	for _, ep := range eps {
		key := ep.kind
		if ep.tiered {
			key += " [tier]"
		}
		r := rows[key]
		if r == nil {
			r = &FailoverRow{Kind: key, FailoverBound: failoverBound(ep.fault.Kind), BackBound: backBound(ep.fault.Kind, ep.tiered)}
			rows[key] = r
		}
		switch d, ok, healed := failoverTime(ep, tl, r.FailoverBound); {
		case ok:
			if len(r.Failover) == 0 || d > slices.Max(r.Failover) {
				r.WorstFailover = describe(ep, tl, ep.start) + answeredLater(ep.elsewhere, ep.elsewhereAnswered)
			}
			r.Failover = append(r.Failover, d)
			if d != never && d <= r.FailoverBound && ep.elsewhereFirst.Sub(ep.start) > r.FailoverBound {
				r.AnsweredLate = append(r.AnsweredLate, "failover of "+describe(ep, tl, ep.start)+lateBy(d, ep.elsewhereFirst.Sub(ep.start), r.FailoverBound))
			}
		case healed:
			r.HealedFirst++
		default:
			r.Censored++
		}
		if ep.backCensored {
			r.Censored++
		}
		if ep.backWatched {
			if d, from, ok := backTimeFrom(ep, tl, buckets, t0, stop, r.BackBound, sw); ok {
				if d > r.BackBound {
					line := describe(ep, tl, ep.heal) + " " + fmtDur(d)
					switch {
					case from.Equal(ep.ejectedUntil):
						line += fmt.Sprintf(" from +%.1fs (the end of its ejection)", from.Sub(tl.start).Seconds())
					case from.After(ep.heal):
						line += fmt.Sprintf(" from +%.1fs (a cut, or a hold's end)", from.Sub(tl.start).Seconds())
					}
					r.BackOver = append(r.BackOver, line)
				}
				if len(r.Back) == 0 || d > slices.Max(r.Back) {
					r.WorstBack = describe(ep, tl, ep.heal)
					if !ep.tiered {
						r.WorstBack += answeredLater(ep.back, ep.backAnswered)
					}
					end := d
					if d == never {
						end = r.BackBound
					}
					r.worstBack, r.worstBackEnd = ep, from.Add(end)
				}
				r.Back = append(r.Back, d)
				if !ep.tiered && d != never && d <= r.BackBound && ep.backFirst.Sub(from) > r.BackBound {
					r.AnsweredLate = append(r.AnsweredLate, "way back of "+describe(ep, tl, ep.heal)+lateBy(d, ep.backFirst.Sub(from), r.BackBound))
				}
			} else {
				r.Censored++
			}
		}
		if !ep.heal.IsZero() {
			r.Calls += ep.callsAtHeal - ep.callsAtStart
			r.Lost += int64(lostIn(ep, tl, failures))
		}
	}
	out := make([]FailoverRow, 0, len(rows))
	for _, r := range rows {
		slices.Sort(r.Failover)
		slices.Sort(r.Back)
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// failoverTime returns the episode's failover time. ok is false when it is not measured:
// healed is set when the fault healed first (within the bound, or with the group without
// another healthy endpoint meanwhile); otherwise the group lost every other healthy endpoint
// first, the run ended, or a failover longer than the bound met a fault on the group's next
// endpoint, hard or soft (a partial failure, a hang, a slow link: its own detection's time).
// A group that kept another healthy endpoint for longer than the bound without a success
// there, its next endpoint fault-free meanwhile, counts as never.
func failoverTime(ep episode, tl *faultTimeline, bound time.Duration) (d time.Duration, ok, healed bool) {
	end := ep.elsewhere
	if end.IsZero() || (!ep.heal.IsZero() && ep.heal.Before(end)) {
		end = ep.heal
		if end.IsZero() {
			return 0, false, false
		}
		covered, nextFaulty := end.Sub(ep.start) > bound, false
		for _, s := range tl.during(ep.start, ep.start.Add(min(bound, end.Sub(ep.start)))) {
			covered = covered && otherHealthy(s, ep.group, ep.endpoint)
			nextFaulty = nextFaulty || !nextFaultFree(s, ep.group, ep.endpoint)
		}
		switch {
		case covered && nextFaulty:
			return 0, false, false // the next endpoint's own fault had its share in the wait
		case covered:
			return never, true, false
		}
		return 0, false, true
	}
	nextFaulty := false
	for _, s := range tl.during(ep.start, end) {
		if !otherHealthy(s, ep.group, ep.endpoint) {
			return 0, false, false
		}
		nextFaulty = nextFaulty || !nextFaultFree(s, ep.group, ep.endpoint)
	}
	if nextFaulty && end.Sub(ep.start) > bound {
		// The group's next endpoint had a fault of its own meanwhile (one the client may
		// learn only by its own detection: a hang, a silent blackhole): the time is that
		// fault's too, not this kind's.
		return 0, false, false
	}
	return end.Sub(ep.start), true, false
}

// nextFaultFree reports whether the first endpoint other than e that group g lists in s, the
// one its calls go to when e fails, has no fault in force on either layer (the docs' bound
// for a failover is one to an endpoint that works: a partial failure, a hang or a slow link
// there adds its own detection's time).
func nextFaultFree(s State, g, e int) bool {
	for _, o := range s.Groups[g] {
		if o != e {
			return s.faultFree(o)
		}
	}
	return false
}

// backTime returns the episode's switch-back time: to the first success back (a tier: the end of
// the first window of shareWindow in which the member carried fullShare of its tier's calls),
// if the endpoint stayed where the group's calls belong until then (a time over the bound:
// for the whole bound); never when it stayed so for the whole bound, within the run, without
// one; ok false otherwise. A cut of the endpoint's connections within that span (cutAfter)
// starts the way back again, and so does, for a time over its bound, the end of a hold of
// the group's calls elsewhere (heldUntil); a way back that came before that hold ended is
// not timed (ok false). sw: the groups' switches, in time order.
func backTime(ep episode, tl *faultTimeline, buckets [NumEndpoints][]int32, t0, stop time.Time, bound time.Duration, sw []groupSwitch) (time.Duration, bool) {
	d, _, ok := backTimeFrom(ep, tl, buckets, t0, stop, bound, sw)
	return d, ok
}

// backTimeFrom is backTime, with the instant the time is measured from: the heal, the last
// cut or the end of a hold.
func backTimeFrom(ep episode, tl *faultTimeline, buckets [NumEndpoints][]int32, t0, stop time.Time, bound time.Duration, sw []groupSwitch) (time.Duration, time.Time, bool) {
	back := ep.back
	if ep.tiered {
		back = shareBack(ep, buckets, t0)
	}
	// The endpoint must stay where the group's calls belong to the time's end or, for a time
	// over its bound, to the bound: a fault after the bound does not excuse a late way back.
	// An endpoint that health had ejected before the fault, for a fault of its own, is out of
	// service to the end of its ejection time (ejectedAtHeal): the time is measured from
	// there, unless the group came back to it before.
	from := ep.heal
	if ep.ejectedUntil.After(from) && (back.IsZero() || back.After(ep.ejectedUntil)) {
		from = ep.ejectedUntil
	}
	// excused: the part of the time after the group switched back during which a hold
	// elsewhere kept every worker busy (heldUntil); it extends the span judged and is taken
	// off the time.
	var excused time.Duration
	span := func() time.Time {
		if u := from.Add(bound + excused); back.IsZero() || u.Before(back) {
			return u
		}
		return back
	}
	until, heldChecked := span(), false
	for {
		if c, ok := cutAfter(ep, tl, from, until); ok {
			from, excused, heldChecked = c, 0, false
			until = span()
			continue
		}
		if !back.IsZero() && back.Sub(from) > bound && !heldChecked {
			heldChecked = true
			if h, backAt, ok := heldUntil(ep, tl, sw, from, bound); ok {
				if !back.After(h) {
					return 0, time.Time{}, false // the group's calls were held until it came
				}
				excused = h.Sub(backAt)
				until = span()
				continue
			}
		}
		break
	}
	if back.IsZero() && until.After(stop) {
		return 0, time.Time{}, false
	}
	for _, s := range tl.during(ep.heal, until) {
		if !preferred(s, ep.group, ep.endpoint, ep.tiered) {
			return 0, time.Time{}, false
		}
	}
	if back.IsZero() {
		return never, from, true
	}
	return back.Sub(from) - excused, from, true
}

// cutAfter returns the first reset or frontend restart of the healed endpoint in (from,
// until]: instant faults, which leave no state for preferred to see. The client loses the
// endpoint's connections and reconnects, and the way back starts again at the cut (a
// SwitchingDelay after the reconnection, or a tier member's slow start), a second way back
// inside the first that the bound of one heal has no term for: the time is measured from the
// last cut instead, against the same bound. (In the fourth emulator hour, e1 was reset 0.1 s
// and 0.8 s after its heal, and both groups switched back to it 2.3 s after the heal: 1.5 s
// after the second reset.)
func cutAfter(ep episode, tl *faultTimeline, from, until time.Time) (time.Time, bool) {
	for _, a := range tl.steps {
		if !a.at.After(from) || a.at.After(until) {
			continue
		}
		if (a.step.Kind == KindReset || a.step.Kind == KindFrontendRestart) && a.step.Endpoint == ep.endpoint {
			return a.at, true
		}
	}
	return time.Time{}, false
}

// groupSwitch is one change of a group's current endpoint (a SwitchEvent): group g's calls
// go to endpoint to from at on.
type groupSwitch struct {
	group, to int
	at        time.Time
}

// heldUntil returns when a hold of the group's calls ended, and when the group switched back,
// for a way back over its bound that the load, not the client, made late: the group switched
// back to the endpoint within the bound from from (the heal, or the last cut; a tier member:
// to its tier), and while the group's calls went to another endpoint (before that switch
// or, for a tier, during the ramp after it: for tierSlowStart the ramp still sends part of
// them to the tier it left; a member of the endpoint's own tier does not count) that
// endpoint had a fault that holds the calls sent to it (holds: a frontend hang, a silent
// blackhole). The load's workers are closed loops, each with one call in flight, so while
// they wait there none is free to make the call that would succeed on the endpoint,
// however soon the client switches back. A call sent into the hold at the last instant the
// group's calls went there is released at its deadline (heldDeadline), or sooner when the
// holding endpoint's connections are cut (release). Only a release after the switch back
// counts: before it, a worker was free when the client switched, and the rest is the
// client's time. The caller takes the time from the switch back to the release off the way
// back; a switch back later than the bound, or none, is the client's: no hold excuses it.
// (In the fourth emulator hour a silent blackhole of e3 0.1 s after tiered switched back
// held all six of the tier's workers.)
func heldUntil(ep episode, tl *faultTimeline, sw []groupSwitch, from time.Time, bound time.Duration) (end, backAt time.Time, ok bool) {
	// stints: where the group's calls went, from when to when.
	type stint struct {
		e       int
		in, out time.Time
	}
	cur, curIn := initialGroups[ep.group][0], tl.start
	var stints []stint
	for _, s := range sw {
		if s.group != ep.group {
			continue
		}
		if s.at.After(from) {
			if s.at.Sub(from) > bound {
				break
			}
			if s.to == ep.endpoint || (ep.tiered && sameTier(ep.group, s.to, ep.endpoint)) {
				backAt = s.at
				break
			}
		}
		stints = append(stints, stint{cur, curIn, s.at})
		cur, curIn = s.to, s.at
	}
	if backAt.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	last := backAt
	if ep.tiered {
		last = backAt.Add(tierSlowStart)
		if b := from.Add(bound); b.Before(last) {
			last = b
		}
	}
	stints = append(stints, stint{cur, curIn, last})
	deadline := heldDeadline(groupNames[ep.group], ep.tiered)
	for _, st := range stints {
		if st.e == ep.endpoint || (ep.tiered && sameTier(ep.group, st.e, ep.endpoint)) {
			continue
		}
		for _, h := range holdSpans(tl, st.e) {
			lo, hi := st.in, st.out
			if h.from.After(lo) {
				lo = h.from
			}
			if !h.to.IsZero() && h.to.Before(hi) {
				hi = h.to
			}
			if hi.Before(lo) {
				continue // the group's calls did not go there during this hold
			}
			rel := release(tl, st.e, h, hi, hi.Add(deadline))
			if rel.After(backAt) && rel.After(end) {
				end = rel
			}
		}
	}
	return end, backAt, !end.IsZero()
}

// release returns when the calls sent into hold h on endpoint e up to sent are released: at
// latest (their deadline), or sooner at the first cut of e's connections after sent: a
// silent blackhole's heal, or a step that drops e's connections (a reset, a frontend
// restart or partial reset, a down or flap, a blackhole, die-young). A frontend hang's heal
// alone releases nothing.
func release(tl *faultTimeline, e int, h holdSpan, sent, latest time.Time) time.Time {
	if h.cuts && !h.to.IsZero() && h.to.Before(latest) {
		latest = h.to
	}
	for _, a := range tl.steps {
		if !a.at.After(sent) || !a.at.Before(latest) {
			continue
		}
		if a.step.Endpoint == e && cutsConnections(a.step.Kind) {
			return a.at
		}
	}
	return latest
}

// cutsConnections reports whether a step of kind k drops its endpoint's live connections.
func cutsConnections(k Kind) bool {
	switch k {
	case KindDown, KindReset, KindBlackhole, KindFlapDown, KindDieYoung, KindFrontendRestart, KindFrontendPartialReset:
		return true
	}
	return false
}

// holdSpan is a span during which an endpoint held the calls sent to it (holds): from, to
// (zero: to the run's end); cuts says whether its heal cuts the connections, and so ends
// the calls it held (a silent blackhole's does; a frontend hang's does not).
type holdSpan struct {
	from, to time.Time
	cuts     bool
}

// holdSpans returns endpoint e's hold spans in tl, those of the frontend (a hang) and those
// of the TCP layer (a silent blackhole) apart.
func holdSpans(tl *faultTimeline, e int) []holdSpan {
	var out []holdSpan
	for _, tcp := range []bool{false, true} {
		held := func(s State) bool {
			if tcp {
				return holds(s.TCP[e])
			}
			return holds(s.Frontend[e])
		}
		open, start := held(tl.initial), tl.start
		for _, a := range tl.steps {
			switch h := held(a.step.After); {
			case h && !open:
				open, start = true, a.at
			case !h && open:
				out = append(out, holdSpan{start, a.at, tcp})
				open = false
			}
		}
		if open {
			out = append(out, holdSpan{start, time.Time{}, tcp})
		}
	}
	return out
}

// heldDeadline is how long a call of group's workers held at an endpoint takes to be
// released, for the way back to go on: the shortest deadline of its workers for a group
// without tiers (one free worker makes the first success back), the shareMin-th shortest
// for a tier (a share is judged on shareMin of the tier's calls).
func heldDeadline(group string, tiered bool) time.Duration {
	var ds []time.Duration
	for _, w := range workers {
		if w.group == group {
			ds = append(ds, w.deadline)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	if tiered && len(ds) >= shareMin {
		return ds[shareMin-1]
	}
	return ds[0]
}

// sameTier reports whether endpoints a and b are in one tier of group g (groupTiers).
func sameTier(g, a, b int) bool {
	for _, t := range groupTiers[g] {
		if slices.Contains(t, a) && slices.Contains(t, b) {
			return true
		}
	}
	return false
}

// holds reports whether f holds the calls in flight through its endpoint until their
// deadline.
func holds(f Fault) bool {
	return f.active() && (f.Kind == KindFrontendHang || f.Kind == KindSilentBlackhole)
}

// shareBack returns the end of the first window of shareWindow, from the heal on, in which the
// tier had at least shareMin successes and the member at least fullShare of them; zero when
// none did. A backend that answers the tier fewer than shareMin calls a second (the emulator
// after an outage of every endpoint) leaves no window to judge, and the time runs on: a
// window grown until it held shareMin calls was tried (888a18c) and dropped, since with 5
// calls and sliding starts a member at 20 % of its tier passed within 10 calls half of the
// time; the load keeps the tier enough calls instead (workers). The rule's power is the
// calls': in memory a window holds hundreds and a member held at 20 % never passes; a window
// of 5 to 7 calls (a backend answering a call a second) passes it once in 4 to 10.
func shareBack(ep episode, buckets [NumEndpoints][]int32, t0 time.Time) time.Time {
	var tier []int
	for _, t := range groupTiers[ep.group] {
		if slices.Contains(t, ep.endpoint) {
			tier = t
		}
	}
	per := int(shareWindow / shareBucket)
	at := func(e, b int) int {
		if b < len(buckets[e]) {
			return int(buckets[e][b])
		}
		return 0
	}
	n := 0
	for _, b := range buckets {
		n = max(n, len(b))
	}
	for b := int(ep.heal.Sub(t0)/shareBucket) + 1; b+per <= n; b++ {
		mine, all := 0, 0
		for i := b; i < b+per; i++ {
			mine += at(ep.endpoint, i)
			for _, e := range tier {
				all += at(e, i)
			}
		}
		if all >= shareMin && float64(mine) >= fullShare*float64(all) {
			return t0.Add(time.Duration(b+per) * shareBucket)
		}
	}
	return time.Time{}
}

// lostIn counts the group's failed calls that ended from the episode's start to its heal while
// the group had another usable endpoint throughout (the database's refusals are not the
// failover's).
func lostIn(ep episode, tl *faultTimeline, failures []classified) int {
	n := 0
	for _, f := range failures {
		if f.class == classOverload || f.group != groupNames[ep.group] || f.end.Before(ep.start) || f.end.After(ep.heal) {
			continue
		}
		ok := true
		for _, s := range tl.during(f.start, f.end) {
			ok = ok && otherHealthy(s, ep.group, ep.endpoint)
		}
		if ok {
			n++
		}
	}
	return n
}

// failoverInvariant is the row that fails when a kind's p99 passes its bound.
func failoverInvariant(rows []FailoverRow, frontends bool) Invariant {
	inv := Invariant{Name: "failover and switch-back p99 within each kind's bound"}
	if !frontends {
		inv.Status, inv.Result = NotChecked, "no frontends (-no-frontends): the frontends see which group each call is"
		return inv
	}
	n, m, over := 0, 0, 0
	var late []string
	for _, r := range rows {
		n += len(r.Failover)
		m += len(r.Back)
		for _, l := range r.AnsweredLate {
			late = append(late, r.Kind+": "+l)
		}
		if overBound(r.Failover, r.FailoverBound) {
			inv.Details = append(inv.Details, fmt.Sprintf("%s: failover p99 %s over its bound %v; the longest: %s", r.Kind, fmtDur(percentile(r.Failover, 99)), r.FailoverBound, r.WorstFailover))
		}
		if overBound(r.Back, r.BackBound) {
			inv.Details = append(inv.Details, fmt.Sprintf("%s: switch-back p99 %s over its bound %v; the longest: %s (healed)%s", r.Kind, fmtDur(percentile(r.Back, 99)), r.BackBound, r.WorstBack, r.worstBackSwitches))
			if len(r.BackOver) > 1 {
				inv.Details = append(inv.Details, fmt.Sprintf("%s: the %d ways back over its bound (healed, time): %s", r.Kind, len(r.BackOver), strings.Join(firstLines(r.BackOver, 8), "; ")))
			}
		}
	}
	over = len(inv.Details)
	inv.Status = Pass
	inv.Result = fmt.Sprintf("%d kinds, %d failovers and %d switch-backs measured; %d over their bound (the failover table above); %d within it only because a time ends at its first success's arrival, not its answer (listed, not failed)",
		len(rows), n, m, over, len(late))
	if over > 0 {
		inv.Status = Fail
	}
	for _, l := range firstLines(late, 10) {
		inv.Details = append(inv.Details, "within its bound at the arrival, not at the answer: "+l)
	}
	return inv
}

// fmtDur prints a table's time: seconds with 2 decimals, or "never".
func fmtDur(d time.Duration) string {
	if d == never {
		return "never"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// printFailover writes the failover table.
func printFailover(w io.Writer, rows []FailoverRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFailover: from a fault's start to the arrival of the affected group's first successful call on another endpoint; back: from its heal to that of its first successful call on it again\n")
	fmt.Fprintf(w, "(a tier: to the member's full share, %.0f%% of its tier's calls in %v, at least %d of them); lost: the group's calls from the start to the heal that failed while another endpoint was usable\n",
		100*fullShare, shareWindow, shareMin)
	fmt.Fprintf(w, "  %-24s %5s %7s %7s %7s %7s | %5s %7s %7s %7s %7s | %6s %8s %7s\n",
		"kind", "n", "p50", "p99", "max", "bound", "back", "p50", "p99", "max", "bound", "healed", "calls", "lost")
	cell := func(ds []time.Duration, bound time.Duration) string {
		if len(ds) == 0 {
			return fmt.Sprintf("%5d %7s %7s %7s %7s", 0, "-", "-", "-", fmt.Sprintf("%.1fs", bound.Seconds()))
		}
		flag := ""
		if overBound(ds, bound) {
			flag = "!"
		}
		return fmt.Sprintf("%5d %7s %7s %7s %7s", len(ds), fmtDur(percentile(ds, 50)), fmtDur(percentile(ds, 99))+flag, fmtDur(ds[len(ds)-1]), fmt.Sprintf("%.1fs", bound.Seconds()))
	}
	for _, r := range rows {
		lost := "-"
		if r.Calls > 0 {
			lost = fmt.Sprintf("%.2f%%", 100*float64(r.Lost)/float64(r.Calls))
		}
		fmt.Fprintf(w, "  %-24s %s | %s | %6d %8d %7s\n", r.Kind, cell(r.Failover, r.FailoverBound), cell(r.Back, r.BackBound), r.HealedFirst, r.Calls, lost)
	}
	fmt.Fprintf(w, "  (healed: faults that healed before the group moved; %s censored: the group had no other healthy endpoint, or changed, or the run ended first; ! p99 over the bound)\n",
		strings.TrimSpace(fmt.Sprint(censored(rows))))
	for _, r := range rows {
		if len(r.worstBackTrace) == 0 {
			continue
		}
		fmt.Fprintf(w, "  the longest way back of %s: %s, %s%s; per %v (A: available to the group, R: pool READY; ok: the tier's successes):\n",
			r.Kind, fmtDur(r.Back[len(r.Back)-1]), r.WorstBack, r.worstBackSwitches, traceEach)
		for _, l := range r.worstBackTrace {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

func censored(rows []FailoverRow) int {
	n := 0
	for _, r := range rows {
		n += r.Censored
	}
	return n
}

// switchesOfWorst tells, for each row's WorstBack, the switches of its group (evs, the run's
// switch events; name gives e1, e2, e3 for an address) from the heal to the end of that way
// back, each as "+249.9s e3->e1 (recovery)": where the time went (the group's move back, or a
// success that came late on an endpoint it was already on).
func switchesOfWorst(rows []FailoverRow, evs []spannerme.SwitchEvent, name func(string) string, tl *faultTimeline) {
	for i := range rows {
		r := &rows[i]
		if r.WorstBack == "" {
			continue
		}
		var moves []string
		for _, ev := range evs {
			if ev.Name == groupNames[r.worstBack.group] && !ev.At.Before(r.worstBack.heal) && !ev.At.After(r.worstBackEnd) {
				moves = append(moves, fmt.Sprintf("+%.1fs %s->%s (%v)", ev.At.Sub(tl.start).Seconds(), name(ev.From), name(ev.To), ev.Reason))
			}
		}
		if len(moves) == 0 {
			moves = []string{"none"}
		}
		r.worstBackSwitches = fmt.Sprintf("; %s's switches from the heal to +%.1fs: %s", groupNames[r.worstBack.group], r.worstBackEnd.Sub(tl.start).Seconds(), strings.Join(moves, ", "))
	}
}
