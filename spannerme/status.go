package spannerme

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
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
	st.Clients, st.Configurators = gme.frontsLocked()
	closedAt := gme.closedAt
	var directed directedReads
	if s := gme.snap.Load(); s != nil {
		st.Default, directed = s.DefaultName, s.Directed
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
		mst := me.Status()
		g := groupStatusOf(mst)
		if !st.Closed {
			g.Tiers = tiersStatus(&gme.tiers, mst)
		}
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
		if !gme.zero() && !st.Closed {
			g.Hedging = gme.hedgingStatus(g.Name)
		}
		for i := range g.Endpoints {
			e := &g.Endpoints[i]
			e.Brownout = gme.brownoutStatus(g.Name, e.Endpoint)
			if r, ok := gme.judge.Verdicts().Reason(g.Name, e.Endpoint); ok && !st.Closed {
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
			ps.Cooldown = gme.cooldownStatus(p.Endpoint())
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
	if gme.zero() || !gme.judge.Brownouts().On() {
		return nil
	}
	st := &BrownoutStatus{}
	if v, ok := gme.judge.Brownouts().StatusOf(group, endpoint); ok {
		st.Degraded, st.Since, st.Fallback, st.FallbackLatency = v.Degraded, v.Since, v.Fallback, v.FallbackLatency
		if v.Known {
			st.Latency = v.Latency
		}
	}
	return st
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

// NoEndpointError is a call's error together with what explains it: the groups that had no
// available endpoint when the error was examined, each endpoint of them and why it was not
// available. Explain returns it. It wraps the call's error, so errors.Is, errors.As,
// status.Code and spanner.ErrCode see that error through it.
type NoEndpointError struct {
	// Err is the call's error, unchanged.
	Err error
	// Groups are the groups whose current endpoint was not Available, the default group
	// first, then by name. Never empty.
	Groups []GroupDown
	// At is the Status's At: when the causes were read.
	At time.Time
}

// GroupDown is one group in a NoEndpointError.
type GroupDown struct {
	// Group is the group's name; Default reports whether it is the default group (the one
	// that the Spanner client's session calls use first).
	Group   string
	Default bool
	// Current is the group's current endpoint.
	Current string
	// Endpoints are the group's endpoints in priority order (Priority 0 first).
	Endpoints []EndpointDown
}

// EndpointDown is one endpoint of a GroupDown: its availability in the group and its pool's
// connectivity, last connection error and health.
type EndpointDown struct {
	// Endpoint, Name and Priority are as in EndpointStatus.
	Endpoint string
	Name     string
	Priority int
	// State is the endpoint's state in the group.
	State EndpointState
	// Connectivity is its pool's connectivity state, as in PoolStatus ("" if the Status has
	// no pool for it).
	Connectivity string
	// LastError is its pool's most recent connection error, nil when it has had none: it
	// may be history when Connectivity is "READY" (then the endpoint is not Available
	// because of its health).
	LastError *ConnError
	// Ejected is the ejection's reason and detail when health from call outcomes has
	// ejected the endpoint ("" when it is not ejected).
	Ejected string
}

// Explain returns what made a call's error err likely: the groups of st that have no
// available current endpoint, with each of their endpoints, its state, its pool's
// connectivity and its last connection error (for example "refused: ... connection
// refused"). Call it with a failed call's error and the client's Status taken at once:
//
//	if err != nil {
//		if why := spannerme.Explain(err, gme.Status()); why != nil {
//			err = why // err's text, then each group, endpoint and connection error
//		}
//	}
//
// It is how an application gets the cause of the Spanner client's own session wait, whose
// error ("timeout / context canceled during getting session.") has none: the client waits
// for its multiplexed session without any call of the application's reaching spannerme
// (docs/production.md, "Troubleshooting").
//
// It returns nil when err is nil, when err's gRPC code (spanner.ErrCode) is not one that
// endpoints that cannot be reached explain (DEADLINE_EXCEEDED, UNAVAILABLE, CANCELED,
// FAILED_PRECONDITION), when st is Closed, and when every group's current endpoint is
// Available. The causes are those of st, not of the moment err was made, so take st as soon
// as the call fails. It reads only its arguments and is safe for concurrent use.
func Explain(err error, st Status) *NoEndpointError {
	if err == nil || st.Closed {
		return nil
	}
	code := spanner.ErrCode(err)
	if code == codes.Unknown {
		if errors.Is(err, context.DeadlineExceeded) {
			code = codes.DeadlineExceeded
		} else if errors.Is(err, context.Canceled) {
			code = codes.Canceled
		} else {
			code = status.Code(err)
		}
	}
	switch code {
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.FailedPrecondition:
	default:
		return nil
	}
	pools := make(map[string]PoolStatus, len(st.Pools))
	for _, p := range st.Pools {
		if !p.Retired {
			pools[p.Endpoint] = p
		}
	}
	e := &NoEndpointError{Err: err, At: st.At}
	for _, g := range st.Groups {
		if g.Closed || currentAvailable(g) {
			continue
		}
		gd := GroupDown{Group: g.Name, Default: g.Name == st.Default, Current: g.Current}
		for _, ep := range g.Endpoints {
			p := pools[ep.Endpoint]
			d := EndpointDown{Endpoint: ep.Endpoint, Name: ep.Name, Priority: ep.Priority, State: ep.State,
				Connectivity: p.Connectivity, LastError: p.LastError}
			if p.Health.Ejected {
				d.Ejected = p.Health.Reason.String()
				if p.Health.Detail != "" {
					d.Ejected += ": " + p.Health.Detail
				}
			}
			gd.Endpoints = append(gd.Endpoints, d)
		}
		if gd.Default {
			e.Groups = append([]GroupDown{gd}, e.Groups...)
		} else {
			e.Groups = append(e.Groups, gd)
		}
	}
	if len(e.Groups) == 0 {
		return nil
	}
	return e
}

// currentAvailable reports whether g's current endpoint is Available.
func currentAvailable(g GroupStatus) bool {
	for _, ep := range g.Endpoints {
		if ep.Endpoint == g.Current {
			return ep.State == Available
		}
	}
	return false
}

// Error returns the call's error, then, for each group, its endpoints and their causes:
//
//	<call's error>; spannerme: group "g" has no available endpoint: endpoint 127.0.0.1:9
//	(priority 0): Unavailable, pool TRANSIENT_FAILURE, last connection error 1.2s ago:
//	refused: ... connection refused
func (e *NoEndpointError) Error() string {
	var b strings.Builder
	if e.Err != nil {
		b.WriteString(e.Err.Error())
		b.WriteString("; ")
	}
	b.WriteString("spannerme: ")
	for i, g := range e.Groups {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "group %q has no available endpoint: ", g.Group)
		for j, d := range g.Endpoints {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(d.text(e.At))
		}
	}
	return b.String()
}

// text is one endpoint of Error: "endpoint A (name, priority 0): State, pool STATE, cause".
func (d EndpointDown) text(at time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "endpoint %s (", d.Endpoint)
	if d.Name != "" {
		b.WriteString(d.Name + ", ")
	}
	fmt.Fprintf(&b, "priority %d): %s", d.Priority, d.State)
	if d.Connectivity != "" {
		b.WriteString(", pool " + d.Connectivity)
	}
	switch {
	case d.Ejected != "":
		b.WriteString(", ejected (" + d.Ejected + ")")
	case d.LastError != nil:
		ago := "at an unknown time"
		if !d.LastError.At.IsZero() && !at.IsZero() {
			ago = at.Sub(d.LastError.At).Round(time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(&b, ", last connection error %s: %s: %s", ago, d.LastError.Kind, d.LastError.Message)
	default:
		b.WriteString(", no connection attempt has failed yet")
	}
	return b.String()
}

// Unwrap returns the call's error.
func (e *NoEndpointError) Unwrap() error { return e.Err }

// retryStatus returns the retry counters and the budget.
func (gme *GCPMultiEndpoint) retryStatus() RetryStatus {
	c := gme.steering.Counts()
	return RetryStatus{Steered: c.Steered, Refused: c.Refused, OverloadSkipped: c.OverloadSkipped, Resent: c.Resent,
		ResendRefused: c.ResendRefused, Tokens: c.Tokens}
}

// cooldownStatus returns endpoint's cooldown in Status form, nil if it never cooled.
func (gme *GCPMultiEndpoint) cooldownStatus(endpoint string) *CooldownStatus {
	c, ok := gme.steering.Cooldowns().StatusOf(endpoint)
	if !ok {
		return nil
	}
	return &CooldownStatus{Cooling: c.Cooling, Until: c.Until, Length: c.Length, FromRetryInfo: c.FromRetryInfo,
		Repeats: c.Repeats, Total: c.Total, LastOverload: c.LastOverload}
}
