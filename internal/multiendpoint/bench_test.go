package multiendpoint

import (
	"sync"
	"sync/atomic"
	"testing"

	upstream "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
)

// currentReader is what both implementations offer.
type currentReader interface {
	Current() string
	SetEndpointAvailability(endpoint string, available bool)
}

var benchSink atomic.Int64

// BenchmarkCurrent compares reading the current endpoint here (an atomic pointer load) with
// upstream grpcgcp (an RWMutex), on the same 3-endpoint list, with parallel readers. In the
// "toggling" variants another goroutine flips the top endpoint's availability all the time,
// so that the current endpoint changes while the readers run. Durations are zero, so neither
// implementation starts timers.
func BenchmarkCurrent(b *testing.B) {
	endpoints := []string{"a.example:443", "b.example:443", "c.example:443"}
	impls := []struct {
		name string
		new  func(b *testing.B) (currentReader, func())
	}{
		{"spannerme", func(b *testing.B) (currentReader, func()) {
			m, err := New(Options{Endpoints: endpoints})
			if err != nil {
				b.Fatal(err)
			}
			return m, m.Close
		}},
		{"upstream", func(b *testing.B) (currentReader, func()) {
			m, err := upstream.NewMultiEndpoint(&upstream.MultiEndpointOptions{Endpoints: endpoints})
			if err != nil {
				b.Fatal(err)
			}
			return m, func() {}
		}},
	}
	for _, toggling := range []bool{false, true} {
		for _, impl := range impls {
			name := impl.name
			if toggling {
				name += "-toggling"
			}
			b.Run(name, func(b *testing.B) {
				m, closeFn := impl.new(b)
				defer closeFn()
				for _, e := range endpoints {
					m.SetEndpointAvailability(e, true)
				}
				var wg sync.WaitGroup
				stop := make(chan struct{})
				var toggles int64
				if toggling {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for avail := false; ; avail = !avail {
							select {
							case <-stop:
								return
							default:
							}
							m.SetEndpointAvailability(endpoints[0], avail)
							toggles++
						}
					}()
				}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					n := 0
					for pb.Next() {
						n += len(m.Current())
					}
					benchSink.Add(int64(n))
				})
				b.StopTimer()
				close(stop)
				wg.Wait()
				if toggling {
					b.ReportMetric(float64(toggles)/float64(b.N), "toggles/op")
				}
			})
		}
	}
}

// BenchmarkToggle measures a member's availability report that moves Current (and, with
// tiers, the Tier view) back and forth: a MultiEndpoint without tiers allocates what it did
// before tiers existed (the Current pointer), one with tiers also its new view.
func BenchmarkToggle(b *testing.B) {
	for _, tiered := range []bool{false, true} {
		name := "flat"
		opts := Options{Endpoints: []string{"a.example:443", "b.example:443", "c.example:443"},
			InitialState: func(string) State { return Available }}
		if tiered {
			name = "tiers"
			opts = Options{Tiers: [][]string{{"a.example:443", "b.example:443"}, {"c.example:443"}},
				InitialState: func(string) State { return Available }}
		}
		b.Run(name, func(b *testing.B) {
			m, err := New(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m.SetEndpointAvailability("a.example:443", i%2 == 1)
			}
		})
	}
}

// BenchmarkTier is the view read of the tiered call path: one atomic load.
func BenchmarkTier(b *testing.B) {
	m, err := New(Options{Tiers: [][]string{{"a.example:443", "b.example:443"}}, InitialState: func(string) State { return Available }})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n += len(m.Tier().Members)
		}
		benchSink.Add(int64(n))
	})
}
