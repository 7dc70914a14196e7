package spannerme

import (
	"encoding/json"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/textform"
)

// PoolHealth is an endpoint's health from call outcomes, in a PoolStatus. Times are zero
// when the event has not happened.
type PoolHealth struct {
	// Disabled reports that health from call outcomes is off (HealthSettings.Disabled, or a
	// retired pool); the other fields are then zero.
	Disabled bool `json:"disabled"`
	// Ejected reports whether the endpoint is ejected: not available to any group although
	// its connections may be up.
	Ejected bool `json:"ejected"`
	// EjectedAt and EjectedUntil bound the current or last ejection; a probe that passes at
	// or after EjectedUntil readmits the endpoint.
	EjectedAt    time.Time `json:"ejectedAt,omitzero"`
	EjectedUntil time.Time `json:"ejectedUntil,omitzero"`
	// Reason, Class and Detail say why the endpoint is (or was last) ejected, as in
	// HealthEvent.
	Reason EjectionReason `json:"reason,omitzero"`
	Class  string         `json:"class,omitempty"`
	Detail string         `json:"detail,omitempty"`
	// Ejections counts the ejections since the pool was created.
	Ejections int `json:"ejections"`
	// Suspect reports that calls timed out without an answer and a probe is deciding.
	Suspect bool `json:"suspect"`
	// LastProbe is the last probe that ended.
	LastProbe ProbeStatus `json:"lastProbe"`
	// IntervalStart is when the current counting interval began. Calls counts the calls of
	// the interval that succeeded or failed; Failures and Timeouts those that failed or
	// timed out.
	IntervalStart time.Time `json:"intervalStart,omitzero"`
	Calls         int64     `json:"calls"`
	Failures      int64     `json:"failures"`
	Timeouts      int64     `json:"timeouts"`
	// ConsecutiveFailures is the largest count of one class's failures since that class's
	// last success.
	ConsecutiveFailures int64 `json:"consecutiveFailures"`
	// Classes holds the counts of each class of calls, counted apart (HealthSettings): reads,
	// writes, session calls, other calls; empty when Disabled.
	Classes []ClassHealth `json:"classes,omitempty"`
}

// ClassHealth is one class of calls in a PoolHealth: its calls and failures in the current
// counting interval and its failures since its last success.
type ClassHealth struct {
	// Class is "reads", "writes", "session calls" or "calls".
	Class               string `json:"class"`
	Calls               int64  `json:"calls"`
	Failures            int64  `json:"failures"`
	ConsecutiveFailures int64  `json:"consecutiveFailures"`
}

// ProbeStatus is one probe's result. In JSON, Latency is a Go duration string such as "3ms".
type ProbeStatus struct {
	// At is when the probe started; zero if none has ended.
	At time.Time `json:"at,omitzero"`
	// Latency is how long it took.
	Latency time.Duration `json:"latency"`
	// Passed reports whether it passed; Error says why not (at most 512 bytes of it, ending
	// with "…[cut: N bytes in all]" when cut).
	Passed bool   `json:"passed"`
	Error  string `json:"error,omitempty"`
}

// probeStatusJSON is ProbeStatus with its latency as a string.
type probeStatusJSON struct {
	probeStatusAlias
	Latency string `json:"latency,omitempty"`
}

type probeStatusAlias ProbeStatus

// MarshalJSON writes Latency as a Go duration string ("3ms"), omitted when no probe ended.
func (p ProbeStatus) MarshalJSON() ([]byte, error) {
	j := probeStatusJSON{probeStatusAlias: probeStatusAlias(p)}
	if !p.At.IsZero() {
		j.Latency = p.Latency.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *ProbeStatus) UnmarshalJSON(b []byte) error {
	var j probeStatusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = ProbeStatus(j.probeStatusAlias)
	var err error
	p.Latency, err = textform.ParseDuration(j.Latency)
	return err
}

// poolHealthOf converts a pool's status into its PoolHealth.
func poolHealthOf(ps pool.Status) PoolHealth {
	if !ps.HealthOn {
		return PoolHealth{Disabled: true}
	}
	s := ps.Health
	ph := PoolHealth{Ejected: s.Ejected, EjectedAt: s.EjectedAt, EjectedUntil: s.EjectedUntil, Reason: EjectionReason(s.Reason),
		Detail: s.Detail, Ejections: s.Ejections, Suspect: s.Suspect,
		Classes:       make([]ClassHealth, 0, len(s.Classes)),
		LastProbe:     ProbeStatus{At: s.LastProbe.At, Latency: s.LastProbe.Latency, Passed: s.LastProbe.Passed()},
		IntervalStart: s.IntervalStart, Calls: s.Calls, Failures: s.Failures, Timeouts: s.Timeouts,
		ConsecutiveFailures: s.ConsecutiveFailures}
	if s.LastProbe.Err != nil {
		ph.LastProbe.Error = s.LastProbe.Err.Error()
	}
	if s.Reason != 0 {
		ph.Class = s.Class.String()
	}
	for _, c := range s.Classes {
		ph.Classes = append(ph.Classes, ClassHealth{Class: c.Class.String(), Calls: c.Calls, Failures: c.Failures,
			ConsecutiveFailures: c.ConsecutiveFailures})
	}
	return ph
}

// BrownoutStatus is an endpoint's brownout state in one group (BrownoutSettings), in an
// EndpointStatus. In JSON the latencies are Go duration strings such as "402ms".
type BrownoutStatus struct {
	// Degraded reports that the endpoint is far slower than its fallback: it is not
	// available to this group (its State says Recovering or Unavailable).
	Degraded bool `json:"degraded"`
	// Since is when Degraded last changed; zero if it never has.
	Since time.Time `json:"since,omitzero"`
	// Latency is the endpoint's latency at the last evaluation: the median of its last
	// three latency probes; zero while unknown.
	Latency time.Duration `json:"-"`
	// Fallback is the endpoint it was compared with (the fastest other available endpoint
	// of the group), "" when none; FallbackLatency is that endpoint's latency.
	Fallback        string        `json:"fallback,omitempty"`
	FallbackLatency time.Duration `json:"-"`
}

type brownoutStatusAlias BrownoutStatus

type brownoutStatusJSON struct {
	brownoutStatusAlias
	Latency         string `json:"latency,omitempty"`
	FallbackLatency string `json:"fallbackLatency,omitempty"`
}

// MarshalJSON writes the latencies as Go duration strings, omitted when zero.
func (b BrownoutStatus) MarshalJSON() ([]byte, error) {
	j := brownoutStatusJSON{brownoutStatusAlias: brownoutStatusAlias(b)}
	if b.Latency != 0 {
		j.Latency = b.Latency.String()
	}
	if b.FallbackLatency != 0 {
		j.FallbackLatency = b.FallbackLatency.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (b *BrownoutStatus) UnmarshalJSON(data []byte) error {
	var j brownoutStatusJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*b = BrownoutStatus(j.brownoutStatusAlias)
	var err error
	if b.Latency, err = textform.ParseDuration(j.Latency); err != nil {
		return err
	}
	b.FallbackLatency, err = textform.ParseDuration(j.FallbackLatency)
	return err
}
