package spannerme

import (
	"log/slog"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
)

// A member's status carries its spreading figures from the Tiering: its score, its calls in
// flight and its wait.
func TestTiersStatusMembersCarryTheirFigures(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	var tr route.Tiering
	tr.Init(clk)
	tiers := [][]string{{"a:1", "b:1"}, {"c:1"}}
	tr.Update([]route.Group{{Name: "g", Endpoints: []string{"a:1", "b:1", "c:1"}, Tiers: tiers}},
		map[string]*multiendpoint.MultiEndpoint{}, slog.New(slog.DiscardHandler))
	eps := tr.Endpoints()
	eps["b:1"].Begin(0)
	eps["b:1"].Done(0, 7*time.Millisecond, false)
	clk.Advance(time.Second)
	eps["a:1"].Begin(0)
	eps["a:1"].Begin(0)
	clk.Advance(1500 * time.Millisecond)
	ts := tiersStatus(&tr, multiendpoint.Status{Tiers: tiers})
	if ts == nil || len(ts.Members) != 3 {
		t.Fatalf("TiersStatus = %+v, want 3 members", ts)
	}
	want := []TierMemberStatus{
		{Endpoint: "a:1", Tier: 0, InFlight: 2, Waiting: 1500 * time.Millisecond},
		{Endpoint: "b:1", Tier: 0, Latency: 7 * time.Millisecond},
		{Endpoint: "c:1", Tier: 1},
	}
	for i, w := range want {
		m := ts.Members[i]
		m.Share = 0
		if m != w {
			t.Errorf("member %d = %+v, want %+v", i, m, w)
		}
	}
}
