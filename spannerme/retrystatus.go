package spannerme

import (
	"encoding/json"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/textform"
)

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
	// AnsweredBy lists the endpoints that have answered a call since the cooldown in
	// progress began, in the order heard. A group moves away from the cooling endpoint (its
	// verdict becomes "cooling down after RESOURCE_EXHAUSTED") only once the endpoint it would
	// move to is among them; until then only new calls are sent elsewhere, and the group
	// stays (docs/health.md, "Overload cooldown"). Nil when not cooling.
	AnsweredBy []string `json:"answeredBy,omitempty"`
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
