package spannerme

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// inlineCallOptions is how many call options a stream carries without an allocation of its
// own: the caller's plus the one through which gRPC reports the stream's end (grpc.OnFinish).
// The Spanner client passes two or three per call.
const inlineCallOptions = 6

// trackedStream is a stream sent to a pool. It keeps the pool's in-flight count, measures the
// call, records its outcome for health (health.go) and adds the Spanner client's request ID to
// its errors, until the stream ends:
//
//   - RecvMsg returns an error (io.EOF included), SendMsg returns an error other than io.EOF,
//     or a call without server streaming has its response: seen here, as the caller sees it,
//     whatever interceptors sit between this package and gRPC;
//   - or the call's context is done, which may come with no further call of the caller (it
//     cancels and walks away). gRPC watches the context of every stream it creates and reports
//     the stream's end through grpc.OnFinish; finishOnContext takes that report only when the
//     call's own context is done, so a stream that an interceptor opens and ends on its own
//     (a retry) does not end the call. Where grpcgcp's interceptor creates the gRPC stream
//     only at the first SendMsg, the context is watched here instead (watchContext).
//
// A stream costs two allocations: the trackedStream, which also holds the call options, and
// the OnFinish callback.
type trackedStream struct {
	grpc.ClientStream
	ctx           context.Context
	pool          *pool
	serverStreams bool
	// requestID is the Spanner client's request ID (front.go); "" when the call has none.
	requestID string
	done      atomic.Bool
	health    atomic.Uint32 // streamSent, streamAnswered, streamReported (health.go)
	// stopAfter stops the context callback of watchContext; nil without one. Set before the
	// stream is shared, never changed after.
	stopAfter func() bool

	// obs, if not nil, measures the stream as a call of group that started at start. These
	// fields and serverStreams are set before the stream is shared, never changed after.
	obs   *observer
	group string
	start callStart

	opts [inlineCallOptions]grpc.CallOption // backs the call options given to gRPC
}

// callOptions returns opts followed by the option through which gRPC reports the stream's
// end, in s's own storage when they fit. The slice has no spare capacity: an interceptor that
// appends to it gets a copy.
func (s *trackedStream) callOptions(opts []grpc.CallOption) []grpc.CallOption {
	all := s.opts[:0]
	if len(opts) >= len(s.opts) {
		all = make([]grpc.CallOption, 0, len(opts)+1)
	}
	all = append(all, opts...)
	all = append(all, grpc.OnFinish(s.finishOnContext))
	return all[:len(all):len(all)]
}

// finishOnContext receives gRPC's report that a stream of this call ended. It ends the
// tracking only if the call's context is done: otherwise the caller sees the end through
// RecvMsg or SendMsg (or NewStream's error), or an interceptor ended one stream of its own
// and goes on with another.
func (s *trackedStream) finishOnContext(error) {
	if err := s.ctx.Err(); err != nil {
		s.finish(status.FromContextError(err).Err())
	}
}

// watchContext ends the tracking when the call's context is done, for pools where gRPC may
// not have created the stream by then (grpcgcp's interceptor creates it at the first
// SendMsg) and so would not report it. It is called before the stream is handed to gRPC, so
// that finish sees stopAfter.
func (s *trackedStream) watchContext() {
	s.stopAfter = context.AfterFunc(s.ctx, func() { s.end(status.FromContextError(s.ctx.Err()).Err()) })
}

// finish ends the tracking (once) with the stream's outcome, nil or io.EOF for OK, and stops
// watching the context.
func (s *trackedStream) finish(err error) {
	if s.stopAfter != nil {
		s.stopAfter()
	}
	s.end(err)
}

// end ends the tracking once: the call is measured and released from the pool.
func (s *trackedStream) end(err error) {
	if s.done.CompareAndSwap(false, true) {
		if s.obs != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			s.obs.callEnd(s.ctx, s.pool, s.group, s.start, err)
		}
		s.pool.release()
	}
}

// RecvMsg receives a message and, when the stream is over, records its outcome and ends the
// tracking.
func (s *trackedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || !s.serverStreams {
		s.ended(err)
		s.finish(err)
	} else {
		s.mark(streamAnswered)
	}
	return withRequestID(err, s.requestID)
}

// SendMsg sends a message and ends the tracking on an error other than io.EOF: gRPC has then
// finished the stream, and the caller (generated code returns nil, err) need not call
// RecvMsg. With grpcgcp's interceptor the real stream is created here, so this is where a
// failing endpoint's error shows first.
func (s *trackedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		s.ended(err)
		s.finish(err)
	} else {
		s.mark(streamSent)
	}
	return withRequestID(err, s.requestID)
}

func connectivityString(s int32) string { return connectivity.State(s).String() }
