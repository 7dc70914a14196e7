package spannerme

import (
	"encoding/json"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/textform"
)

// TiersStatus is a group's tiers in a GroupStatus: its tiers, the current tier, a slow start
// ramp after a switch back, and how its members share the calls.
type TiersStatus struct {
	// Tiers lists the group's endpoints by tier, the top tier first.
	Tiers [][]string `json:"tiers"`
	// CurrentTier is the index of the tier of the group's current endpoint (0: the top tier).
	CurrentTier int `json:"currentTier"`
	// SlowStartFrom is the tier switched away from while a switch back ramps up
	// (TierSettings.SlowStart), SlowStartSince when the switch happened; -1 and zero when no
	// ramp lasts.
	SlowStartFrom  int       `json:"slowStartFrom"`
	SlowStartSince time.Time `json:"slowStartSince,omitzero"`
	// Members lists every endpoint of the group, in priority order, with its figures.
	Members []TierMemberStatus `json:"members"`
	// ShareWindow is the interval the members' Share is measured over: since the previous
	// sample of the calls started, taken at most once a second across Status calls (zero at
	// the first Status: no share yet). In JSON, a Go duration string.
	ShareWindow time.Duration `json:"-"`
}

type tiersStatusAlias TiersStatus

type tiersStatusJSON struct {
	tiersStatusAlias
	ShareWindow string `json:"shareWindow"`
}

// MarshalJSON writes ShareWindow as a Go duration string ("10s").
func (s TiersStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(tiersStatusJSON{tiersStatusAlias(s), s.ShareWindow.String()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *TiersStatus) UnmarshalJSON(b []byte) error {
	var j tiersStatusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = TiersStatus(j.tiersStatusAlias)
	var err error
	s.ShareWindow, err = textform.ParseDuration(j.ShareWindow)
	return err
}

// TierMemberStatus is one endpoint of a group with tiers.
type TierMemberStatus struct {
	Endpoint string `json:"endpoint"`
	// Tier is the endpoint's tier, 0 the top tier.
	Tier int `json:"tier"`
	// Latency is the endpoint's latency score for its commonest kind of call (spreading keeps
	// a moving average per kind of call, a Spanner method, and compares members on the kind
	// of the call it picks for; fed by answered calls); zero when not
	// measured yet. In JSON, a Go duration string ("" when zero).
	Latency time.Duration `json:"-"`
	// InFlight is the endpoint's calls in flight now, from every group that lists it.
	InFlight int64 `json:"inFlight"`
	// Waiting is the endpoint's wait: how long the calls begun on it lately have gone
	// without one of them ending (the age of the first of them); zero when none waits.
	// Spreading counts the part of it beyond what its first call usually takes, in place of
	// the score when it is longer (docs/tiers.md, "How a call picks its member"). In JSON, a Go duration string ("" when zero).
	Waiting time.Duration `json:"-"`
	// Share is the endpoint's part, in [0, 1], of the calls started on the endpoints of its
	// tier during ShareWindow (every group that lists them); zero without a window.
	Share float64 `json:"share"`
}

type tierMemberAlias TierMemberStatus

type tierMemberJSON struct {
	tierMemberAlias
	Latency string `json:"latency,omitempty"`
	Waiting string `json:"waiting,omitempty"`
}

// MarshalJSON writes Latency and Waiting as Go duration strings, each omitted when zero.
func (m TierMemberStatus) MarshalJSON() ([]byte, error) {
	j := tierMemberJSON{tierMemberAlias: tierMemberAlias(m)}
	if m.Latency != 0 {
		j.Latency = m.Latency.String()
	}
	if m.Waiting != 0 {
		j.Waiting = m.Waiting.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *TierMemberStatus) UnmarshalJSON(b []byte) error {
	var j tierMemberJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*m = TierMemberStatus(j.tierMemberAlias)
	var err error
	if m.Latency, err = textform.ParseDuration(j.Latency); err != nil {
		return err
	}
	m.Waiting, err = textform.ParseDuration(j.Waiting)
	return err
}
