package route

import (
	"testing"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/internal/spread"
)

// Each Spanner method whose calls take a time of their own is a kind apart; every other call
// shares kind 0, and no two methods of the table share a kind.
func TestKindOf(t *testing.T) {
	seen := map[spread.Kind]string{}
	for _, tc := range []struct {
		method string
		want   spread.Kind
	}{
		{spannerreq.MethodExecuteStreamingSQL, 1},
		{spannerreq.MethodStreamingRead, 2},
		{spannerreq.MethodExecuteSQL, 3},
		{spannerreq.MethodRead, 4},
		{spannerreq.Service + "Commit", 5},
		{spannerreq.MethodBeginTransaction, 6},
		{spannerreq.Service + "ExecuteBatchDml", 7},
		{spannerreq.Service + "BatchCreateSessions", 0},
		{spannerreq.Service + "Rollback", 0},
		{"/google.longrunning.Operations/GetOperation", 0},
		{"StreamingRead", 0}, // not a full method name
		{"", 0},
	} {
		got := KindOf(tc.method)
		if got != tc.want {
			t.Errorf("KindOf(%q) = %d, want %d", tc.method, got, tc.want)
		}
		if prev, ok := seen[got]; ok && got != 0 {
			t.Errorf("KindOf(%q) = %d, as for %q", tc.method, got, prev)
		}
		seen[got] = tc.method
		if int(got) >= spread.Kinds {
			t.Errorf("KindOf(%q) = %d, not below spread.Kinds (%d)", tc.method, got, spread.Kinds)
		}
	}
	var k spread.Kind
	if n := testing.AllocsPerRun(100, func() { k = KindOf(spannerreq.MethodStreamingRead) }); n != 0 || k != 2 {
		t.Errorf("KindOf allocates %v times, want 0", n)
	}
}
