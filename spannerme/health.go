package spannerme

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/textform"
)

// HealthSettings tunes endpoint health from call outcomes (docs/health.md): an
// endpoint whose calls fail or stall while its connections stay up is ejected, so that every
// group that lists it counts it as not available (RecoveryTimeout, then failover, as for a
// lost connection), and it is readmitted when a probe passes. It is on by default; the zero
// value takes every default. Settings are fixed when the GCPMultiEndpoint is created.
//
// What counts as a failure (UNAVAILABLE answered on a live connection, a stream reset), as
// a timeout (a deadline passed before any answer: the endpoint becomes suspect and a probe
// decides) or as nothing (a lost connection, a call the caller cancelled), per gRPC code and
// transport error: the table in docs/health.md. Application errors are successes.
//
// Calls are counted in classes, each against the thresholds on its own: reads, writes
// (Commit, DML, batch DML, read-write BeginTransaction), session calls, and other calls
// (docs/health.md lists the methods). An endpoint where one class keeps failing while another
// succeeds (a gray failure: commits refused, reads fine) is ejected, and the ejection's Detail
// names the class and the method.
//
// Negative durations and counts, and a FailurePercentage above 100, are configuration
// errors (*ConfigError naming the field).
type HealthSettings struct {
	// Disabled turns health from call outcomes off: no outcome is tracked, no probe is
	// sent, no endpoint is ejected; availability is connectivity alone.
	Disabled bool
	// Interval is the counting interval of FailurePercentage, and an endpoint's ejection
	// multiplier shrinks by one after each whole Interval it spends not ejected. Zero means
	// 10s (gRPC outlier detection's default interval, gRFC A50).
	Interval time.Duration
	// ConsecutiveFailures failures in a row, with no success between them, eject the
	// endpoint. Zero means 10: the Spanner client retries UNAVAILABLE within about a second
	// (backoff from 20ms, x1.3; cloud.google.com/go/spanner, retry.go), so a dead endpoint
	// reaches 10 at once, while independent failures at 5% reach it with probability 1e-13
	// per call.
	ConsecutiveFailures int
	// FailurePercentage: when more than this percentage of the calls of one Interval failed,
	// with at least MinimumCalls calls, the endpoint is ejected. Zero means 50 (Envoy's
	// default is 85; a Spanner endpoint failing half its calls makes every query retry).
	// At most 100.
	FailurePercentage int
	// MinimumCalls is the call volume FailurePercentage needs within one Interval. Zero
	// means 20: with FailurePercentage 50 that is at least 11 failures, about as many as
	// ConsecutiveFailures asks, while one endpoint of one Spanner client may carry a few
	// calls per second (Envoy's default, 50, is sized for hosts of a large cluster:
	// failure_percentage_request_volume, envoy/config/cluster/v3/outlier_detection.proto).
	MinimumCalls int
	// BaseEjectionTime is how long a first ejection lasts; the n-th lasts n times longer
	// (n shrinks after healthy intervals), at most MaxEjectionTime. Then the endpoint is
	// probed, and readmitted by the first probe that passes. Zero means 30s; zero
	// MaxEjectionTime means 300s (both gRFC A50's defaults).
	BaseEjectionTime time.Duration
	MaxEjectionTime  time.Duration
	// ProbeTimeout is the deadline of one probe. Zero means 2s: a probe is one small RPC, and
	// 2s tolerates a loaded backend.
	ProbeTimeout time.Duration
	// ProbeInterval: an endpoint that had no successful call for this long is probed (a
	// standby, or an idle current endpoint), so that a standby whose path silently died is
	// ejected before a failover lands on it; an ejected endpoint whose readmission probe
	// failed is probed again after it. Zero means 10s: at most 6 probes per minute per
	// idle endpoint, none for an endpoint whose calls succeed.
	ProbeInterval time.Duration
	// ResourceExhaustedIsFailure makes RESOURCE_EXHAUSTED a failure. By default it is a
	// success: it is the backend's answer (Spanner's overload signal), every endpoint of a
	// group leads to the same Spanner instance, and the Spanner client itself never cools
	// down its default endpoint on it, only the replica endpoints of its location-aware
	// routing (cloud.google.com/go/spanner v1.96.1, location_aware_client.go,
	// maybeMarkEndpointCoolingDown; endpoint_overload_cooldown.go: 10s doubling to 1
	// minute). Set it when an endpoint's frontend, not the database, is what overloads.
	ResourceExhaustedIsFailure bool
	// Probe sends one probe through one endpoint's channel pool, conn, and returns nil if the
	// backend answered (with any answer that proves the path works), an error otherwise. ctx
	// carries ProbeTimeout and is cancelled by Close and when the endpoint is removed; Probe
	// must return once ctx is done (Close waits for it). It is called concurrently for
	// different endpoints, and at most twice at a time per endpoint: one health probe and
	// one latency probe (Brownout; its ctx also carries ProbeTimeout). Probes go to the pool
	// directly, not through routing, and are not counted as calls. conn sends a unary call as
	// a stream of one message each way (as gRPC's own Invoke does), so it goes through the
	// pool's stream interceptors, not its unary ones: that is how a probe that waited for a
	// free stream behind the calls is told from one that was sent (such a probe decides
	// nothing, and its latency runs from when it was sent). A latency probe's conn opens
	// its stream on the pool's latency connection (a connection no call uses:
	// docs/health.md, "Latency, like for like") while it is READY, with no interceptor and
	// no call option of the dial options (their credentials apply); on the pool's channels
	// otherwise. ProbeClass(ctx) says what the probe must prove: the probes that may readmit
	// an endpoint ejected because one class of its calls kept failing (its writes, say)
	// should go down that class's path (SpannerProbe does; docs/health.md, "Readmission
	// probes what failed"). Nil means SpannerProbe for
	// NewMultiEndpointClient* and NewGCPMultiEndpointForSpanner (of the database they are
	// given: one probe serves every client and database over the GCPMultiEndpoint), and
	// UnimplementedMethodProbe for NewGCPMultiEndpoint*.
	Probe ProbeFunc
	// Brownout tunes brownout detection: an endpoint far slower than the other endpoints of
	// its group is degraded in that group. It is on with health (Disabled turns both off).
	Brownout BrownoutSettings
}

// BrownoutSettings tunes brownout detection: every endpoint is sent a latency probe
// (HealthSettings.Probe) every ProbeInterval, and in each group an endpoint at least Ratio
// times and at least Margin slower than the fastest other available endpoint, for Window, is
// degraded: not available to that group (RecoveryTimeout, then failover, as for a lost
// connection) until it is fast again. The rule, its hysteresis and its cost are in
// docs/health.md, "Brownout" (the rule is internal/brownout's).
//
// The zero value takes every default. A Ratio below 1 (other than 0), NaN or infinite, and
// negative durations are configuration errors (*ConfigError naming the field).
type BrownoutSettings struct {
	// Disabled turns brownout detection off: no latency probe is sent, no endpoint is
	// degraded. Health from call outcomes stays on.
	Disabled bool
	// Ratio is how many times slower than its fallback an endpoint must be. Zero means 4.
	Ratio float64
	// Margin is how much slower than its fallback, in time, an endpoint must be. Zero
	// means 200ms.
	Margin time.Duration
	// Window is how long both conditions must hold (at every latency sample) before an
	// endpoint is degraded, and how long the recovery condition must hold before it is no
	// longer degraded. Zero means 10s.
	Window time.Duration
	// ProbeInterval is the time between two latency probes of one endpoint (from the start
	// of one to the start of the next; one that takes longer is followed by the next at
	// once). Zero means 2s: 30 probes per minute per endpoint.
	ProbeInterval time.Duration
}

func (b BrownoutSettings) withDefaults() BrownoutSettings {
	if b.Ratio == 0 {
		b.Ratio = 4
	}
	if b.Margin == 0 {
		b.Margin = 200 * time.Millisecond
	}
	if b.Window == 0 {
		b.Window = 10 * time.Second
	}
	if b.ProbeInterval == 0 {
		b.ProbeInterval = 2 * time.Second
	}
	return b
}

// validate returns a *ConfigError naming the first bad field.
func (b BrownoutSettings) validate() error {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"Margin", b.Margin}, {"Window", b.Window}, {"ProbeInterval", b.ProbeInterval}} {
		if d.v < 0 {
			return &ConfigError{Index: -1, Problem: fmt.Sprintf("Settings.Health.Brownout.%s is negative (%v)", d.field, d.v)}
		}
	}
	if b.Ratio != 0 && !(b.Ratio >= 1 && !math.IsInf(b.Ratio, 1)) {
		return &ConfigError{Index: -1, Problem: fmt.Sprintf("Settings.Health.Brownout.Ratio must be at least 1 and finite, or 0 for the default 4 (got %v)", b.Ratio)}
	}
	return nil
}

// rule returns the brownout rule of b, which has its defaults.
func (b BrownoutSettings) rule() brownout.Rule {
	return brownout.Rule{Ratio: b.Ratio, Margin: b.Margin, Window: b.Window}
}

// ProbeFunc probes one endpoint through its channel pool; see HealthSettings.Probe.
type ProbeFunc func(ctx context.Context, conn grpc.ClientConnInterface) error

func (h HealthSettings) withDefaults() HealthSettings {
	if h.ProbeTimeout <= 0 {
		h.ProbeTimeout = 2 * time.Second
	}
	if h.Probe == nil {
		h.Probe = UnimplementedMethodProbe
	}
	c := h.detectorConfig().WithDefaults()
	h.Interval, h.ConsecutiveFailures, h.FailurePercentage, h.MinimumCalls = c.Interval, c.ConsecutiveFailures, c.FailurePercentage, c.MinimumCalls
	h.BaseEjectionTime, h.MaxEjectionTime, h.ProbeInterval = c.BaseEjectionTime, c.MaxEjectionTime, c.ProbeInterval
	h.Brownout = h.Brownout.withDefaults()
	return h
}

func (h HealthSettings) detectorConfig() health.Config {
	return health.Config{Interval: h.Interval, ConsecutiveFailures: h.ConsecutiveFailures, FailurePercentage: h.FailurePercentage,
		MinimumCalls: h.MinimumCalls, BaseEjectionTime: h.BaseEjectionTime, MaxEjectionTime: h.MaxEjectionTime,
		ProbeInterval: h.ProbeInterval}
}

// validate returns a *ConfigError naming the first negative field, or a FailurePercentage
// above 100, or the first bad field of Brownout.
func (h HealthSettings) validate() error {
	bad := func(field string, v any) error {
		return &ConfigError{Index: -1, Problem: fmt.Sprintf("Settings.Health.%s is negative (%v)", field, v)}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"Interval", h.Interval}, {"BaseEjectionTime", h.BaseEjectionTime}, {"MaxEjectionTime", h.MaxEjectionTime},
		{"ProbeTimeout", h.ProbeTimeout}, {"ProbeInterval", h.ProbeInterval}} {
		if d.v < 0 {
			return bad(d.field, d.v)
		}
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"ConsecutiveFailures", h.ConsecutiveFailures}, {"FailurePercentage", h.FailurePercentage}, {"MinimumCalls", h.MinimumCalls}} {
		if n.v < 0 {
			return bad(n.field, n.v)
		}
	}
	if h.FailurePercentage > 100 {
		return &ConfigError{Index: -1, Problem: fmt.Sprintf("Settings.Health.FailurePercentage is above 100 (%d)", h.FailurePercentage)}
	}
	return h.Brownout.validate()
}

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

// poolOptions returns the pools' health options; nil when health is off. h has its
// defaults.
func (h HealthSettings) poolOptions() *pool.HealthOptions {
	if h.Disabled {
		return nil
	}
	o := &pool.HealthOptions{Config: h.detectorConfig(), ProbeTimeout: h.ProbeTimeout, Probe: h.Probe,
		OverloadIsFailure: h.ResourceExhaustedIsFailure}
	if h.brownoutOn() {
		o.Latency = &pool.LatencyOptions{Interval: h.Brownout.ProbeInterval, Timeout: h.ProbeTimeout, Probe: h.Probe}
	}
	return o
}

// brownoutOn reports whether brownout detection is on: health is on and Brownout is not
// disabled.
func (h HealthSettings) brownoutOn() bool { return !h.Disabled && !h.Brownout.Disabled }

// healthFields is HealthSettings without Probe, for comparing configurations.
type healthFields struct {
	disabled, overload bool
	cfg                health.Config
	probeTimeout       time.Duration
	brownout           BrownoutSettings
}

func (h HealthSettings) comparable() healthFields {
	return healthFields{disabled: h.Disabled, overload: h.ResourceExhaustedIsFailure, cfg: h.detectorConfig(), probeTimeout: h.ProbeTimeout,
		brownout: h.Brownout}
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

// ProbeSessionID is the session ID SpannerProbe asks for. No such session exists: Spanner
// answers NOT_FOUND ("Session not found").
const ProbeSessionID = "spannerme-health-probe"

// SpannerProbe returns the probe NewMultiEndpointClient* install by default for database
// ("projects/P/instances/I/databases/D"): one call, for a session of that database that does
// not exist, down the path the probe must prove (ProbeClass):
//
//   - "writes" (the probes that may readmit an endpoint ejected because its commits, DML or
//     rollbacks kept failing): a Commit of a transaction that does not exist, in that session;
//   - "reads" (one ejected because its queries and reads kept failing): an ExecuteSql of
//     "SELECT 1" in that session;
//   - otherwise (every other probe: standbys, suspects, the confirmation of a fallback, the
//     latency probes): a GetSession of that session.
//
// None of them creates a session, reads data or writes anything: the NOT_FOUND that Spanner
// (or the emulator) answers comes from the database's own session lookup, so each proves the
// whole path of its kind of call (PSC endpoint, frontend, and the Spanner backend serving the
// database) without acting. A GetSession is a read-only metadata RPC (Spanner's
// ListSessions/GetSession API); a session ID no client ever created needs no cleanup.
//
// The probe passes on any answer of the backend (NOT_FOUND, and also PERMISSION_DENIED or
// UNAUTHENTICATED: the backend answered, credentials are not the endpoint's fault) and fails
// on UNAVAILABLE, a stream reset, or no answer before ctx's deadline; answered CANCELED, or
// on a connection that went away, it decides nothing (probeVerdict). It carries the
// routing headers the Spanner client sends (x-goog-request-params,
// google-cloud-resource-prefix).
func SpannerProbe(database string) ProbeFunc {
	name := database + "/sessions/" + ProbeSessionID
	params := "name=" + url.QueryEscape(name)
	sessionParams := "session=" + url.QueryEscape(name)
	return func(ctx context.Context, conn grpc.ClientConnInterface) error {
		var err error
		switch health.ProbeClass(ctx) {
		case health.Writes:
			ctx = metadata.AppendToOutgoingContext(ctx, "x-goog-request-params", sessionParams, "google-cloud-resource-prefix", database)
			err = conn.Invoke(ctx, "/google.spanner.v1.Spanner/Commit", &spannerpb.CommitRequest{Session: name,
				Transaction: &spannerpb.CommitRequest_TransactionId{TransactionId: []byte(ProbeSessionID)}}, &spannerpb.CommitResponse{})
		case health.Reads:
			ctx = metadata.AppendToOutgoingContext(ctx, "x-goog-request-params", sessionParams, "google-cloud-resource-prefix", database)
			err = conn.Invoke(ctx, "/google.spanner.v1.Spanner/ExecuteSql", &spannerpb.ExecuteSqlRequest{Session: name, Sql: "SELECT 1"}, &spannerpb.ResultSet{})
		default:
			ctx = metadata.AppendToOutgoingContext(ctx, "x-goog-request-params", params, "google-cloud-resource-prefix", database)
			err = conn.Invoke(ctx, "/google.spanner.v1.Spanner/GetSession", &spannerpb.GetSessionRequest{Name: name}, &spannerpb.Session{})
		}
		return probeVerdict(err)
	}
}

// ProbeClass returns what the probe run with ctx must prove, for a ProbeFunc
// (HealthSettings.Probe) that can prove more than one kind of call: "writes" for the probes
// that may readmit an endpoint ejected because its writes (commits, DML, batch DML,
// rollbacks) kept failing, "reads" for one ejected because its queries and reads kept failing,
// "session calls" for one whose session calls did, and "calls" for every other probe. These
// are the class names of HealthStatus.Class. A ProbeFunc that ignores it proves one path for
// all: an endpoint ejected for failing writes is then readmitted by a probe its reads would
// pass. Safe for concurrent use.
func ProbeClass(ctx context.Context) string { return health.ProbeClass(ctx).String() }

// unimplementedProbeMethod is a method no server implements.
const unimplementedProbeMethod = "/spannerme.health.v1.Probe/Check"

// UnimplementedMethodProbe is the probe NewGCPMultiEndpoint* install by default: one call to
// a method no server implements ("/spannerme.health.v1.Probe/Check"). Any answer passes,
// UNIMPLEMENTED included, since it proves that a gRPC server answered through the endpoint;
// UNAVAILABLE, a stream reset, or no answer before ctx's deadline fail; CANCELED or a lost
// connection decide nothing. Where a proxy answers
// for the backend (a Google frontend may answer an unknown method itself), it proves the path
// to that proxy only: set HealthSettings.Probe to a call the backend must answer.
func UnimplementedMethodProbe(ctx context.Context, conn grpc.ClientConnInterface) error {
	return probeVerdict(conn.Invoke(ctx, unimplementedProbeMethod, &emptypb.Empty{}, &emptypb.Empty{}))
}

// probeVerdict turns a probe call's error into the probe's result: nil if the backend
// answered, the error if the path failed or nothing answered in time, and an error wrapping
// health.ErrProbeSkipped (no verdict: the endpoint is probed again after ProbeInterval) if
// the probe says nothing about the endpoint: it was answered CANCELED (a frontend's
// RST_STREAM CANCEL, or a cancelled context), or its connection went away (a connectivity
// event, not the endpoint's health).
func probeVerdict(err error) error {
	switch health.Classify(err, false, false) {
	case health.Failure, health.Timeout:
		return err
	case health.Ignore, health.ConnectionLost:
		if err != nil {
			return fmt.Errorf("%w: %w: %w", health.ErrProbeSkipped, errProbeNoVerdict, err)
		}
	}
	return nil
}

// errProbeNoVerdict marks a probe that ended without saying anything about the endpoint.
var errProbeNoVerdict = errors.New("spannerme: probe ended without a verdict")

// RetryStatus counts the retries steered to another endpoint (docs/health.md, "Retry
// elsewhere"), since the GCPMultiEndpoint was created.
type RetryStatus struct {
	// Steered counts the attempts sent to another endpoint of the group than the one where
	// the request's previous attempt failed.
	Steered int64 `json:"steered"`
	// Refused counts the attempts that would have been steered but that the retry budget
	// refused (they went where the group sends its calls).
	Refused int64 `json:"refused"`
	// OverloadSkipped counts the calls sent to another endpoint than their group's current
	// one because it was cooling down after RESOURCE_EXHAUSTED.
	OverloadSkipped int64 `json:"overloadSkipped"`
	// Resent counts the streaming reads sent again at once to another endpoint of their
	// group after they failed there, with a code the Spanner client retries, before any
	// response message.
	Resent int64 `json:"resent"`
	// ResendRefused counts the streams that would have been sent again at once but that the
	// retry budget refused (their failure went to the Spanner client, which retries it).
	ResendRefused int64 `json:"resendRefused"`
	// Tokens is the retry budget's token count now (gRFC A6: 0 to 100; retries are steered
	// while it is above 50).
	Tokens float64 `json:"tokens"`
}

// CooldownStatus is an endpoint's overload cooldown, in its PoolStatus: after a
// RESOURCE_EXHAUSTED the endpoint is skipped for new calls while another endpoint of the
// group is available (docs/health.md, "Overload cooldown").
type CooldownStatus struct {
	// Cooling: the endpoint is in a cooldown now, until Until.
	Cooling bool `json:"cooling"`
	// Until is when the current (or the last) cooldown ends.
	Until time.Time `json:"until"`
	// Length is the current (or the last) cooldown's length: the server's RetryInfo delay
	// (FromRetryInfo), else a jittered 5 to 10 s doubled for each repeat, 60 s at most. In
	// JSON it is a Go duration string such as "3s".
	Length time.Duration `json:"length"`
	// FromRetryInfo: Length is the server's RetryInfo delay.
	FromRetryInfo bool `json:"fromRetryInfo,omitempty"`
	// Repeats counts the cooldowns since the endpoint last went 10 minutes without a
	// RESOURCE_EXHAUSTED, the current one included.
	Repeats int `json:"repeats"`
	// Total counts the endpoint's cooldowns since the GCPMultiEndpoint was created.
	Total int64 `json:"total"`
	// LastOverload is when the endpoint last answered RESOURCE_EXHAUSTED.
	LastOverload time.Time `json:"lastOverload"`
}

// cooldownStatusJSON is CooldownStatus with its Length as a string.
type cooldownStatusJSON struct {
	cooldownStatusAlias
	Length string `json:"length"`
}

type cooldownStatusAlias CooldownStatus

// MarshalJSON writes Length as a Go duration string ("3s"), as GroupStatus does its
// durations.
func (c CooldownStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(cooldownStatusJSON{cooldownStatusAlias(c), c.Length.String()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *CooldownStatus) UnmarshalJSON(b []byte) error {
	var j cooldownStatusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = CooldownStatus(j.cooldownStatusAlias)
	var err error
	c.Length, err = textform.ParseDuration(j.Length)
	return err
}
