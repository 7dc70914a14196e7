package health

import (
	"context"
	"strconv"
	"time"
)

// Reason says why an endpoint was ejected.
type Reason int

const (
	// ConsecutiveFailures: Config.ConsecutiveFailures calls failed in a row.
	ConsecutiveFailures Reason = iota + 1
	// FailurePercentage: more than Config.FailurePercentage percent of the calls of one
	// interval failed, with at least Config.MinimumCalls calls.
	FailurePercentage
	// Timeouts: calls timed out without any answer, and the probe sent at once failed too.
	Timeouts
	// ProbeFailed: a probe of an endpoint that carried no successful call for a
	// Config.ProbeInterval (a standby) failed.
	ProbeFailed
)

// String returns "consecutive failures", "failure percentage", "timeouts" or "probe failed".
func (r Reason) String() string {
	switch r {
	case ConsecutiveFailures:
		return "consecutive failures"
	case FailurePercentage:
		return "failure percentage"
	case Timeouts:
		return "timeouts"
	case ProbeFailed:
		return "probe failed"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Class is the kind of call an outcome belongs to. Each class is counted apart (rules 1 to
// 3), so that an endpoint where one class keeps failing while another succeeds (a gray
// failure: commits refused, reads fine) is ejected. The zero value, Calls, holds the calls of
// no other class.
type Class uint8

const (
	// Calls: calls of no other class (methods of other services, and Spanner methods the
	// classes do not name).
	Calls Class = iota
	// Reads: queries and reads, and read-only transactions.
	Reads
	// Writes: commits, DML, batch DML, rollbacks and read-write transactions.
	Writes
	// Sessions: session management (create, get, delete, list).
	Sessions
	numClasses
)

var classNames = [numClasses]string{Calls: "calls", Reads: "reads", Writes: "writes", Sessions: "session calls"}

// String returns "calls", "reads", "writes" or "session calls".
func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// index returns c's index in a Detector's classes: an unknown class counts as Calls.
func (c Class) index() int {
	if c >= numClasses {
		return int(Calls)
	}
	return int(c)
}

// NumClasses is the number of classes.
const NumClasses = int(numClasses)

// Detector.confirms holds a bit per class in a uint8.
var _ [8 - numClasses]struct{}

// ClassStatus is one class's counts in a Status.
type ClassStatus struct {
	Class Class
	// Calls counts the class's successes and failures in the current interval, Failures its
	// failures; ConsecutiveFailures counts its failures since its last success.
	Calls, Failures, ConsecutiveFailures int64
}

// EventKind says what happened to an endpoint's health.
type EventKind int

const (
	// Ejected: the endpoint no longer counts as available.
	Ejected EventKind = iota + 1
	// Readmitted: a probe passed after the ejection time; the endpoint counts as available
	// again (when it is connected).
	Readmitted
)

// String returns "ejected" or "readmitted".
func (k EventKind) String() string {
	switch k {
	case Ejected:
		return "ejected"
	case Readmitted:
		return "readmitted"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event reports one ejection or readmission.
type Event struct {
	// Kind is Ejected or Readmitted.
	Kind EventKind
	// Reason is why the endpoint was ejected (for Readmitted: why it had been).
	Reason Reason
	// Class is the class whose failures ejected it (Calls for Timeouts and ProbeFailed).
	Class Class
	// Detail says it in words, e.g. "10 consecutive failures, last: rpc error: ...".
	Detail string
	// At is when it happened, on the detector's clock.
	At time.Time
	// Until is the end of the ejection time: for Ejected, when the endpoint is probed and
	// readmitted if a probe passes; for Readmitted, the end of the ejection that ended.
	Until time.Time
	// Ejections counts the endpoint's ejections so far, this one included.
	Ejections int
}

// ProbeResult is the outcome of one probe.
type ProbeResult struct {
	// At is when the probe started; zero if no probe has ended yet.
	At time.Time
	// Latency is how long it took.
	Latency time.Duration
	// Err is nil when the probe passed; otherwise what bounded.Keep keeps of the probe's
	// error (bounded.ServerText bytes of text and its gRPC status, nothing else of it).
	Err error
}

// Passed reports whether the probe passed: it ended (At is set) without error.
func (r ProbeResult) Passed() bool { return !r.At.IsZero() && r.Err == nil }

// Status is a point-in-time view of one endpoint's health.
type Status struct {
	// Ejected reports whether the endpoint is ejected now.
	Ejected bool
	// EjectedAt and EjectedUntil bound the current (or last) ejection: the endpoint is
	// readmitted by the first probe that passes at or after EjectedUntil. Zero if never ejected.
	EjectedAt, EjectedUntil time.Time
	// Reason, Class and Detail say why the endpoint is (or was last) ejected.
	Reason Reason
	Class  Class
	Detail string
	// Ejections counts the ejections since the detector was created.
	Ejections int
	// Multiplier is the current ejection time multiplier: the next ejection lasts
	// BaseEjectionTime times Multiplier+1 (at most MaxEjectionTime).
	Multiplier int
	// Suspect reports that calls timed out without an answer and a probe is deciding.
	Suspect bool
	// ProbeInFlight reports that a probe has started and not ended.
	ProbeInFlight bool
	// LastProbe is the last probe that ended.
	LastProbe ProbeResult
	// IntervalStart is when the current counting interval began; Calls, Failures and
	// Timeouts count within it. Calls counts the successes and failures (a timeout or an
	// ignored call is not a call here).
	IntervalStart             time.Time
	Calls, Failures, Timeouts int64
	// ConsecutiveFailures is the largest count of failures of one class since its last
	// success.
	ConsecutiveFailures int64
	// Classes holds each class's counts, by Class.
	Classes [NumClasses]ClassStatus
}

// Config holds the detector's thresholds and durations. A field that is zero or negative
// takes its value in Defaults (WithDefaults).
type Config struct {
	// Interval is the counting interval of the failure percentage and of the multiplier's
	// decay.
	Interval time.Duration
	// ConsecutiveFailures failures in a row eject.
	ConsecutiveFailures int
	// FailurePercentage: more than this percentage of failures among at least MinimumCalls
	// calls within one interval ejects. 1..100.
	FailurePercentage int
	MinimumCalls      int
	// BaseEjectionTime times the ejection multiplier (at most MaxEjectionTime, and never
	// less than BaseEjectionTime) is how long an ejected endpoint stays out before a
	// readmission probe.
	BaseEjectionTime time.Duration
	MaxEjectionTime  time.Duration
	// ProbeInterval: an endpoint with no successful call for this long is probed (standbys),
	// and an ejected endpoint whose readmission probe failed is probed again after it.
	ProbeInterval time.Duration
}

// Defaults is the configuration spannerme uses unless told otherwise. The intervals and
// ejection times are those of gRPC's outlier detection (gRFC A50: interval 10s,
// base_ejection_time 30s, max_ejection_time 300s); the thresholds are discussed in
// spannerme.HealthSettings.
var Defaults = Config{
	Interval:            10 * time.Second,
	ConsecutiveFailures: 10,
	FailurePercentage:   50,
	MinimumCalls:        20,
	BaseEjectionTime:    30 * time.Second,
	MaxEjectionTime:     300 * time.Second,
	ProbeInterval:       10 * time.Second,
}

// WithDefaults returns c with every zero (or negative) field replaced by Defaults', and
// FailurePercentage capped at 100.
func (c Config) WithDefaults() Config {
	d := Defaults
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.ConsecutiveFailures <= 0 {
		c.ConsecutiveFailures = d.ConsecutiveFailures
	}
	if c.FailurePercentage <= 0 {
		c.FailurePercentage = d.FailurePercentage
	}
	c.FailurePercentage = min(c.FailurePercentage, 100)
	if c.MinimumCalls <= 0 {
		c.MinimumCalls = d.MinimumCalls
	}
	if c.BaseEjectionTime <= 0 {
		c.BaseEjectionTime = d.BaseEjectionTime
	}
	if c.MaxEjectionTime <= 0 {
		c.MaxEjectionTime = d.MaxEjectionTime
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	return c
}

// ejectionTime is how long the multiplier-th ejection lasts: BaseEjectionTime times
// multiplier, at most max(BaseEjectionTime, MaxEjectionTime) (gRFC A50).
func (c Config) ejectionTime(multiplier int) time.Duration {
	limit := max(c.BaseEjectionTime, c.MaxEjectionTime)
	if multiplier <= 0 {
		return c.BaseEjectionTime
	}
	if c.BaseEjectionTime > limit/time.Duration(multiplier) {
		return limit
	}
	return min(c.BaseEjectionTime*time.Duration(multiplier), limit)
}

// probeClassKey is the context key of the class a probe must prove.
type probeClassKey struct{}

// WithProbeClass returns ctx carrying c, the class the probe run with it must prove
// (Options.Probe).
func WithProbeClass(ctx context.Context, c Class) context.Context {
	return context.WithValue(ctx, probeClassKey{}, c)
}

// ProbeClass returns the class ctx carries (WithProbeClass); Calls when it carries none.
func ProbeClass(ctx context.Context) Class {
	c, _ := ctx.Value(probeClassKey{}).(Class)
	return c
}
