package spannerme

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/internal/textform"
)

// noteOverload starts (or extends) endpoint's overload cooldown (internal/cooldown) after
// a call on it ended with err, a RESOURCE_EXHAUSTED status, with the server's RetryInfo delay
// when err has one (spannerreq.RetryDelay). When a cooldown starts the groups are evaluated
// again (the verdicts read it), as they are when it ends (cooldownEnded, on its timer).
func (gme *GCPMultiEndpoint) noteOverload(endpoint string, err error) {
	delay, fromInfo := spannerreq.RetryDelay(err)
	started, length, repeats := gme.cool.Note(endpoint, delay, fromInfo)
	if !started {
		return
	}
	gme.obs.cooling(endpoint, gme.endpointName(endpoint), length, fromInfo, repeats)
	gme.evaluateAll()
	gme.changed.signal()
}

// cooldownEnded is told by the cooldowns when endpoint's cooldown of length ends: it logs,
// and the groups are evaluated again.
func (gme *GCPMultiEndpoint) cooldownEnded(endpoint string, length time.Duration) {
	gme.obs.cooled(endpoint, gme.endpointName(endpoint), length)
	gme.evaluateAll()
	gme.changed.signal()
}

// cooldownStatus returns endpoint's cooldown in Status form, nil if it never cooled.
func (gme *GCPMultiEndpoint) cooldownStatus(endpoint string) *CooldownStatus {
	c, ok := gme.cool.StatusOf(endpoint)
	if !ok {
		return nil
	}
	return &CooldownStatus{Cooling: c.Cooling, Until: c.Until, Length: c.Length, FromRetryInfo: c.FromRetryInfo,
		Repeats: c.Repeats, Total: c.Total, LastOverload: c.LastOverload}
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

// cooling logs and counts the start of endpoint's overload cooldown.
func (o *observer) cooling(endpoint, name string, d time.Duration, fromInfo bool, repeats int) {
	o.log(slog.LevelWarn, o.now(), "spannerme: endpoint cooling down after RESOURCE_EXHAUSTED; groups skip it while another endpoint is available",
		endpointArgs(endpoint, name, "for", d.Round(time.Millisecond), "from_retry_info", fromInfo, "repeats", repeats)...)
	o.metrics.cooldowns.Add(context.Background(), 1, metric.WithAttributes(endpointAttrs(endpoint, name)...))
}

// cooled logs the end of endpoint's overload cooldown of length d.
func (o *observer) cooled(endpoint, name string, d time.Duration) {
	o.log(slog.LevelInfo, o.now(), "spannerme: endpoint cooldown over", endpointArgs(endpoint, name, "cooled_for", d.Round(time.Millisecond))...)
}

// Values of AttrRerouteReason.
const (
	rerouteRetry    = "retry_elsewhere"
	rerouteOverload = "overload_cooldown"
	rerouteRefused  = "refused_by_budget"
)

// rerouted counts a call sent elsewhere than its group's pick (or, for rerouteRefused, a
// retry the budget kept where it was).
func (m *metrics) rerouted(reason string) {
	m.reroutes.Add(context.Background(), 1, metric.WithAttributes(attribute.String(AttrRerouteReason, reason)))
}
