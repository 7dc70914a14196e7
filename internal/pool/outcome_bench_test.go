package pool

import (
	"io"
	"testing"

	"google.golang.org/grpc/connectivity"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// benchStreamMessages is the number of responses of one streaming call, as in spannerme's
// BenchmarkStream.
const benchStreamMessages = 10

// BenchmarkOutcomeTracking measures what outcome tracking adds to a successful call, apart
// from the call itself (BenchmarkInvoke and BenchmarkStream compare whole calls with
// "spannerme/health-off", but a loopback call's noise is far larger than this):
//
//	go test -run '^$' -bench OutcomeTracking -benchmem ./internal/pool/
func BenchmarkOutcomeTracking(b *testing.B) {
	d := health.New(health.Options{})
	b.Cleanup(d.Close)
	p := &Pool{health: d}
	p.state.Store(int32(connectivity.Ready))
	b.Run("unary", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p.Observe(health.Reads, "/google.spanner.v1.Spanner/Read", nil, false)
			}
		})
	})
	b.Run("stream-10-messages", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			s := &Stream{pool: p, serverStreams: true}
			for pb.Next() {
				s.health.Store(0)
				s.mark(streamSent)
				for range benchStreamMessages {
					s.mark(streamAnswered)
				}
				s.ended(io.EOF)
			}
		})
	})
}
