package pool

import (
	"errors"
	"io"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// Observe records the outcome of one call of class c to method on the pool for health from
// call outcomes. answered reports that a response (header or message) had arrived. A success takes no lock
// and allocates nothing. A failure or timeout while the pool has no ready connection, or one
// that failed at the pick for want of a connection (pickFoundNoConnection), is left to the
// connectivity monitor: it says nothing about the backend, and it must not keep a
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
	if (o == health.Failure || o == health.Timeout) && (p.State() != connectivity.Ready || pickFoundNoConnection(err)) {
		return
	}
	h.Record(c, method, o, err)
}

// pickFoundNoConnection reports whether err is a call's failure at the pick for want of a
// connection: the pool's state is read when the call ends, and a call failed at the pick just
// before the pool turned READY would otherwise count against an endpoint that had just
// reconnected. After an outage of every endpoint, 10 such calls ejected a reconnected endpoint
// for its ejection time ("all SubConns are in TransientFailure": balancer.ErrTransientFailure,
// grpc-go v1.85.0 balancer/balancer.go:275, which grpcgcp v1.6.0's picker returns while every
// channel is in TRANSIENT_FAILURE, gcp_balancer.go:443, and which gRPC gives a call that does
// not wait for ready as UNAVAILABLE with that message, picker_wrapper.go:176). The pool's own
// pick errors for no connection (errNoConnection, errNoAddresses) count the same. Matched on
// the exact message: a server's own UNAVAILABLE could carry it only by relaying another gRPC
// client's pick error (a proxy whose upstream has no connection), which this then leaves to
// the connectivity monitor too. Only health reads this: retry elsewhere and the tiers' latency
// scores still see the call failed (health.Classify is unchanged).
func pickFoundNoConnection(err error) bool {
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.Unavailable {
		return false
	}
	switch s.Message() {
	//lint:ignore SA1019 deprecated for balancers to return, but grpcgcp v1.6.0's still does (gcp_balancer.go:443): this reads it
	case balancer.ErrTransientFailure.Error(), errNoConnection.Error(), errNoAddresses.Error():
		return true
	}
	return false
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
