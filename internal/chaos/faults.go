package chaos

import (
	"fmt"
	"strings"
	"time"
)

// Kind is one kind of scheduled step: a fault, the heal that ends it, or a reconfiguration.
type Kind int

// The kinds of step. A fault holds until its heal step (planned with it); reset and
// reconfigure are instant.
const (
	// KindNone is the zero Kind: no fault.
	KindNone Kind = iota
	// TCP layer (spannermetest.Endpoint, the PSC endpoint's address).
	KindDown            // listener closed: dials refused, live connections reset
	KindUp              // heals KindDown: listens again
	KindReset           // instant: every live connection reset (Drop: the mode is kept)
	KindBlackhole       // connections reset, reconnects accepted and never answered
	KindSilentBlackhole // live connections stop carrying bytes, no reset: only keepalive notices
	KindSlow            // added latency, optionally a bandwidth limit
	KindPass            // heals KindBlackhole, KindSilentBlackhole, KindSlow
	// gRPC frontend layer (spannermetest frontend: HTTP/2 ends there, as at a Google frontend).
	KindFrontendUnavailable // every call answered UNAVAILABLE, connections READY
	KindFrontendHang        // every call accepted and never answered
	KindFrontendPartial     // a fraction of calls answered UNAVAILABLE
	KindFrontendLatency     // every call delayed
	KindFrontendRestart     // instant: the frontend drops every connection without GOAWAY
	KindFrontendPass        // heals every frontend fault
	// KindFrontendCommitFail: every Commit answered UNAVAILABLE, every other call passes (a
	// gray failure: writes refused, reads fine; F25).
	KindFrontendCommitFail
	// KindFrontendPartialReset: instant: the frontend drops half of its connections (a load
	// balancer recycling some), with the calls in flight on them.
	KindFrontendPartialReset
	// KindFrontendBrownout: every call delayed 350-600ms, held longer than the client's
	// brownout Window, so that the client degrades the endpoint (docs/health.md, Brownout).
	KindFrontendBrownout
	// KindDatabaseUnavailable: every call answered UNAVAILABLE by every endpoint's frontend at
	// once, for dbMin to dbMax (the database, not a path to it, is failing); one step per
	// endpoint at one time, healed by KindFrontendPass on every endpoint at one time.
	KindDatabaseUnavailable
	// KindFrontendCommitFailLong: KindFrontendCommitFail held for tens of seconds
	// (commitLongMin to commitLongMax), many ejection times: the client must eject the
	// endpoint for its writes once and readmit it only when its commit path answers.
	KindFrontendCommitFailLong
	// KindFlapDown: a member flap (issue 28): one member of a tiered group's top tier goes down
	// (the TCP fake's listener closed, as KindDown) and comes back (KindFlapUp) every 1-3s for
	// flapMin to flapMax while its peer stays fault-free; the last KindFlapUp is a KindUp, the
	// heal. The flap is in force on the member's TCP layer from its first KindFlapDown to that
	// heal, so the member is never fault-free meanwhile.
	KindFlapDown
	// KindFlapUp: the flapping member listens again, the flap goes on (see KindFlapDown).
	KindFlapUp
	// KindDieYoung: the TCP fake answers every new connection with the HTTP/2 server
	// preface (SETTINGS), then GOAWAY(NO_ERROR), and closes it: connections that die young
	// (a draining proxy or load balancer on the path; issue 40). Its live connections are
	// reset when it begins, so the client must reconnect into it. Healed by KindPass.
	KindDieYoung
	// Database layer: the database behind every frontend, not one endpoint (State.Database).
	// KindQueryOverload: the database refuses one query (the load's marked query,
	// heavyQueryHeader) with RESOURCE_EXHAUSTED and no RetryInfo at every frontend: a query
	// over a resource limit, which no endpoint would serve. Healed by KindOverloadPass.
	KindQueryOverload
	// KindDatabaseOverload: the database sheds load: every frontend fails
	// dbOverloadFraction of the application's data calls with RESOURCE_EXHAUSTED carrying a
	// RetryInfo of dbOverloadDelay, all at one time. Healed by KindOverloadPass.
	KindDatabaseOverload
	// KindOverloadPass heals KindQueryOverload and KindDatabaseOverload.
	KindOverloadPass
	// Configuration.
	KindReconfigure // UpdateMultiEndpoints: endpoints added, removed, reordered
	numKinds
)

// layer is where a kind acts.
type layer int

const (
	layerTCP layer = iota
	layerFrontend
	layerConfig
	// layerDatabase: the database behind every endpoint (State.Database); needs frontends.
	layerDatabase
)

// kindInfo describes a kind: its name, its layer, and how it affects an endpoint.
type kindInfo struct {
	name  string
	layer layer
	// hard: while it holds, the endpoint is not healthy: calls through it cannot succeed.
	hard bool
	// silent: a fault that can fail calls on READY connections (hard or not), so connectivity
	// alone never fails the group over; only outcome-based health (docs/health.md) or, for a
	// silent blackhole, HTTP/2 keepalive can.
	silent bool
	// heal is the kind that ends it (0 for instant kinds and heals).
	heal Kind
	// instant: an action that leaves no fault in force (reset, fe-restart).
	instant bool
}

var kinds = [numKinds]kindInfo{
	KindNone:                {name: "none"},
	KindDown:                {name: "down", layer: layerTCP, hard: true, heal: KindUp},
	KindUp:                  {name: "up", layer: layerTCP},
	KindReset:               {name: "reset", layer: layerTCP, instant: true},
	KindBlackhole:           {name: "blackhole", layer: layerTCP, hard: true, heal: KindPass},
	KindSilentBlackhole:     {name: "silent-blackhole", layer: layerTCP, hard: true, silent: true, heal: KindPass},
	KindSlow:                {name: "slow", layer: layerTCP, heal: KindPass},
	KindPass:                {name: "pass", layer: layerTCP},
	KindFrontendUnavailable: {name: "fe-unavailable", layer: layerFrontend, hard: true, silent: true, heal: KindFrontendPass},
	KindFrontendHang:        {name: "fe-hang", layer: layerFrontend, hard: true, silent: true, heal: KindFrontendPass},
	KindFrontendPartial:     {name: "fe-partial", layer: layerFrontend, silent: true, heal: KindFrontendPass},
	KindFrontendLatency:     {name: "fe-latency", layer: layerFrontend, heal: KindFrontendPass},
	KindFrontendRestart:     {name: "fe-restart", layer: layerFrontend, instant: true},
	KindFrontendPass:        {name: "fe-pass", layer: layerFrontend},
	// Commits cannot succeed through it, reads can: not hard (the group still has a healthy
	// endpoint for reads), but silent (READY connections, failing writes).
	KindFrontendCommitFail:   {name: "fe-commit-fail", layer: layerFrontend, silent: true, heal: KindFrontendPass},
	KindFrontendPartialReset: {name: "fe-partial-reset", layer: layerFrontend, instant: true},
	// Calls succeed, slowly: neither hard nor silent; only brownout detection moves traffic.
	KindFrontendBrownout: {name: "fe-brownout", layer: layerFrontend, heal: KindFrontendPass},
	// A fault every endpoint shows: hard and silent on each (READY connections, every call
	// failing), so every group is without a healthy endpoint while it holds.
	KindDatabaseUnavailable: {name: "db-unavailable", layer: layerFrontend, hard: true, silent: true, heal: KindFrontendPass},
	// Reads pass, but it is hard for the plan: the client ejects the endpoint for its writes
	// and its groups leave it, so the plan keeps another healthy endpoint in every group
	// while it holds (without one, every connected endpoint of a group could be ejected, and
	// rule 4 of internal/verdict would send writes back to it).
	KindFrontendCommitFailLong: {name: "fe-commit-fail-long", layer: layerFrontend, hard: true, silent: true, heal: KindFrontendPass},
	// A member flap: hard while the member is down, a fault (not hard) while it is up between
	// two downs; healed by KindUp after its last down.
	KindFlapDown: {name: "flap-down", layer: layerTCP, hard: true, heal: KindUp},
	KindFlapUp:   {name: "flap-up", layer: layerTCP, heal: KindUp},
	// Hard: no new connection lives; the live ones are reset when it begins (see apply).
	KindDieYoung: {name: "die-young", layer: layerTCP, hard: true, heal: KindPass},
	// Neither hard nor silent: every other call passes (query-overload) or passes mostly and is
	// retried by the Spanner client (db-overload, with its RetryInfo); the calls they fail
	// are the database's refusals (classOverload), not a failover's.
	KindQueryOverload:    {name: "query-overload", layer: layerDatabase, heal: KindOverloadPass},
	KindDatabaseOverload: {name: "db-overload", layer: layerDatabase, heal: KindOverloadPass},
	KindOverloadPass:     {name: "overload-pass", layer: layerDatabase},
	KindReconfigure:      {name: "reconfigure", layer: layerConfig},
}

// needsFrontends reports whether kind k acts through the endpoints' gRPC frontends (their own,
// or the database's at every one), so that it is drawn only when they exist.
func (k Kind) needsFrontends() bool {
	return kinds[k].layer == layerFrontend || kinds[k].layer == layerDatabase
}

func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kinds[k].name
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// hardPartial is the fraction of failed calls from which a partial failure makes an endpoint
// unhealthy. Below it the Spanner client's retries of UNAVAILABLE absorb the failures (F15).
const hardPartial = 0.5

// Fault is one fault in force on one layer of one endpoint, with its parameters.
type Fault struct {
	Kind Kind
	// Latency is the added one-way latency (KindSlow) or per-call delay (KindFrontendLatency,
	// KindFrontendBrownout).
	Latency time.Duration
	// Bandwidth is KindSlow's limit in bytes per second per direction; 0 means none.
	Bandwidth int
	// Fraction is KindFrontendPartial's share of calls that fail.
	Fraction float64
	// Step is the index of the step that started the fault, to attribute failures to it.
	Step int
}

// active reports whether f is a fault (not the zero "none").
func (f Fault) active() bool { return f.Kind != KindNone }

// hard reports whether f makes its endpoint unhealthy (see kindInfo.hard).
func (f Fault) hard() bool {
	if !f.active() {
		return false
	}
	if f.Kind == KindFrontendPartial {
		return f.Fraction >= hardPartial
	}
	return kinds[f.Kind].hard
}

// slow reports whether f only delays calls through its endpoint: a brownout, a frontend
// latency or a slow TCP path. Only such a fault may make the client degrade the endpoint.
func (f Fault) slow() bool {
	return f.Kind == KindFrontendBrownout || f.Kind == KindFrontendLatency || f.Kind == KindSlow
}

// silent reports whether f can fail calls on READY connections (see kindInfo.silent).
func (f Fault) silent() bool { return f.active() && kinds[f.Kind].silent }

// limited reports whether f is a slow path with a bandwidth limit. The load asks more of such
// a path than it carries: each stream query reads eventRows rows of eventPayload bytes (about
// 200 KiB) and three stream workers may share an endpoint, several hundred KiB queued behind
// 128 KiB/s to 1 MiB/s, so a call through it may wait seconds behind those bytes on a READY
// connection, as a plain client's would (State.limitedOnly says when the judge excuses it).
func (f Fault) limited() bool { return f.Kind == KindSlow && f.Bandwidth > 0 }

func (f Fault) String() string {
	if !f.active() {
		return "none"
	}
	var b strings.Builder
	b.WriteString(f.Kind.String())
	switch f.Kind {
	case KindSlow:
		fmt.Fprintf(&b, "(%v", f.Latency)
		if f.Bandwidth > 0 {
			fmt.Fprintf(&b, ", %d KiB/s", f.Bandwidth>>10)
		}
		b.WriteString(")")
	case KindFrontendLatency, KindFrontendBrownout:
		fmt.Fprintf(&b, "(%v)", f.Latency)
	case KindFrontendPartial, KindDatabaseOverload:
		fmt.Fprintf(&b, "(%.0f%%)", 100*f.Fraction)
	}
	return b.String()
}
