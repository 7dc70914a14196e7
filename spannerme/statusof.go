package spannerme

import (
	"sort"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

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
		st.At, st.Started = gme.obs.Now(), gme.obs.Started()
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
			g.Switches = switchEventsOf(gme.obs.History(g.Name))
		}
		if g.Switches == nil {
			g.Switches = []SwitchEvent{}
		}
		g.DirectedReads = directedReadsStatusOf(directed[g.Name])
		if !gme.zero() && !st.Closed {
			g.Hedging = hedgingStatusOf(gme.hedger.Group(g.Name))
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
	gme.unknown.CountsInto(st.UnknownGroups)
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
	return &CooldownStatus{Cooling: c.Cooling, AnsweredBy: c.AnsweredBy, Until: c.Until, Length: c.Length, FromRetryInfo: c.FromRetryInfo,
		Repeats: c.Repeats, Total: c.Total, LastOverload: c.LastOverload}
}

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
