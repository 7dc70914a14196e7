package multiendpoint

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// State is an endpoint's availability as the MultiEndpoint sees it.
type State int

const (
	// Unavailable: the endpoint is down (or never came up) and its recovery time is over, or
	// RecoveryTimeout is zero. It is never chosen while a lower endpoint is Available.
	Unavailable State = iota
	// Available: at least one connection to the endpoint is ready.
	Available
	// Recovering: the endpoint is not available, but for less than RecoveryTimeout since it
	// left Available (or since it was added; a drop during the probation after a return
	// counts from the first drop). A current endpoint that is Recovering stays current while
	// nothing of higher priority is Available.
	Recovering
)

// String returns "Unavailable", "Available" or "Recovering".
func (s State) String() string {
	switch s {
	case Unavailable:
		return "Unavailable"
	case Available:
		return "Available"
	case Recovering:
		return "Recovering"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Reason says why the current endpoint changed.
type Reason int

const (
	// Fallback: the current endpoint became unavailable and a lower-priority one took over.
	Fallback Reason = iota + 1
	// Recovery: a higher-priority endpoint became available again and took over (after
	// SwitchingDelay when the previous current endpoint was still available).
	Recovery
	// Reconfiguration: SetEndpoints or SetTimeouts changed the list or the durations.
	Reconfiguration
)

// String returns "fallback", "recovery" or "reconfiguration".
func (r Reason) String() string {
	switch r {
	case Fallback:
		return "fallback"
	case Recovery:
		return "recovery"
	case Reconfiguration:
		return "reconfiguration"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Event reports one change of the current endpoint.
type Event struct {
	// Name is the MultiEndpoint's name from Options.Name.
	Name string
	// From is the endpoint that was current; To is the new current endpoint.
	From, To string
	// Reason says why.
	Reason Reason
	// At is when the change took effect, read from the MultiEndpoint's clock.
	At time.Time
}

// EndpointStatus is one endpoint in a Status snapshot.
type EndpointStatus struct {
	// Endpoint is the address as configured.
	Endpoint string
	// Priority is the position in the list: 0 is the top priority.
	Priority int
	// State is the endpoint's availability.
	State State
	// Since is when the endpoint entered State (or was added).
	Since time.Time
}

// Status is a point-in-time snapshot of a MultiEndpoint. It shares no memory with it.
type Status struct {
	// Name is the MultiEndpoint's name from Options.Name.
	Name string
	// Current is the endpoint that calls use now.
	Current string
	// PendingSwitch is the endpoint that will become current at PendingSwitchAt if it stays
	// Available; empty when no switch is pending. With tiers it is the member of the target
	// tier whose return times the switch; the tier's lead (its first Available member)
	// becomes current.
	PendingSwitch   string
	PendingSwitchAt time.Time
	// RecoveryTimeout and SwitchingDelay are the durations in force.
	RecoveryTimeout time.Duration
	SwitchingDelay  time.Duration
	// Endpoints lists every endpoint in priority order.
	Endpoints []EndpointStatus
	// Closed reports whether Close has been called.
	Closed bool
	// Tiers lists the endpoints by tier, top tier first, when the MultiEndpoint has tiers
	// (Options.Tiers or ReconfigureTiers); nil without tiers. CurrentTier is then the index
	// of Current's tier, and while a switch back ramps up (Options.SlowStart), SlowStartFrom
	// is the tier switched away from and SlowStartSince the switch (zero: no ramp). All three
	// are zero without tiers.
	Tiers          [][]string
	CurrentTier    int
	SlowStartFrom  int
	SlowStartSince time.Time
}

// ErrInvalidConfig is wrapped by every configuration error, for errors.Is.
var ErrInvalidConfig = errors.New("invalid MultiEndpoint configuration")

// ErrClosed is returned by calls that change a MultiEndpoint after Close.
var ErrClosed = errors.New("MultiEndpoint is closed")

// ConfigError describes one configuration mistake. It wraps ErrInvalidConfig.
type ConfigError struct {
	// Group is the MultiEndpoint's name; empty when unnamed.
	Group string
	// Endpoint is the offending endpoint, if the mistake concerns one.
	Endpoint string
	// Index is the endpoint's position in the list, or -1.
	Index int
	// Problem says what is wrong, e.g. "duplicate endpoint".
	Problem string
}

func (e *ConfigError) Error() string { return ConfigErrorText(e.Group, e.Endpoint, e.Index, e.Problem) }

// ConfigErrorText is the text of a configuration mistake: ErrInvalidConfig's, then the
// group (when not ""), the endpoint (with its index when index >= 0) and the problem. Every
// ConfigError type of this module writes its text with it.
func ConfigErrorText(group, endpoint string, index int, problem string) string {
	msg := ErrInvalidConfig.Error() + ": "
	if group != "" {
		msg += fmt.Sprintf("group %q: ", group)
	}
	if index >= 0 {
		msg += fmt.Sprintf("endpoint %d %q: ", index, endpoint)
	} else if endpoint != "" {
		msg += fmt.Sprintf("endpoint %q: ", endpoint)
	}
	return msg + problem
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// ValidateEndpoints checks an endpoint list as SetEndpoints does: not empty, no empty
// endpoint, no endpoint twice. group names the MultiEndpoint in the error. The error is a
// *ConfigError.
func ValidateEndpoints(group string, endpoints []string) error {
	if len(endpoints) == 0 {
		return &ConfigError{Group: group, Index: -1, Problem: "the endpoint list is empty"}
	}
	seen := make(map[string]int, len(endpoints))
	for i, e := range endpoints {
		if e == "" {
			return &ConfigError{Group: group, Index: i, Problem: "empty endpoint"}
		}
		if j, dup := seen[e]; dup {
			return &ConfigError{Group: group, Endpoint: e, Index: i,
				Problem: fmt.Sprintf("duplicate endpoint (also at position %d)", j)}
		}
		seen[e] = i
	}
	return nil
}

// ValidateDurations checks RecoveryTimeout and SwitchingDelay: neither may be negative. The
// error is a *ConfigError.
func ValidateDurations(group string, recoveryTimeout, switchingDelay time.Duration) error {
	if recoveryTimeout < 0 {
		return &ConfigError{Group: group, Index: -1, Problem: fmt.Sprintf("negative RecoveryTimeout %v", recoveryTimeout)}
	}
	if switchingDelay < 0 {
		return &ConfigError{Group: group, Index: -1, Problem: fmt.Sprintf("negative SwitchingDelay %v", switchingDelay)}
	}
	return nil
}

// ValidateSwitchingJitter checks SwitchingJitter: a fraction in [0, 1] (NaN is not). The
// error is a *ConfigError naming the field.
func ValidateSwitchingJitter(group string, jitter float64) error {
	if math.IsNaN(jitter) || jitter < 0 || jitter > 1 {
		return &ConfigError{Group: group, Index: -1, Problem: fmt.Sprintf("SwitchingJitter %v is outside [0, 1]", jitter)}
	}
	return nil
}
