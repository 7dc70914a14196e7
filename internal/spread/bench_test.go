package spread

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

var benchSink atomic.Int64

// BenchmarkPick measures the call path's pick: the MultiEndpoint's tier view (one atomic
// load) and Picker.Pick, for tiers of 1 to 4 members with latency scores, on the default
// random source. "ramping" reads the clock for a switch back in progress. The goal of issue
// 28: 2 to 4 members at most 40 ns and 0 allocations; "busy" (calls in flight, so the pick
// reads the clock for the wait) takes about 60 ns (docs/tiers.md).
func BenchmarkPick(b *testing.B) {
	// busy: every endpoint has a call in flight, so the pick reads the clock (Endpoint.waiting).
	for _, mode := range []string{"steady", "busy", "ramping"} {
		ramping := mode == "ramping"
		for n := 1; n <= 4; n++ {
			b.Run(fmt.Sprintf("%s/members=%d", mode, n), func(b *testing.B) {
				var tier [][]string
				tier = append(tier, nil)
				for i := range n {
					tier[0] = append(tier[0], fmt.Sprintf("a%d:443", i))
				}
				tier = append(tier, []string{"b:443"})
				opts := multiendpoint.Options{Tiers: tier,
					InitialState: func(string) multiendpoint.State { return multiendpoint.Available }}
				if ramping {
					opts.SlowStart = time.Hour
					opts.InitialState = nil
				}
				m, err := multiendpoint.New(opts)
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				if ramping { // a switch back from b: the ramp lasts the whole benchmark
					m.SetEndpointAvailability("b:443", true)
					for _, a := range tier[0] {
						m.SetEndpointAvailability(a, true)
					}
					if m.Tier().Previous == nil {
						b.Fatal("no ramp")
					}
				}
				reg := NewRegistry(EndpointOptions{})
				for i, a := range append(tier[0], "b:443") {
					e := reg.Endpoint(a)
					e.Begin(0)
					e.Done(0, time.Duration(1+i)*time.Millisecond, false)
					if mode == "busy" {
						e.Begin(0)
					}
				}
				p, err := New(Options{Resolve: reg.Endpoint, SlowStart: opts.SlowStart})
				if err != nil {
					b.Fatal(err)
				}
				p.Pick(m.Tier(), 0)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					n := 0
					for pb.Next() {
						n += len(p.Pick(m.Tier(), 0).name)
					}
					benchSink.Add(int64(n))
				})
			})
		}
	}
}

// BenchmarkEndpoint_BeginDone is what a call adds to the pick: counting it in flight and
// folding its latency into the score (one clock read in Done and one in the first Begin
// since a call ended, as each Begin here is; atomic adds and compare-and-swaps).
func BenchmarkEndpoint_BeginDone(b *testing.B) {
	e := NewEndpoint("a:443", EndpointOptions{Clock: clock.Real})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.Begin(0)
			e.Done(0, time.Millisecond, false)
		}
	})
}
