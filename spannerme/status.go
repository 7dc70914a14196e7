package spannerme

import (
	"encoding/json"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/textform"
)

// Status is a point-in-time view of a GCPMultiEndpoint, made by GCPMultiEndpoint.Status. It
// shares no memory with the GCPMultiEndpoint. Its JSON form (encoding/json) is what
// statuspage.Handler (package spannerme/statuspage) serves.
type Status struct {
	// At is when the view was taken.
	At time.Time `json:"at"`
	// Started is when the GCPMultiEndpoint was created; zero for the zero value.
	Started time.Time `json:"started,omitzero"`
	// Default is the default group's name.
	Default string `json:"default"`
	// Groups lists every group (MultiEndpoint), by name.
	Groups []GroupStatus `json:"groups"`
	// Pools lists every endpoint's channel pool, by endpoint, retired ones that are still
	// draining included.
	Pools []PoolStatus `json:"pools"`
	// UnknownGroups counts, per name, the calls that named a group that is not configured
	// (they used the default group). At most 64 names are kept; calls naming others are
	// counted under "(other unknown names)".
	UnknownGroups map[string]int64 `json:"unknownGroups"`
	// WaitingCalls counts the calls waiting for their endpoint's pool to finish connecting
	// (or for their group to switch) before they are sent.
	WaitingCalls int64 `json:"waitingCalls"`
	// Clients counts the Spanner clients of NewMultiEndpointClient* and NewClient that use
	// the GCPMultiEndpoint now, from their creation to their Close; 0 after Close.
	Clients int `json:"clients"`
	// Configurators counts the functions of Configurator that have configured a client
	// (a database/sql connector each, usually): each serves every Spanner client its
	// connector creates, one after another, and counts from its first call until Close;
	// 0 after Close.
	Configurators int `json:"configurators"`
	// Closed reports whether Close has been called (or the GCPMultiEndpoint is a zero value,
	// which serves nothing). After Close every group has no current endpoint and every
	// endpoint is Unavailable, every pool is SHUTDOWN: nothing is alive.
	Closed bool `json:"closed"`
	// Config is the status of the configuration file that a ConfigWatcher applies or last
	// applied (it stays after the watcher's Close); nil when no ConfigWatcher was started for
	// this GCPMultiEndpoint. In JSON its LastError is the error's text.
	Config *ConfigStatus `json:"config,omitempty"`
	// Retries counts the calls sent elsewhere than their group's pick: retries steered away
	// from the endpoint where their previous attempt failed, those the retry budget kept,
	// and calls that avoided an endpoint cooling down after RESOURCE_EXHAUSTED.
	Retries RetryStatus `json:"retries"`
}

// GroupStatus is one group (MultiEndpoint) in a Status.
type GroupStatus struct {
	// Name is the group's name.
	Name string `json:"name"`
	// Current is the endpoint the group's calls use now; "" after Close.
	Current string `json:"current"`
	// PendingSwitch is the endpoint that becomes current at PendingSwitchAt if it stays
	// Available until then; "" when no switch is pending.
	PendingSwitch string `json:"pendingSwitch,omitempty"`
	// PendingSwitchAt is when the pending switch lands; zero when none is pending.
	PendingSwitchAt time.Time `json:"pendingSwitchAt,omitzero"`
	// RecoveryTimeout is the group's RecoveryTimeout in force. In JSON it is a Go duration
	// string such as "2s".
	RecoveryTimeout time.Duration `json:"recoveryTimeout"`
	// SwitchingDelay is the group's SwitchingDelay in force. In JSON it is a Go duration
	// string such as "10s".
	SwitchingDelay time.Duration `json:"switchingDelay"`
	// Endpoints lists the group's endpoints in priority order, the top priority first.
	Endpoints []EndpointStatus `json:"endpoints"`
	// Switches lists the group's most recent changes of current endpoint, oldest first, at
	// most 32.
	Switches []SwitchEvent `json:"switches"`
	// Closed reports whether the group has stopped (Close, or the group was removed by
	// UpdateMultiEndpoints while this view was taken).
	Closed bool `json:"closed"`
	// DirectedReads is the group's directed read policy in force (Settings.DirectedReads);
	// nil when it has none (its requests are sent unchanged), and after Close.
	DirectedReads *DirectedReadsStatus `json:"directedReads,omitempty"`
	// Hedging is the group's hedging in force (Settings.Hedging) and its counts; nil when
	// the group does not hedge.
	Hedging *HedgingStatus `json:"hedging,omitempty"`
	// Tiers is the group's tiers and how its members share the calls (Settings.Tiers); nil
	// for a group without tiers.
	Tiers *TiersStatus `json:"tiers,omitempty"`
}

// groupStatusJSON is GroupStatus with its durations as strings.
type groupStatusJSON struct {
	groupStatusAlias
	RecoveryTimeout string `json:"recoveryTimeout"`
	SwitchingDelay  string `json:"switchingDelay"`
}

type groupStatusAlias GroupStatus

// MarshalJSON writes the durations as Go duration strings ("2s").
func (g GroupStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(groupStatusJSON{groupStatusAlias(g), g.RecoveryTimeout.String(), g.SwitchingDelay.String()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (g *GroupStatus) UnmarshalJSON(b []byte) error {
	var j groupStatusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*g = GroupStatus(j.groupStatusAlias)
	var err error
	if g.RecoveryTimeout, err = textform.ParseDuration(j.RecoveryTimeout); err != nil {
		return err
	}
	g.SwitchingDelay, err = textform.ParseDuration(j.SwitchingDelay)
	return err
}

// EndpointStatus is one endpoint of a group, in a GroupStatus.
type EndpointStatus struct {
	// Endpoint is the endpoint as configured ("https://" forms normalized to host:port).
	Endpoint string `json:"endpoint"`
	// Name is the endpoint's EndpointOptions.Name in force; "" (omitted in JSON) when it has
	// none.
	Name string `json:"name,omitempty"`
	// Priority is the endpoint's position in the group's list: 0 is the top priority.
	Priority int `json:"priority"`
	// State is the endpoint's availability in this group. The reason an endpoint is not
	// Available is in the PoolStatus of the same endpoint (LastError, or Health when it is
	// ejected).
	State EndpointState `json:"state"`
	// Since is when the endpoint entered State (or was added to the group).
	Since time.Time `json:"since"`
	// Verdict says why the endpoint is, or is not, available to this group, as the last
	// evaluation of its inputs found (docs/health.md, "One verdict per group"): "usable",
	// "not connected", "ejected", "degraded" (far slower than a usable endpoint of the group:
	// see Brownout), "degraded, but no other endpoint is usable" (available all the same:
	// a slow endpoint is better than none), "ejected, as every connected endpoint of the
	// group is" (available all the same: a fault everywhere is no reason to move), "cooling
	// down after RESOURCE_EXHAUSTED" (PoolStatus.Cooldown), or "cooling down after
	// RESOURCE_EXHAUSTED, but no other endpoint is usable" (available all the same). ""
	// (omitted in JSON) before the group's first
	// evaluation and after Close. State follows the verdict through the group's
	// RecoveryTimeout and SwitchingDelay rules.
	Verdict string `json:"verdict,omitempty"`
	// Brownout is the endpoint's brownout state in this group (BrownoutSettings): an
	// endpoint that is Degraded is not Available to the group although its pool may be,
	// unless no other endpoint of the group is usable (Verdict); nil when brownout detection
	// is off.
	Brownout *BrownoutStatus `json:"brownout,omitempty"`
}

// PoolStatus is one endpoint's channel pool in a Status. A pool is shared by every group
// that lists its endpoint.
type PoolStatus struct {
	// Endpoint is the pool's endpoint.
	Endpoint string `json:"endpoint"`
	// Name is the endpoint's EndpointOptions.Name in force (for a retired pool: the one it
	// had when it was retired, which a configured endpoint may have taken since); ""
	// (omitted in JSON) when it has none.
	Name string `json:"name,omitempty"`
	// Connectivity is the pool's gRPC connectivity state: "READY" when at least one of its
	// channels is; "CONNECTING", "TRANSIENT_FAILURE" (its connection attempts fail), "IDLE",
	// or "SHUTDOWN" once closed.
	Connectivity string `json:"connectivity"`
	// Since is when Connectivity last changed (or the pool was dialed).
	Since time.Time `json:"since"`
	// LastError is the pool's most recent connection error, nil if it has had none. It is
	// history: the pool may have recovered since (compare LastError.At with Since).
	LastError *ConnError `json:"lastError,omitempty"`
	// InFlight counts the unary calls and open streams on the pool.
	InFlight int64 `json:"inFlight"`
	// Retired reports that no group lists the endpoint any more: the pool takes no new calls
	// and closes once InFlight reaches zero (or after Settings.DrainTimeout).
	Retired bool `json:"retired"`
	// Health is the endpoint's health from call outcomes (HealthSettings): ejection, last
	// probe, the current interval's calls and failures.
	Health PoolHealth `json:"health"`
	// Cooldown is the endpoint's overload cooldown (after RESOURCE_EXHAUSTED); nil (omitted
	// in JSON) if it never had one. The groups' verdicts say whether it is skipped now.
	Cooldown *CooldownStatus `json:"cooldown,omitempty"`
}

// EndpointState is an endpoint's availability within a group. Its zero value is
// Unavailable. It is written as its String form in JSON and text.
type EndpointState int

// The endpoint states.
const (
	// Unavailable: the endpoint is down (or never came up) and its RecoveryTimeout has
	// passed, or RecoveryTimeout is zero. The group does not use it while another endpoint is
	// Available.
	Unavailable EndpointState = iota
	// Available: at least one connection to the endpoint is ready, and the endpoint is not
	// ejected by health from call outcomes (HealthSettings).
	Available
	// Recovering: the endpoint is not available, but for less than RecoveryTimeout since it
	// left Available (or since it was added). A current endpoint that is Recovering stays
	// current while no endpoint of higher priority is Available.
	Recovering
)

var endpointStateText = textform.Enum[EndpointState]{Type: "EndpointState", What: "endpoint state",
	Names: []string{Unavailable: "Unavailable", Available: "Available", Recovering: "Recovering"}}

// String returns "Unavailable", "Available" or "Recovering".
func (s EndpointState) String() string { return endpointStateText.String(s) }

// MarshalText returns String's result.
func (s EndpointState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (s *EndpointState) UnmarshalText(b []byte) error { return endpointStateText.Unmarshal(b, s) }
