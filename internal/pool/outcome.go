package pool

import (
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// Observe records the outcome of one call of class c to method on the pool for health from
// call outcomes. answered reports that a response (header or message) had arrived. A success takes no lock
// and allocates nothing. A failure or timeout while the pool has no ready connection is left
// to the connectivity monitor: it says nothing about the backend, and it must not keep a
// reconnected endpoint ejected. So is a call whose connection went away while the pool stays
// ready (health.ConnectionLost, which the detector does not count): one lost connection is
// one connectivity event, however many calls it carried. A no-op when health is off.
func (p *Pool) Observe(c health.Class, method string, err error, answered bool) {
	h := p.health
	if h == nil {
		return
	}
	if err == nil {
		h.Success(c)
		return
	}
	o := health.Classify(err, answered, p.overloadIsFailure)
	if (o == health.Failure || o == health.Timeout) && p.State() != connectivity.Ready {
		return
	}
	h.Record(c, method, o, err)
}

// Bits of Stream.health.
const (
	// streamSent: SendMsg returned nil or io.EOF, so the underlying gRPC stream exists
	// (grpcgcp's stream interceptor creates it on the first SendMsg).
	streamSent uint32 = 1 << iota
	// streamAnswered: a response message arrived.
	streamAnswered
	// streamReported: the stream's outcome was recorded.
	streamReported
	// streamFirst: CallInfo.First was told.
	streamFirst
)

// mark sets bit once; later calls only read.
func (s *Stream) mark(bit uint32) {
	if s.health.Load()&bit == 0 {
		s.health.Or(bit)
	}
}

// ended records the stream's outcome once: err is what RecvMsg or SendMsg returned (io.EOF
// for a stream that ended well). A stream whose deadline passed counts as answered if it had
// received a message or its response header: the header is read only then, from a stream
// that has ended, so a successful stream reads nothing and allocates nothing here.
func (s *Stream) ended(err error) {
	if s.pool.health == nil || s.health.Or(streamReported)&streamReported != 0 {
		return
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	flags := s.health.Load()
	answered := flags&streamAnswered != 0
	if !answered && flags&streamSent != 0 && status.Code(err) == codes.DeadlineExceeded {
		md, _ := s.ClientStream.Header()
		answered = md != nil
	}
	s.pool.Observe(s.call.Class, s.method, err, answered)
}
