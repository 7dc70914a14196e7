// Package health decides, from call outcomes and probes, whether one endpoint is ejected: no
// longer available for calls although its connections may be up (docs/health.md;
// docs/design.md, "Health from call outcomes").
//
// The rules, in the terms of gRPC's outlier detection (gRFC A50) and Envoy's:
//
//  1. Calls are classified by Classify, and belong to a Class (reads, writes, session
//     management, other calls), each counted apart. A Success resets its class's
//     consecutive-failure count; a Failure adds to it and to the class's interval failures; a
//     Timeout makes the endpoint suspect; Ignore and ConnectionLost count for nothing (a lost
//     connection is connectivity's business, not health's).
//  2. ConsecutiveFailures failures in a row of one class eject the endpoint, whatever the
//     other classes do: an endpoint whose commits fail while its reads succeed (a gray
//     failure) is ejected.
//  3. Calls are counted per Interval (the counters restart at every interval and at
//     readmission). When at least MinimumCalls calls (successes plus failures) of one class
//     in the current interval are known and more than FailurePercentage percent of them
//     failed, the endpoint is ejected: checked at every failure and at the end of the
//     interval.
//  4. A Timeout makes the endpoint suspect and starts a probe at once (unless one is under
//     way, or one ended less than ProbeInterval/10 ago); the endpoint is ejected only if that
//     probe fails. A passing probe clears the suspicion. So slow calls with short deadlines
//     never eject an endpoint that answers probes.
//  5. An endpoint that had no successful call for a whole ProbeInterval is probed (a standby,
//     or an idle current endpoint); a failed probe ejects it. So does the failed probe that
//     Confirm starts when another endpoint of one of its groups is ejected: at once, or when
//     a probe under way (started before the ejection, or of another class) ends.
//  6. Ejection number n lasts BaseEjectionTime x n, at most max(BaseEjectionTime,
//     MaxEjectionTime) (A50). n is the multiplier: it grows by one per ejection and shrinks
//     by one after every whole Interval the endpoint spends not ejected.
//  7. When the ejection time is over, the endpoint is probed, and again every ProbeInterval
//     until a probe passes (and at once when its connection is ready again after a probe
//     that found none: Connected); the first probe that passes at or after the end of the
//     ejection time readmits it. These probes prove the class whose failures ejected it
//     (Options.Probe is told which): an endpoint whose commits failed while its reads passed
//     is readmitted only once the commit path answers, not by a probe that its reads would
//     pass. Without a Probe function it is readmitted when the ejection time is over (A50's
//     behaviour) and Timeouts never eject.
//  8. Outcomes keep being recorded while the endpoint is ejected (for Status), but eject
//     nothing more.
//
// Every duration comes from the injected clock; every timer is owned, stopped on Close, and
// carries a generation so that a superseded callback is a no-op.
package health

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/ordered"
)

// ErrProbeSkipped, given to ProbeDone, ends a probe without a verdict: it was not sent, or its
// result says nothing about the endpoint (the endpoint was not connected). An ejected
// endpoint is then probed again after ProbeInterval.
var ErrProbeSkipped = errors.New("health: probe skipped")

// Options configures a Detector.
type Options struct {
	// Config holds the thresholds; zero fields take Defaults.
	Config Config
	// Clock is the time source. Nil means the real clock.
	Clock clock.Clock
	// Probe, if not nil, starts probe number seq of the endpoint and returns at once; the
	// result must come back through ProbeDone(seq, ...). c is the class the probe must prove:
	// the class whose failures ejected the endpoint for the probes that may readmit it (rule
	// 7: an endpoint ejected because its writes failed is readmitted only once the write path
	// answers), Calls otherwise. It is called with no lock held, on
	// the goroutine that decided the probe (one reporting an outcome, or a timer's). At most
	// one probe is under way at a time.
	Probe func(seq uint64, c Class)
	// OnEvent, if not nil, receives every ejection and readmission, in order, one at a time,
	// with no lock held (it may call the Detector): on the goroutine that caused it or on one
	// already delivering events. Events still queued when Close is called are dropped.
	OnEvent func(Event)
}

// Detector tracks one endpoint's health. Create it with New. All methods are safe for
// concurrent use. Success and Ejected take no lock and allocate nothing.
type Detector struct {
	cfg     Config
	clock   clock.Clock
	probe   func(uint64, Class)
	onEvent func(Event)

	classes [numClasses]classCounts
	ejected atomic.Bool // mirrors out, for Ejected

	mu     sync.Mutex // guards every field below
	closed bool
	out    bool // ejected
	// The current or last ejection.
	ejectedAt, until time.Time
	reason           Reason
	class            Class // of the failures that caused it; Calls for Timeouts and ProbeFailed
	detail           string
	ejections        int
	multiplier       int
	suspect          bool
	// The probe under way (seq 0: none) and the last one that ended.
	probeSeq     uint64
	lastSeq      uint64
	probeStarted time.Time
	probeClass   Class // the class the probe under way proves
	lastProbeEnd time.Time
	// confirms: the classes of the Confirms that came while a probe that cannot answer them
	// was under way (started before them, or of another class), a bit per class; each is
	// probed, one after the other, once that one ends. Cleared by an ejection.
	confirms  uint8
	lastProbe ProbeResult
	// The counting interval; each class's counts are in classes.
	intervalStart time.Time
	timeouts      int64
	// successes at the last idle check (rule 5).
	successesAtCheck int64
	tickTimer        clock.Timer
	probeTimer       clock.Timer
	tickGen          uint64
	probeGen         uint64
	events           ordered.Queue[Event] // for OnEvent
}

// New returns a Detector whose endpoint is not ejected, and starts its interval timer and,
// with a Probe function, its idle-probe timer. Close stops them.
func New(o Options) *Detector {
	d := &Detector{cfg: o.Config.WithDefaults(), clock: o.Clock, probe: o.Probe, onEvent: o.OnEvent}
	if d.clock == nil {
		d.clock = clock.Real
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.startIntervalLocked(d.clock.Now())
	if d.probe != nil {
		d.armIdleProbeLocked()
	}
	return d
}

// Ejected reports whether the endpoint is ejected now. It takes no lock.
func (d *Detector) Ejected() bool { return d.ejected.Load() }

// classCounts are one class's counts.
type classCounts struct {
	// Written on the call path without the lock.
	successes   atomic.Int64 // successes since New
	consecutive atomic.Int64 // failures since the last success (or ejection, or readmission)
	// Guarded by the Detector's mu.
	successesAtStart int64 // successes when the interval began
	failures         int64 // in the interval
}

// callsLocked returns the class's calls in the interval: successes and failures.
func (c *classCounts) callsLocked() int64 {
	return c.successes.Load() - c.successesAtStart + c.failures
}

// Success records a call of class c that the backend answered (rule 1). It takes no lock
// and allocates nothing.
func (d *Detector) Success(c Class) {
	cc := &d.classes[c.index()]
	cc.successes.Add(1)
	if cc.consecutive.Load() != 0 {
		cc.consecutive.Store(0)
	}
}

// Record records the outcome of one call of class c to method (a gRPC method name, quoted
// in an ejection's Detail without its service); err is the call's error, quoted too. Ignore
// and ConnectionLost record nothing.
func (d *Detector) Record(c Class, method string, o Outcome, err error) {
	switch o {
	case Success:
		d.Success(c)
	case Failure:
		d.Failure(c, method, err)
	case Timeout:
		d.Timeout()
	}
}

// Failure records a call of class c to method whose path to the backend failed (rules 2 and
// 3).
func (d *Detector) Failure(c Class, method string, err error) {
	cc := &d.classes[c.index()]
	cc.consecutive.Add(1)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	cc.failures++
	// Read under mu: a readmission between the Add and the Lock reset the count, and the
	// failures before it happened while the endpoint was ejected (rule 8).
	n := cc.consecutive.Load()
	if !d.out {
		switch {
		case n >= int64(d.cfg.ConsecutiveFailures):
			d.ejectLocked(ConsecutiveFailures, c, fmt.Sprintf("%s: %d consecutive failures, the last: %v", failing(c, method), n, err))
		case d.overPercentageLocked(c):
			d.ejectLocked(FailurePercentage, c, failing(c, method)+": "+d.percentageDetailLocked(c, err))
		}
	}
	d.mu.Unlock()
	d.deliver()
}

// failing says which class fails, and the method: "writes failing (Commit)".
func failing(c Class, method string) string {
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		method = method[i+1:]
	}
	if method == "" {
		return c.String() + " failing"
	}
	return c.String() + " failing (" + method + ")"
}

// Timeout records a call whose deadline passed before any answer (rule 4).
func (d *Detector) Timeout() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.timeouts++
	var seq uint64
	switch {
	case d.out || d.probe == nil:
		// Nothing to decide, or nothing to decide with.
	case d.probeSeq != 0:
		d.suspect = true // the probe under way decides
	case d.lastProbeEnd.IsZero() || !d.clock.Now().Before(d.lastProbeEnd.Add(d.cfg.ProbeInterval/10)):
		d.suspect = true
		seq = d.startProbeLocked(Calls)
	default:
		// A probe ended a moment ago: the calls that keep timing out will make it suspect
		// again soon; this bounds the probes slow calls cause.
	}
	d.mu.Unlock()
	if seq != 0 {
		d.probe(seq, Calls)
	}
}

// Confirm asks whether the endpoint is still healthy because another endpoint of a group that
// lists it was just ejected for failures of class c: it is probed at once, with a probe of
// class c, unless it is ejected or there is no Probe function. A probe under way answers only
// if it is of class c and started at this instant (on a real clock, practically never);
// otherwise the confirming probe starts when it ends: a probe that started before the other
// endpoint's ejection, or one that ended a moment ago, may have passed before the fault
// reached this endpoint (a fault of the whole database reaches each endpoint at its own
// moment). Confirms of several classes that wait are probed one after the other; an ejection
// drops them (its own probes decide). A failed probe ejects it for class c, as an idle
// endpoint's failed probe does (rule 5), so a fault that every endpoint of a group shows (its
// writes failing everywhere, say) is seen on each of them within one probe, not one
// ProbeInterval later. Its probes are bounded by the ejections of the other endpoints of its
// groups: each asks once.
func (d *Detector) Confirm(c Class) {
	d.mu.Lock()
	var seq uint64
	switch {
	case d.closed || d.out || d.probe == nil:
	case d.probeSeq == 0:
		seq = d.startProbeLocked(c)
	case d.probeClass != c || d.probeStarted.Before(d.clock.Now()):
		d.confirms |= 1 << c
	}
	d.mu.Unlock()
	if seq != 0 {
		d.probe(seq, c)
	}
}

// ProbeDone reports the result of probe seq: err nil if it passed, ErrProbeSkipped if it
// says nothing, else why it failed; latency is how long it took. Results of a probe that is
// not the one under way (after Close, say) are ignored.
func (d *Detector) ProbeDone(seq uint64, err error, latency time.Duration) {
	d.mu.Lock()
	if d.closed || seq == 0 || seq != d.probeSeq {
		d.mu.Unlock()
		return
	}
	now := d.clock.Now()
	d.probeSeq = 0
	d.lastProbeEnd = now
	class := d.probeClass
	skipped := errors.Is(err, ErrProbeSkipped)
	if !skipped {
		d.lastProbe = ProbeResult{At: d.probeStarted, Latency: latency, Err: bounded.Keep(err, bounded.ServerText)}
	}
	switch {
	case d.out:
		switch {
		case now.Before(d.until):
			// It started before the ejection time was over: the timer set for the end of
			// the ejection time probes again.
		case err == nil && class == d.class:
			d.readmitLocked(now)
		case err == nil:
			// A probe of another class, started before the ejection, passed: it proves
			// nothing of the class that failed (rule 7), which is probed at once.
			d.armProbeLocked(0)
		default:
			d.armProbeLocked(d.cfg.ProbeInterval)
		}
	case skipped:
	case err == nil:
		d.suspect = false
	case d.suspect:
		d.ejectLocked(Timeouts, Calls, fmt.Sprintf("calls timed out without an answer and the probe failed: %v", err))
	case class != Calls:
		d.ejectLocked(ProbeFailed, class, fmt.Sprintf("the probe of its %s, sent when another endpoint of its group was ejected for them, failed: %v", class, err))
	default:
		d.ejectLocked(ProbeFailed, Calls, fmt.Sprintf("the probe of an endpoint without successful calls failed: %v", err))
	}
	var next uint64
	var nextClass Class
	if d.confirms != 0 && !d.out {
		for c := range numClasses {
			if d.confirms&(1<<c) != 0 {
				d.confirms &^= 1 << c
				next, nextClass = d.startProbeLocked(c), c
				break
			}
		}
	}
	d.mu.Unlock()
	d.deliver()
	if next != 0 {
		d.probe(next, nextClass)
	}
}

// Status returns a snapshot of the endpoint's health.
func (d *Detector) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := Status{
		Ejected: d.out, EjectedAt: d.ejectedAt, EjectedUntil: d.until, Reason: d.reason, Class: d.class, Detail: d.detail,
		Ejections: d.ejections, Multiplier: d.multiplier, Suspect: d.suspect,
		ProbeInFlight: d.probeSeq != 0, LastProbe: d.lastProbe,
		IntervalStart: d.intervalStart, Timeouts: d.timeouts,
	}
	for i := range d.classes {
		cc := &d.classes[i]
		cs := ClassStatus{Class: Class(i), Calls: cc.callsLocked(), Failures: cc.failures, ConsecutiveFailures: cc.consecutive.Load()}
		st.Calls += cs.Calls
		st.Failures += cs.Failures
		st.ConsecutiveFailures = max(st.ConsecutiveFailures, cs.ConsecutiveFailures)
		st.Classes[i] = cs
	}
	return st
}

// Close stops the timers; afterwards nothing is recorded, no probe starts and no event is
// delivered (an OnEvent call under way may still be finishing). Idempotent.
func (d *Detector) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.tickGen++
	d.probeGen++
	if d.tickTimer != nil {
		d.tickTimer.Stop()
	}
	if d.probeTimer != nil {
		d.probeTimer.Stop()
	}
	d.events.Drop()
}

// overPercentageLocked applies rule 3 to class c in the current interval. d.mu must be
// held.
func (d *Detector) overPercentageLocked(c Class) bool {
	cc := &d.classes[c.index()]
	calls := cc.callsLocked()
	return calls >= int64(d.cfg.MinimumCalls) && cc.failures*100 > int64(d.cfg.FailurePercentage)*calls
}

func (d *Detector) percentageDetailLocked(c Class, err error) string {
	cc := &d.classes[c.index()]
	s := fmt.Sprintf("%d of %d calls failed in the interval (more than %d%%)", cc.failures, cc.callsLocked(), d.cfg.FailurePercentage)
	if err != nil {
		s += fmt.Sprintf(", the last: %v", err)
	}
	return s
}

// ejectLocked ejects the endpoint (rule 6) and sets the readmission probe for the end of the
// ejection time. d.mu must be held.
func (d *Detector) ejectLocked(r Reason, c Class, detail string) {
	now := d.clock.Now()
	d.multiplier++
	d.ejections++
	d.out = true
	d.ejected.Store(true)
	d.ejectedAt, d.until = now, now.Add(d.cfg.ejectionTime(d.multiplier))
	detail = bounded.Text(detail, bounded.ServerText) // it quotes a server's error
	d.reason, d.class, d.detail = r, c, detail
	d.suspect = false
	d.confirms = 0 // ejected: its own probes decide
	d.resetConsecutive()
	d.armProbeLocked(d.until.Sub(now))
	d.queueLocked(Event{Kind: Ejected, Reason: r, Class: c, Detail: detail, At: now, Until: d.until, Ejections: d.ejections})
}

// readmitLocked readmits the endpoint with fresh counters and a fresh interval (rule 7).
// d.mu must be held.
func (d *Detector) readmitLocked(now time.Time) {
	d.out = false
	d.ejected.Store(false)
	d.resetConsecutive()
	d.suspect = false
	d.startIntervalLocked(now)
	if d.probe != nil {
		d.armIdleProbeLocked()
	}
	d.queueLocked(Event{Kind: Readmitted, Reason: d.reason, Class: d.class, Detail: d.detail, At: now, Until: d.until, Ejections: d.ejections})
}

// startIntervalLocked starts a counting interval at now and sets the timer for its end.
// d.mu must be held.
func (d *Detector) startIntervalLocked(now time.Time) {
	d.intervalStart = now
	for i := range d.classes {
		d.classes[i].successesAtStart = d.classes[i].successes.Load()
		d.classes[i].failures = 0
	}
	d.timeouts = 0
	d.tickGen++
	gen := d.tickGen
	if d.tickTimer != nil {
		d.tickTimer.Stop()
	}
	d.tickTimer = d.clock.AfterFunc(d.cfg.Interval, func() { d.tick(gen) })
}

// tick ends a counting interval (rules 3 and 6).
func (d *Detector) tick(gen uint64) {
	d.mu.Lock()
	if d.closed || gen != d.tickGen {
		d.mu.Unlock()
		return
	}
	if !d.out {
		if c, over := d.overPercentageAnyLocked(); over {
			d.ejectLocked(FailurePercentage, c, failing(c, "")+": "+d.percentageDetailLocked(c, nil))
		} else if d.multiplier > 0 {
			// A whole interval not ejected: the interval restarts at readmission, so this
			// one saw no ejection.
			d.multiplier--
		}
	}
	d.startIntervalLocked(d.clock.Now())
	d.mu.Unlock()
	d.deliver()
}

// overPercentageAnyLocked returns the first class over the failure percentage, if any.
// d.mu must be held.
func (d *Detector) overPercentageAnyLocked() (Class, bool) {
	for i := range d.classes {
		if d.overPercentageLocked(Class(i)) {
			return Class(i), true
		}
	}
	return 0, false
}

// resetConsecutive clears every class's consecutive-failure count.
func (d *Detector) resetConsecutive() {
	for i := range d.classes {
		d.classes[i].consecutive.Store(0)
	}
}

// successesLocked returns the successes of every class since New.
func (d *Detector) successesLocked() int64 {
	var n int64
	for i := range d.classes {
		n += d.classes[i].successes.Load()
	}
	return n
}

// armIdleProbeLocked sets the idle check of rule 5 for ProbeInterval from now. d.mu must be
// held.
func (d *Detector) armIdleProbeLocked() {
	d.successesAtCheck = d.successesLocked()
	d.armProbeLocked(d.cfg.ProbeInterval)
}

// armProbeLocked replaces the probe timer: it fires after delay. d.mu must be held.
func (d *Detector) armProbeLocked(delay time.Duration) {
	d.probeGen++
	gen := d.probeGen
	if d.probeTimer != nil {
		d.probeTimer.Stop()
	}
	d.probeTimer = d.clock.AfterFunc(delay, func() { d.probeDue(gen) })
}

// probeDue runs when the probe timer fires: the end of an ejection time or of a wait after a
// failed readmission probe (rule 7), or an idle check (rule 5).
func (d *Detector) probeDue(gen uint64) {
	d.mu.Lock()
	if d.closed || gen != d.probeGen {
		d.mu.Unlock()
		return
	}
	var seq uint64
	class := Calls
	switch {
	case d.out && d.probe == nil:
		d.readmitLocked(d.clock.Now())
	case d.out:
		if d.probeSeq == 0 {
			seq, class = d.startProbeLocked(d.class), d.class
		} // else the probe under way ends after the ejection time and decides (if it proves d.class)
	default:
		succ := d.successesLocked()
		if succ == d.successesAtCheck && d.probe != nil && d.probeSeq == 0 {
			seq = d.startProbeLocked(Calls)
		}
		if d.probe != nil {
			d.armIdleProbeLocked()
		}
	}
	d.mu.Unlock()
	d.deliver()
	if seq != 0 {
		d.probe(seq, class)
	}
}

// startProbeLocked marks a probe as under way and returns its number; the caller calls
// d.probe with it once d.mu is released. d.mu must be held.
func (d *Detector) startProbeLocked(c Class) uint64 {
	d.lastSeq++
	d.probeSeq = d.lastSeq
	d.probeStarted = d.clock.Now()
	d.probeClass = c
	return d.probeSeq
}

func (d *Detector) queueLocked(ev Event) {
	if d.onEvent != nil {
		d.events.Push(ev)
	}
}

// deliver hands queued events to OnEvent, in order, with no lock held (package ordered).
func (d *Detector) deliver() {
	if d.onEvent != nil {
		d.events.Deliver(&d.mu, func() bool { return d.closed }, d.onEvent)
	}
}
