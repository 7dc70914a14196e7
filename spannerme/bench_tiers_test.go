package spannerme

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// tieredGME returns a GCPMultiEndpoint whose default group's top tier has members endpoints
// (real servers), over one more, once every member is in the top tier's view.
func tieredGME(tb testing.TB, members int) *GCPMultiEndpoint {
	tb.Helper()
	var top []string
	for i := range members {
		top = append(top, startServer(tb, fmt.Sprint("m", i)))
	}
	low := startServer(tb, "low")
	s := fastSettings(nil)
	s.Tiers = map[string]TierSettings{"default": {Tiers: [][]string{top, {low}}}}
	gme := newGMEWith(tb, benchOptions("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, append(top, low)...),
	}), s, plumbing{})
	me := gme.snap.Load().Default.ME
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if v := me.Tier(); v != nil && v.Index == 0 && len(v.Members) == members {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("not every member in the top tier within 10s: %+v", me.Tier())
		}
	}
	return gme
}

// BenchmarkPickTiered measures the pick of a group with tiers (the tier view, the Picker, the
// pool) for a top tier of 1, 2 and 4 members; "/counted" adds what every call of such a
// group adds: Begin and Done on the endpoint's score. Compare with BenchmarkPick/spannerme,
// the same pick without tiers.
func BenchmarkPickTiered(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		gme := tieredGME(b, n)
		me := gme.snap.Load().Default.ME
		b.Run(fmt.Sprint(n, "members"), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pp *testing.PB) {
				for pp.Next() {
					p, _, err := gme.pick(context.Background(), health.Reads, spannerreq.MethodStreamingRead, false)
					if err != nil {
						b.Error(err)
						return
					}
					p.Release()
				}
			})
		})
		b.Run(fmt.Sprint(n, "members/counted"), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pp *testing.PB) {
				for pp.Next() {
					p, _, err := gme.pick(context.Background(), health.Reads, spannerreq.MethodStreamingRead, false)
					if err != nil {
						b.Error(err)
						return
					}
					tc := gme.tiers.Begin(me, p, spannerreq.MethodStreamingRead)
					tc.Done(nil)
					p.Release()
				}
			})
		})
	}
}

// A unary call of a group with tiers allocates nothing more than one without: the pick, the
// count in flight and the score's update allocate nothing.
func TestTieredPickDoesNotAllocate(t *testing.T) {
	gme := tieredGME(t, 2)
	me := gme.snap.Load().Default.ME
	if n := testing.AllocsPerRun(1000, func() {
		p, _, err := gme.pickConnected(context.Background(), health.Reads, spannerreq.MethodStreamingRead, nil)
		if err != nil {
			t.Fatal(err)
		}
		tc := gme.tiers.Begin(me, p, spannerreq.MethodStreamingRead)
		tc.Done(nil)
		p.Release()
	}); n != 0 {
		t.Errorf("a tiered pick and its count allocate %v times per call, want 0", n)
	}
}
