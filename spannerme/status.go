package spannerme

import (
	"encoding/json"
	"errors"
	"sort"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
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

// MarshalJSON writes a ConfigStatus with its LastError as text (omitted when none).
func (s ConfigStatus) MarshalJSON() ([]byte, error) {
	type alias ConfigStatus
	j := struct {
		alias
		LastError string `json:"lastError,omitempty"`
	}{alias: alias(s)}
	if s.LastError != nil {
		j.LastError = s.LastError.Error()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes; LastError becomes an error with the text
// written.
func (s *ConfigStatus) UnmarshalJSON(b []byte) error {
	type alias ConfigStatus
	var j struct {
		alias
		LastError string `json:"lastError,omitempty"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = ConfigStatus(j.alias)
	if j.LastError != "" {
		s.LastError = errors.New(j.LastError)
	}
	return nil
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
	if g.RecoveryTimeout, err = parseDurationOrZero(j.RecoveryTimeout); err != nil {
		return err
	}
	g.SwitchingDelay, err = parseDurationOrZero(j.SwitchingDelay)
	return err
}

func parseDurationOrZero(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
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

var endpointStateText = enumText[EndpointState]{typ: "EndpointState", what: "endpoint state",
	names: []string{Unavailable: "Unavailable", Available: "Available", Recovering: "Recovering"}}

// String returns "Unavailable", "Available" or "Recovering".
func (s EndpointState) String() string { return endpointStateText.String(s) }

// MarshalText returns String's result.
func (s EndpointState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (s *EndpointState) UnmarshalText(b []byte) error { return endpointStateText.Unmarshal(b, s) }

// endpointStateOf maps the state machine's states to the public ones.
func endpointStateOf(s multiendpoint.State) EndpointState {
	switch s {
	case multiendpoint.Available:
		return Available
	case multiendpoint.Recovering:
		return Recovering
	}
	return Unavailable
}

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

var switchReasonText = enumText[SwitchReason]{typ: "SwitchReason", what: "switch reason",
	names: []string{Fallback: "fallback", Recovery: "recovery", Reconfiguration: "reconfiguration"}}

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

// switchEventOf converts a state machine's event.
func switchEventOf(ev multiendpoint.Event) SwitchEvent {
	return SwitchEvent{Name: ev.Name, From: ev.From, To: ev.To, Reason: switchReasonOf(ev.Reason), At: ev.At}
}

// groupStatusOf converts a state machine's status.
func groupStatusOf(s multiendpoint.Status) GroupStatus {
	g := GroupStatus{
		Name: s.Name, Current: s.Current, PendingSwitch: s.PendingSwitch, PendingSwitchAt: s.PendingSwitchAt,
		RecoveryTimeout: s.RecoveryTimeout, SwitchingDelay: s.SwitchingDelay, Closed: s.Closed,
		Endpoints: make([]EndpointStatus, len(s.Endpoints)),
	}
	for i, e := range s.Endpoints {
		g.Endpoints[i] = EndpointStatus{Endpoint: e.Endpoint, Priority: e.Priority, State: endpointStateOf(e.State), Since: e.Since}
	}
	return g
}

// Status returns a view of the groups, pools and unknown group names. It is safe for
// concurrent use with everything else, takes no lock a call waits for, and never fails: on
// a zero-value GCPMultiEndpoint it reports Closed and nothing else; after Close it reports
// Closed, no current endpoint, every endpoint Unavailable (Since: when Close was called) and
// every pool SHUTDOWN.
func (gme *GCPMultiEndpoint) Status() Status {
	gme.mu.Lock()
	st := Status{Closed: gme.closed || gme.zero(), UnknownGroups: map[string]int64{}, WaitingCalls: gme.waiting.Load(),
		Groups: []GroupStatus{}, Pools: []PoolStatus{}, Config: gme.configStatus.Load().clone()}
	for f := range gme.fronts {
		if f.kind == configuratorFront {
			st.Configurators++
		} else {
			st.Clients++
		}
	}
	closedAt := gme.closedAt
	var directed directedReads
	if s := gme.snap.Load(); s != nil {
		st.Default, directed = s.defaultName, s.directed
	} else {
		st.Default = gme.lastDefault
	}
	groups := make([]*multiendpoint.MultiEndpoint, 0, len(gme.groups))
	for _, me := range gme.groups {
		groups = append(groups, me)
	}
	pools := gme.allPoolsLocked()
	names := gme.namesLocked()
	gme.mu.Unlock()
	if gme.zero() {
		st.At = time.Now()
	} else {
		st.At, st.Started = gme.obs.now(), gme.obs.started
	}
	for _, me := range groups {
		g := groupStatusOf(me.Status())
		for i := range g.Endpoints {
			g.Endpoints[i].Name = names[g.Endpoints[i].Endpoint]
		}
		if !gme.zero() {
			g.Switches = gme.obs.history.of(g.Name)
		}
		if g.Switches == nil {
			g.Switches = []SwitchEvent{}
		}
		g.DirectedReads = directedReadsStatusOf(directed[g.Name])
		for i := range g.Endpoints {
			e := &g.Endpoints[i]
			e.Brownout = gme.brownoutStatus(g.Name, e.Endpoint)
			if r, ok := gme.verdicts.reason(g.Name, e.Endpoint); ok && !st.Closed {
				e.Verdict = r.String()
			}
		}
		if st.Closed {
			// Nothing serves after Close: say so, whatever the stopped groups last knew.
			g.Current, g.PendingSwitch, g.PendingSwitchAt, g.Closed = "", "", time.Time{}, true
			for i := range g.Endpoints {
				g.Endpoints[i].State, g.Endpoints[i].Since = Unavailable, closedAt
			}
		}
		st.Groups = append(st.Groups, g)
	}
	sort.Slice(st.Groups, func(i, j int) bool { return st.Groups[i].Name < st.Groups[j].Name })
	for _, p := range pools {
		ps := poolStatusOf(p.Status())
		ps.Name = poolName(p)
		if !p.Retired() {
			ps.Cooldown = gme.cool.statusOf(p.Endpoint())
		}
		if st.Closed {
			ps.Connectivity = connectivity.Shutdown.String()
			ps.Since = closedAt
		}
		st.Pools = append(st.Pools, ps)
	}
	sort.SliceStable(st.Pools, func(i, j int) bool {
		a, b := st.Pools[i], st.Pools[j]
		if a.Endpoint != b.Endpoint {
			return a.Endpoint < b.Endpoint
		}
		return !a.Retired && b.Retired
	})
	st.Retries = gme.retryStatus()
	gme.unknown.Range(func(k, v any) bool {
		st.UnknownGroups[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return st
}

// brownoutStatus returns endpoint's brownout status in group; nil when off (or for a zero
// value).
func (gme *GCPMultiEndpoint) brownoutStatus(group, endpoint string) *BrownoutStatus {
	if gme.zero() {
		return nil
	}
	return gme.brown.statusOf(group, endpoint)
}

// poolStatusOf converts a pool's status.
func poolStatusOf(s pool.Status) PoolStatus {
	ps := PoolStatus{Endpoint: s.Endpoint, Connectivity: s.Connectivity.String(), Since: s.Since,
		InFlight: s.InFlight, Retired: s.Retired, Health: poolHealthOf(s)}
	if e := s.LastError; e != nil {
		ps.LastError = &ConnError{Kind: ConnErrorKind(e.Kind), Message: e.Message, At: e.At}
	}
	return ps
}

// metricsView returns what the observable metrics read; false after Close (and on a zero
// value), when only the waiting calls are observed.
func (gme *GCPMultiEndpoint) metricsView() (metricsView, bool) {
	v := metricsView{waiting: gme.waiting.Load()}
	if gme.zero() {
		return v, false
	}
	gme.mu.Lock()
	if gme.closed {
		gme.mu.Unlock()
		return v, false
	}
	pools := gme.allPoolsLocked()
	v.names = gme.namesLocked()
	for p := range gme.retired {
		if n := poolName(p); n != "" && gme.pools[p.Endpoint()] == nil {
			v.names[p.Endpoint()] = n // a configured endpoint's name, even none, wins
		}
	}
	groups := make([]*multiendpoint.MultiEndpoint, 0, len(gme.groups))
	for _, me := range gme.groups {
		groups = append(groups, me)
	}
	gme.mu.Unlock()
	v.active = make(map[string]int64, len(pools))
	for _, p := range pools {
		v.active[p.Endpoint()] += p.InFlight()
	}
	for _, me := range groups {
		v.groups = append(v.groups, me.Status())
	}
	v.degraded = gme.brown.degradedSet()
	return v, true
}

// namesLocked returns the names of the configured endpoints that have one, by endpoint.
// gme.mu must be held.
func (gme *GCPMultiEndpoint) namesLocked() map[string]string {
	names := make(map[string]string)
	for e, p := range gme.pools {
		if n := poolName(p); n != "" {
			names[e] = n
		}
	}
	return names
}

// allPoolsLocked returns the pools of the configured endpoints and the retired ones still
// draining. gme.mu must be held.
func (gme *GCPMultiEndpoint) allPoolsLocked() []*pool.Pool {
	pools := make([]*pool.Pool, 0, len(gme.pools)+len(gme.retired))
	for _, p := range gme.pools {
		pools = append(pools, p)
	}
	for p := range gme.retired {
		pools = append(pools, p)
	}
	return pools
}
