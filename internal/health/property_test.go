package health

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"pgregory.net/rapid"
)

// The property tests drive random sequences of outcomes, probe results and waits against a
// Detector on a fake clock and against refModel, written from the package doc's rules. The
// model keeps no timers: it keeps the due time of the interval's end and of the probe timer
// and runs them, in order, when time moves.

// propConfig has durations that rarely fall due together, and a low MinimumCalls so that
// percentages matter in short sequences.
var propConfig = Config{
	Interval:            10 * time.Second,
	ConsecutiveFailures: 4,
	FailurePercentage:   40,
	MinimumCalls:        6,
	BaseEjectionTime:    7 * time.Second,
	MaxEjectionTime:     25 * time.Second,
	ProbeInterval:       13 * time.Second,
}

type refTimer struct {
	due time.Time
	seq int // order of arming: among timers due at once, the one armed first runs first
	on  bool
}

type refModel struct {
	cfg Config
	now time.Time
	seq int

	out              bool
	until            time.Time
	mult, ejections  int
	consec           int
	suspect          bool
	probing          bool
	lastProbeEnd     time.Time
	succ, fail       int  // in the interval
	succSinceCheck   bool // a success since the last idle check
	tick, probeTimer refTimer
	events           []string
}

func newRefModel(cfg Config, now time.Time) *refModel {
	m := &refModel{cfg: cfg, now: now}
	m.startInterval()
	m.arm(&m.probeTimer, cfg.ProbeInterval)
	return m
}

func (m *refModel) arm(t *refTimer, d time.Duration) {
	m.seq++
	*t = refTimer{due: m.now.Add(d), seq: m.seq, on: true}
}

func (m *refModel) startInterval() {
	m.succ, m.fail = 0, 0
	m.arm(&m.tick, m.cfg.Interval)
}

func (m *refModel) overPercentage() bool {
	calls := m.succ + m.fail
	return calls >= m.cfg.MinimumCalls && m.fail*100 > m.cfg.FailurePercentage*calls
}

func (m *refModel) eject(r Reason) {
	m.mult++
	m.ejections++
	m.out = true
	d := min(m.cfg.BaseEjectionTime*time.Duration(m.mult), max(m.cfg.BaseEjectionTime, m.cfg.MaxEjectionTime))
	m.until = m.now.Add(d)
	m.suspect = false
	m.consec = 0
	m.arm(&m.probeTimer, d)
	m.events = append(m.events, fmt.Sprintf("ejected:%s:%v", r, d))
}

func (m *refModel) readmit() {
	m.out = false
	m.consec = 0
	m.suspect = false
	m.startInterval()
	m.succSinceCheck = false
	m.arm(&m.probeTimer, m.cfg.ProbeInterval)
	m.events = append(m.events, "readmitted")
}

// advance runs the timers due by to, in order, then sets the time.
func (m *refModel) advance(to time.Time) {
	for {
		var next *refTimer
		for _, t := range []*refTimer{&m.tick, &m.probeTimer} {
			if t.on && !t.due.After(to) && (next == nil || t.due.Before(next.due) || (t.due.Equal(next.due) && t.seq < next.seq)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		m.now = next.due
		next.on = false
		if next == &m.tick {
			if !m.out {
				if m.overPercentage() {
					m.eject(FailurePercentage)
				} else if m.mult > 0 {
					m.mult--
				}
			}
			m.startInterval()
		} else if m.out {
			m.probing = true
		} else {
			if !m.succSinceCheck && !m.probing {
				m.probing = true
			}
			m.succSinceCheck = false
			m.arm(&m.probeTimer, m.cfg.ProbeInterval)
		}
	}
	m.now = to
}

func (m *refModel) success() {
	m.succ++
	m.consec = 0
	m.succSinceCheck = true
}

func (m *refModel) failure() {
	m.fail++
	m.consec++
	if m.out {
		return
	}
	if m.consec >= m.cfg.ConsecutiveFailures {
		m.eject(ConsecutiveFailures)
	} else if m.overPercentage() {
		m.eject(FailurePercentage)
	}
}

func (m *refModel) timeout() {
	if m.out {
		return
	}
	if m.probing {
		m.suspect = true
		return
	}
	if m.lastProbeEnd.IsZero() || !m.now.Before(m.lastProbeEnd.Add(m.cfg.ProbeInterval/10)) {
		m.suspect = true
		m.probing = true
	}
}

func (m *refModel) probeDone(pass bool) {
	m.probing = false
	m.lastProbeEnd = m.now
	switch {
	case m.out && m.now.Before(m.until):
	case m.out && pass:
		m.readmit()
	case m.out:
		m.arm(&m.probeTimer, m.cfg.ProbeInterval)
	case pass:
		m.suspect = false
	case m.suspect:
		m.eject(Timeouts)
	default:
		m.eject(ProbeFailed)
	}
}

// action is one generated step.
type action struct {
	kind string // "ok", "app", "fail", "burst" (n failures), "timeout", "pass", "probefail", "wait"
	code codes.Code
	wait time.Duration
	n    int
}

func (a action) String() string {
	switch a.kind {
	case "app":
		return "app:" + a.code.String()
	case "wait":
		return "wait:" + a.wait.String()
	case "burst":
		return fmt.Sprintf("fail x%d", a.n)
	}
	return a.kind
}

// appCodes are answers of the backend: Classify makes each a Success (or Ignore).
var appCodes = []codes.Code{codes.NotFound, codes.InvalidArgument, codes.Aborted, codes.AlreadyExists,
	codes.FailedPrecondition, codes.PermissionDenied, codes.ResourceExhausted, codes.OutOfRange, codes.Canceled,
	codes.Internal, codes.Unknown}

func genAction(withFailures bool) *rapid.Generator[action] {
	return rapid.Custom(func(t *rapid.T) action {
		// Weighted: short waits often, long ones (past an ejection time or an interval) now
		// and then; failures in bursts.
		kinds := []string{"ok", "ok", "app", "app", "wait", "wait", "waitlong", "pass", "pass"}
		if withFailures {
			kinds = append(kinds, "fail", "burst", "burst", "timeout", "timeout", "probefail")
		}
		a := action{kind: rapid.SampledFrom(kinds).Draw(t, "kind")}
		switch a.kind {
		case "app":
			a.code = rapid.SampledFrom(appCodes).Draw(t, "code")
		case "wait":
			a.wait = time.Duration(rapid.Int64Range(1, 3_000).Draw(t, "ms")) * time.Millisecond
		case "waitlong":
			a.kind, a.wait = "wait", time.Duration(rapid.Int64Range(3_000, 30_000).Draw(t, "ms"))*time.Millisecond
		case "burst":
			a.n = rapid.IntRange(2, 2*propConfig.ConsecutiveFailures).Draw(t, "n")
		}
		return a
	})
}

// check runs actions against a Detector and the model and compares them after each step.
func check(t *rapid.T, actions []action) (ejections int) {
	h := newHarness(t, propConfig, true)
	defer h.d.Close()
	m := newRefModel(propConfig, h.clock.Now())
	var got, want []string
	for i, a := range actions {
		switch a.kind {
		case "ok":
			h.d.Success(Calls)
			m.success()
		case "app":
			err := status.Error(a.code, "application error")
			h.d.Record(Calls, "", Classify(err, true, false), err)
			if a.code != codes.Canceled {
				m.success()
			}
		case "fail", "burst":
			for range max(a.n, 1) {
				h.d.Failure(Calls, "", errUnavailable)
				m.failure()
			}
		case "timeout":
			h.d.Timeout()
			m.timeout()
		case "pass", "probefail":
			if h.probing() == 0 {
				break
			}
			if a.kind == "pass" {
				h.answer(nil)
			} else {
				h.answer(errors.New("probe failed"))
			}
			m.probeDone(a.kind == "pass")
		case "wait":
			h.clock.Advance(a.wait)
			m.advance(h.clock.Now())
		}
		got = append(got, h.takeEvents()...)
		want = append(want, m.events...)
		m.events = nil
		st := h.d.Status()
		if st.Ejected != m.out || st.Ejections != m.ejections || st.Multiplier != m.mult || st.Suspect != m.suspect ||
			(h.probing() == 1) != m.probing || !slices.Equal(got, want) || (m.out && !st.EjectedUntil.Equal(m.until)) {
			t.Fatalf("after action %d %v: detector ejected=%v ejections=%d multiplier=%d suspect=%v probing=%d until=%v events=%q\n"+
				"model: ejected=%v ejections=%d multiplier=%d suspect=%v probing=%v until=%v events=%q\nactions: %v",
				i, a, st.Ejected, st.Ejections, st.Multiplier, st.Suspect, h.probing(), st.EjectedUntil, got,
				m.out, m.ejections, m.mult, m.suspect, m.probing, m.until, want, actions[:i+1])
		}
	}
	return m.ejections
}

// Random sequences of application errors, successes and waits, with every probe passing,
// never eject (F16).
func TestPropertyApplicationErrorsNeverEject(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		actions := rapid.SliceOfN(genAction(false), 50, 400).Draw(t, "actions")
		if n := check(t, actions); n != 0 {
			t.Fatalf("%d ejections without a failure", n)
		}
	})
}

// Random sequences with failure bursts, timeouts and probe results eject exactly when the
// reference model says, for the reasons it says, for as long as it says, and readmit when it
// says.
func TestPropertyEjectionFollowsTheRules(t *testing.T) {
	ejected := 0
	rapid.Check(t, func(t *rapid.T) {
		actions := rapid.SliceOfN(genAction(true), 50, 400).Draw(t, "actions")
		if check(t, actions) > 0 {
			ejected++
		}
	})
	if ejected == 0 {
		t.Fatal("no generated sequence ejected: the property tested nothing")
	}
}
