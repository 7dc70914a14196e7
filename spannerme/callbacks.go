package spannerme

import (
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/textform"
)

// SwitchReason says why a group's current endpoint changed. It is written as its String form
// in JSON and text. The zero value is no reason: no SwitchEvent carries it.
type SwitchReason int

// The switch reasons.
const (
	// Fallback: the current endpoint became unavailable and a lower-priority one took over.
	Fallback SwitchReason = iota + 1
	// Recovery: a higher-priority endpoint became available again and took over (after
	// SwitchingDelay when the previous current endpoint was still available).
	Recovery
	// Reconfiguration: UpdateMultiEndpoints (or a watched file's reload) changed the group's
	// endpoints or durations, or SetGroupTimeouts its durations.
	Reconfiguration
)

var switchReasonText = textform.Enum[SwitchReason]{Type: "SwitchReason", What: "switch reason",
	Names: []string{Fallback: "fallback", Recovery: "recovery", Reconfiguration: "reconfiguration"}}

// String returns "fallback", "recovery" or "reconfiguration".
func (r SwitchReason) String() string { return switchReasonText.String(r) }

// MarshalText returns String's result.
func (r SwitchReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (r *SwitchReason) UnmarshalText(b []byte) error { return switchReasonText.Unmarshal(b, r) }

// switchReasonOf maps the state machine's reasons to the public ones.
func switchReasonOf(r multiendpoint.Reason) SwitchReason {
	switch r {
	case multiendpoint.Fallback:
		return Fallback
	case multiendpoint.Recovery:
		return Recovery
	}
	return Reconfiguration
}

// SwitchEvent reports one change of a group's current endpoint, to Settings.OnSwitch and in
// GroupStatus.Switches.
type SwitchEvent struct {
	// Name is the group's (MultiEndpoint's) name.
	Name string `json:"name"`
	// From is the endpoint that was current; To is the new current endpoint.
	From string `json:"from"`
	To   string `json:"to"`
	// Reason says why the current endpoint changed.
	Reason SwitchReason `json:"reason"`
	// At is when the change took effect.
	At time.Time `json:"at"`
}

// switchEventsOf converts a state machine's events; nil for none.
func switchEventsOf(evs []multiendpoint.Event) []SwitchEvent {
	if len(evs) == 0 {
		return nil
	}
	out := make([]SwitchEvent, len(evs))
	for i, ev := range evs {
		out[i] = switchEventOf(ev)
	}
	return out
}

// switchEventOf converts a state machine's event.
func switchEventOf(ev multiendpoint.Event) SwitchEvent {
	return SwitchEvent{Name: ev.Name, From: ev.From, To: ev.To, Reason: switchReasonOf(ev.Reason), At: ev.At}
}

// EjectionReason says why an endpoint was ejected. Its zero value means "never ejected".
// String (and JSON) gives "consecutive failures", "failure percentage", "timeouts" or
// "probe failed".
type EjectionReason int

// The ejection reasons.
const (
	// ReasonConsecutiveFailures: HealthSettings.ConsecutiveFailures calls failed in a row.
	ReasonConsecutiveFailures = EjectionReason(health.ConsecutiveFailures)
	// ReasonFailurePercentage: more than HealthSettings.FailurePercentage percent of an
	// interval's calls failed.
	ReasonFailurePercentage = EjectionReason(health.FailurePercentage)
	// ReasonTimeouts: calls timed out without an answer, and the probe sent at once failed.
	ReasonTimeouts = EjectionReason(health.Timeouts)
	// ReasonProbeFailed: the probe of an endpoint without successful calls (a standby)
	// failed.
	ReasonProbeFailed = EjectionReason(health.ProbeFailed)
)

var ejectionReasonText = textform.Enum[EjectionReason]{Type: "EjectionReason", What: "ejection reason", EmptyIsZero: true,
	Names: []string{0: "", ReasonConsecutiveFailures: health.ConsecutiveFailures.String(),
		ReasonFailurePercentage: health.FailurePercentage.String(), ReasonTimeouts: health.Timeouts.String(),
		ReasonProbeFailed: health.ProbeFailed.String()}}

// String returns the reason in words; "" for the zero value.
func (r EjectionReason) String() string { return ejectionReasonText.String(r) }

// MarshalText returns String's result.
func (r EjectionReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (r *EjectionReason) UnmarshalText(b []byte) error { return ejectionReasonText.Unmarshal(b, r) }

// HealthEventKind says whether an endpoint was ejected or readmitted. String (and JSON)
// gives "ejected" or "readmitted".
type HealthEventKind int

// The health event kinds.
const (
	EndpointEjected    = HealthEventKind(health.Ejected)
	EndpointReadmitted = HealthEventKind(health.Readmitted)
)

var healthEventKindText = textform.Enum[HealthEventKind]{Type: "HealthEventKind", What: "health event kind",
	Names: []string{EndpointEjected: health.Ejected.String(), EndpointReadmitted: health.Readmitted.String()}}

// String returns "ejected" or "readmitted".
func (k HealthEventKind) String() string { return healthEventKindText.String(k) }

// MarshalText returns String's result.
func (k HealthEventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (k *HealthEventKind) UnmarshalText(b []byte) error { return healthEventKindText.Unmarshal(b, k) }

// HealthEvent reports one ejection or readmission of an endpoint.
type HealthEvent struct {
	// Endpoint is the endpoint, as in PoolStatus.
	Endpoint string `json:"endpoint"`
	// Kind is EndpointEjected or EndpointReadmitted.
	Kind HealthEventKind `json:"kind"`
	// Reason is why the endpoint was ejected (for a readmission: why it had been), and
	// Detail says it in words, with the class and method that failed and the last error
	// ("writes failing (Commit): 10 consecutive failures, the last: ..."). Detail quotes
	// a server's error text: it holds at most 512 bytes, ending with "…[cut: N bytes in
	// all]" when cut.
	Reason EjectionReason `json:"reason"`
	Detail string         `json:"detail"`
	// Class is the class of calls whose failures ejected the endpoint (see HealthSettings):
	// "reads", "writes", "session calls" or "calls"; "calls" for the reasons Timeouts and
	// ProbeFailed.
	Class string `json:"class"`
	// At is when it happened.
	At time.Time `json:"at"`
	// Until is when the ejection time ends: the endpoint is probed then, and readmitted by
	// the first probe that passes. In a Readmitted event it is the end of the ejection that
	// ended; never zero.
	Until time.Time `json:"until"`
	// Ejections counts the endpoint's ejections so far.
	Ejections int `json:"ejections"`
}
