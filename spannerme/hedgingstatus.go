package spannerme

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
)

// HedgingStatus is a group's hedging (Settings.Hedging) in force and its counts since the
// GCPMultiEndpoint was created (kept across reloads while the group hedges).
type HedgingStatus struct {
	// Delay is the fixed hedge delay; zero for the adaptive delay.
	Delay time.Duration `json:"delay"`
	// MinDelay is the adaptive delay's floor.
	MinDelay time.Duration `json:"minDelay"`
	// Budget is the largest fraction of hedgeable calls that are hedged.
	Budget float64 `json:"budget"`
	// Hedgeable counts the streams that could have been hedged.
	Hedgeable int64 `json:"hedgeable"`
	// Sent counts the hedges sent; Won those whose stream the caller read; Lost those
	// cancelled because the first stream answered first. A hedge whose two streams both
	// failed with a retryable status, or were both ended by the caller's deadline or
	// cancellation, is neither.
	Sent int64 `json:"sent"`
	Won  int64 `json:"won"`
	Lost int64 `json:"lost"`
	// Refused counts the streams whose hedge the budget did not allow at any of its asks
	// (HedgingSettings.Budget); a stream refused at an ask that answers before the next is
	// not counted.
	Refused int64 `json:"refused"`
	// NoEndpoint counts the hedges not sent because no other endpoint of the group was
	// available.
	NoEndpoint int64 `json:"noEndpoint"`
}

// String gives the settings and counts in one line, such as "after 50ms, budget 5%: 1200
// hedgeable, 61 sent, 58 won, 3 lost, 2 refused" ("after p95 (at least 20ms)" for the
// adaptive delay; ", 1 without another endpoint" when some were not sent for that).
func (h *HedgingStatus) String() string {
	delay := "after " + h.Delay.String()
	if h.Delay == 0 {
		delay = "after p95 (at least " + h.MinDelay.String() + ")"
	}
	s := fmt.Sprintf("%s, budget %g%%: %d hedgeable, %d sent, %d won, %d lost, %d refused",
		delay, h.Budget*100, h.Hedgeable, h.Sent, h.Won, h.Lost, h.Refused)
	if h.NoEndpoint > 0 {
		s += fmt.Sprintf(", %d without another endpoint", h.NoEndpoint)
	}
	return s
}

// hedgingStatusJSON is HedgingStatus with its durations as strings.
type hedgingStatusJSON struct {
	hedgingStatusAlias
	Delay    string `json:"delay"`
	MinDelay string `json:"minDelay"`
}

type hedgingStatusAlias HedgingStatus

// MarshalJSON writes the durations as Go duration strings ("50ms"), as GroupStatus does.
func (h HedgingStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(hedgingStatusJSON{hedgingStatusAlias(h), h.Delay.String(), h.MinDelay.String()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (h *HedgingStatus) UnmarshalJSON(b []byte) error {
	var j struct {
		hedgingStatusAlias
		Delay    string `json:"delay"`
		MinDelay string `json:"minDelay"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*h = HedgingStatus(j.hedgingStatusAlias)
	for _, d := range []struct {
		s   string
		dst *time.Duration
	}{{j.Delay, &h.Delay}, {j.MinDelay, &h.MinDelay}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("spannerme: HedgingStatus: %w", err)
		}
		*d.dst = v
	}
	return nil
}

// hedgingStatusOf returns g's status; nil for a nil g (a group that does not hedge).
func hedgingStatusOf(g *hedge.Group) *HedgingStatus {
	if g == nil {
		return nil
	}
	s, c := g.Settings(), g.Counts()
	return &HedgingStatus{
		Delay: s.Delay, MinDelay: s.MinDelay, Budget: s.Budget,
		Hedgeable: c.Hedgeable, Sent: c.Sent, Won: c.Won, Lost: c.Lost, Refused: c.Refused, NoEndpoint: c.NoEndpoint,
	}
}
