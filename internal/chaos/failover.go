package chaos

import (
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// How fast the client recovers (issue 43): for every fault that makes an endpoint unusable,
// the time from its start to the arrival of each affected group's first successful call on
// another endpoint (the failover), and from its heal to the arrival of the group's first
// successful call back on it (the switch-back; for a member of a tier, to its full share of
// the tier's calls). The frontends
// see which group each application call belongs to (groupHeader) and report its success here
// (failoverWatch.served); the executor tells when faults start and heal.

// groupHeader carries the group of each of the load's calls to the frontends (the Spanner
// client keeps the caller's outgoing metadata on every RPC of a call: see heavyQueryHeader).
const groupHeader = "x-chaos-group"

const (
	// shareBucket is the resolution of the tiered group's successes per endpoint, from which
	// a member's return to its full share is found.
	shareBucket = 100 * time.Millisecond
	// shareWindow is the window over which a member's share of its tier is measured, and
	// shareMin the least calls of the tier in it for the share to mean anything.
	shareWindow = time.Second
	shareMin    = 5
	// fullShare is a member's full share of a tier of two as issue 40 states it (35-65%):
	// each member at least 35% of the tier's calls.
	fullShare = 0.35
)

// unusable reports whether fault f makes its endpoint unusable (issue 43's kinds: kill,
// blackhole, UNAVAILABLE on a live connection, hang, brownout, connections that die young, a
// tier member's death); prev is the endpoint's fault on that layer before it, so that only the
// first flap-down of a member flap starts one.
func unusable(f, prev Fault) bool {
	switch f.Kind {
	case KindDown, KindBlackhole, KindSilentBlackhole, KindDieYoung, KindFrontendUnavailable, KindFrontendHang, KindFrontendBrownout:
		return true
	case KindFrontendPartial:
		return f.Fraction >= hardPartial
	case KindFlapDown:
		return !prev.active()
	}
	return false
}

// foKind is the row of the failover table a fault is counted in.
func foKind(f Fault) string {
	switch f.Kind {
	case KindFlapDown:
		return "member-flap" // from its first down, and back from its final up
	case KindFrontendPartial:
		return "fe-partial(>=50%)"
	}
	return f.Kind.String()
}

// episode is one fault that made an endpoint unusable, seen from one group whose calls it
// served when it began.
type episode struct {
	kind     string
	fault    Fault
	endpoint int
	group    int
	tiered   bool // the group's tier spreads its calls (the share is measured on the way back)
	start    time.Time
	heal     time.Time // zero: not healed before the run ended
	// elsewhere is when the first of the group's calls that succeeded on another endpoint
	// arrived at that endpoint's frontend, at or after start (the earliest arrival of the
	// successes reported); zero: none. The time the backend then took to answer it is not
	// the client's (on the emulator 0.1 s to 1 s and more after an outage): elsewhereAnswered
	// is when that call succeeded, for the report; elsewhereFirst is when the first of them
	// to be answered was (the end of the time had it been measured to an answer).
	elsewhere, elsewhereAnswered, elsewhereFirst time.Time
	// back is when the first of the group's calls that succeeded on endpoint arrived there,
	// at or after heal (watched only when the heal made it the group's first healthy endpoint
	// again: backWatched); zero: none. backAnswered is when that call succeeded, backFirst
	// when the first of them to be answered was.
	back, backAnswered, backFirst time.Time
	backWatched                   bool
	// backCensored: the heal left the endpoint where the group's calls belong, but with a
	// fault on its other layer: its way back is not measured, and counts as censored.
	backCensored bool
	// callsAtStart and callsAtHeal are the group's calls ended by then (load.groupCalls).
	callsAtStart, callsAtHeal int64
	// ejectedUntil is when the ejection time of the endpoint ended, when health had ejected it
	// before the fault began (for an earlier fault of its own) and had not readmitted it by
	// the heal, and that time ended after the heal (ejectedAtHeal); zero otherwise.
	ejectedUntil time.Time
}

// ejectedAtHeal sets each healed episode's ejectedUntil from the health events evs (in time
// order): the end of the ejection time of its endpoint's latest ejection begun before the
// fault, when no readmission came between it and the heal and it ends after the heal. Health
// keeps an ejected endpoint out of service until its ejection time is over and a probe
// readmits it (docs/health.md; the time grows with each ejection of the endpoint, up to
// MaxEjectionTime), whatever the next fault: the way back from that fault cannot begin before.
// The probe and the reconnection after it stay in the way back's bound. In the sixth emulator
// hour (seed 827901653, +538.8 s) e1 was ejected for 4 s for a frontend's UNAVAILABLE, an
// outage of every endpoint began 0.2 s later and healed at +540.5 s, and default came back
// to e1 0.1 s after its readmission at +542.8 s: 2.45 s after the outage's heal. A false
// ejection is the justified-ejection row's to count. Faults the client detects by ejection
// are left out: their bound has the ejection time in it (ejectionReadmit).
func ejectedAtHeal(eps []episode, evs []healthEvent) {
	for i := range eps {
		ep := &eps[i]
		if ep.heal.IsZero() || detectionOf(ep.fault.Kind) == byEjection {
			continue
		}
		name := endpointName(ep.endpoint)
		var out *healthEvent // the latest ejection with no readmission since; nil: none
		for k := range evs {
			ev := &evs[k]
			if ev.endpoint != name || ev.at.After(ep.heal) {
				continue
			}
			if ev.ejected {
				out = ev
			} else {
				out = nil
			}
		}
		if out != nil && out.at.Before(ep.start) && out.until.After(ep.heal) {
			ep.ejectedUntil = out.until
		}
	}
}

// failoverWatch follows the episodes: the executor opens them (after) and the frontends close
// their watches (served). Safe for concurrent use.
type failoverWatch struct {
	topo *topology
	load *load // nil until the load starts (set by begin)

	mu       sync.Mutex // guards the fields below
	start    time.Time
	episodes []*episode
	// tierBuckets counts the tiered group's successes per endpoint per shareBucket from start.
	tierBuckets [NumEndpoints][]int32
}

// begin starts the watch at t0 with the load whose groups' calls it counts.
func (w *failoverWatch) begin(t0 time.Time, l *load) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.start, w.load = t0, l
}

// served is called by endpoint e's frontend for each of the application's calls that
// succeeded: arrived at arrival, its group named by group.
func (w *failoverWatch) served(e int, group string, arrival time.Time) {
	g := slices.Index(groupNames[:], group)
	if g < 0 {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.start.IsZero() || arrival.Before(w.start) {
		return
	}
	if g == tieredGroup {
		b := int(arrival.Sub(w.start) / shareBucket)
		for len(w.tierBuckets[e]) <= b {
			w.tierBuckets[e] = append(w.tierBuckets[e], 0)
		}
		w.tierBuckets[e][b]++
	}
	for _, ep := range w.episodes {
		if ep.group != g {
			continue
		}
		if e != ep.endpoint && !arrival.Before(ep.start) {
			if ep.elsewhere.IsZero() || arrival.Before(ep.elsewhere) {
				ep.elsewhere, ep.elsewhereAnswered = arrival, now
			}
			if ep.elsewhereFirst.IsZero() {
				ep.elsewhereFirst = now
			}
		}
		if ep.backWatched && e == ep.endpoint && !arrival.Before(ep.heal) {
			if ep.back.IsZero() || arrival.Before(ep.back) {
				ep.back, ep.backAnswered = arrival, now
			}
			if ep.backFirst.IsZero() {
				ep.backFirst = now
			}
		}
	}
}

// groupOf returns the group named in the call's groupHeader, or "".
func groupOf(ss grpc.ServerStream) string {
	md, _ := metadata.FromIncomingContext(ss.Context())
	if v := md.Get(groupHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

// after is called once step s was applied at at; prev is the plan's state before it and
// current the groups' current endpoints (indexes, -1 for none) just before it. A fault that
// makes an endpoint unusable opens an episode for every group whose calls it served (its
// current endpoint; for a tiered group, a member of its current tier) and that keeps a healthy
// endpoint; a heal of that endpoint's layer closes them, and watches the way back of each
// group for which it is the first healthy endpoint again (a member of its current tier).
func (w *failoverWatch) after(s Step, at time.Time, prev State, current [numGroups]int) {
	if w == nil || s.Endpoint < 0 {
		return
	}
	info := kinds[s.Kind]
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.load == nil {
		return
	}
	e := s.Endpoint
	prevFault := prev.TCP[e]
	if info.layer == layerFrontend {
		prevFault = prev.Frontend[e]
	}
	if info.heal != 0 && unusable(s.Fault, prevFault) {
		for g := range numGroups {
			tiered := groupTiers[g] != nil
			serves := current[g] == e
			if tiered {
				serves = slices.Contains(prev.currentTier(g), e)
			}
			if !serves || !s.After.groupHealthy(g) {
				continue
			}
			w.episodes = append(w.episodes, &episode{kind: foKind(s.Fault), fault: s.Fault, endpoint: e, group: g, tiered: tiered,
				start: at, callsAtStart: w.load.groupCalls[g].Load()})
		}
		return
	}
	if info.heal != 0 || info.instant || s.Kind == KindReconfigure {
		return
	}
	// A heal of e's layer (info.heal == 0): the episodes of faults on that layer end.
	for _, ep := range w.episodes {
		if ep.endpoint != e || !ep.heal.IsZero() || kinds[ep.fault.Kind].layer != info.layer {
			continue
		}
		ep.heal, ep.callsAtHeal = at, w.load.groupCalls[ep.group].Load()
		// The docs' bound for the way back is an endpoint's that works again: one with a
		// fault still in force on either layer (a frontend fault on an endpoint whose TCP
		// path healed, a partial failure that may eject it, a slow link) is not watched,
		// and counts as censored.
		belongs := firstHealthy(s.After, ep.group) == e
		if ep.tiered {
			belongs = slices.Contains(s.After.currentTier(ep.group), e)
		}
		ep.backWatched = belongs && s.After.faultFree(e)
		ep.backCensored = belongs && !ep.backWatched
	}
}

// firstHealthy returns group g's first healthy endpoint in s, or -1.
func firstHealthy(s State, g int) int {
	for _, e := range s.Groups[g] {
		if s.healthy(e) {
			return e
		}
	}
	return -1
}

// collect returns the episodes and the tiered group's successes per bucket; call it once the
// load stopped.
func (w *failoverWatch) collect() ([]episode, [NumEndpoints][]int32, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]episode, len(w.episodes))
	for i, ep := range w.episodes {
		out[i] = *ep
	}
	var b [NumEndpoints][]int32
	for e := range b {
		b[e] = append([]int32(nil), w.tierBuckets[e]...)
	}
	return out, b, w.start
}
