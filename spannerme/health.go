package spannerme

import (
	"fmt"
	"math"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
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
	// a stream of one message each way (as gRPC's own Invoke does), so that a probe that
	// waited for a free stream behind the calls is told from one that was sent (such a probe
	// decides nothing, and its latency runs from when it was sent), opened below the pool's
	// interceptors: yours never see a probe (docs/transport.md). A latency probe's conn opens
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
