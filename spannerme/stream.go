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
// own: the caller's plus the one that reports the stream's end (grpc.OnFinish). The Spanner
// client passes two or three per call.
const inlineCallOptions = 6

// trackedStream is a stream sent to a pool. It keeps the pool's in-flight count, and measures
// the call, until gRPC reports that the stream has ended (grpc.OnFinish: the last message or
// an error was received, a send failed, or the call's context is done, which gRPC watches
// for every stream); it needs no goroutine or context callback of its own. It also records
// the stream's outcome for health (health.go) and adds the Spanner client's request ID to its
// errors. One allocation per stream holds all of it, the call options included.
type trackedStream struct {
	grpc.ClientStream
	ctx           context.Context
	pool          *pool
	serverStreams bool
	// requestID is the Spanner client's request ID (front.go); "" when the call has none.
	requestID string
	done      atomic.Bool
	health    atomic.Uint32 // streamSent, streamAnswered, streamReported (health.go)
	// stopAfter stops the context callback registered when gRPC may never create the stream
	// (grpcgcp's interceptor creates it on the first SendMsg); nil without one.
	stopAfter func() bool

	// obs, if not nil, measures the stream as a call of group that started at start. These
	// fields and serverStreams are set before the stream is shared, never changed after.
	obs   *observer
	group string
	start callStart

	opts [inlineCallOptions]grpc.CallOption // backs the call options given to gRPC
}

// callOptions returns opts followed by the option through which gRPC reports the stream's
// end to s.finish, in s's own storage when they fit.
func (s *trackedStream) callOptions(opts []grpc.CallOption) []grpc.CallOption {
	all := s.opts[:0]
	if len(opts) >= len(s.opts) {
		all = make([]grpc.CallOption, 0, len(opts)+1)
	}
	all = append(all, opts...)
	return append(all, grpc.OnFinish(s.finish))
}

// watchContext ends the tracking when the call's context is done first. It is needed only
// where gRPC may not have created the stream by then, and so would not report its end. It is
// called before the stream is handed to gRPC, so that finish sees stopAfter.
func (s *trackedStream) watchContext() {
	s.stopAfter = context.AfterFunc(s.ctx, func() { s.end(status.FromContextError(s.ctx.Err()).Err()) })
}

// finish ends the tracking, once, with the stream's outcome (nil or io.EOF for OK), and stops
// watching the context. gRPC calls it (grpc.OnFinish), and so do RecvMsg, SendMsg and
// NewStream when gRPC may not have.
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

// RecvMsg receives a message; on the stream's end it records the outcome for health.
func (s *trackedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || !s.serverStreams {
		s.ended(err)
		s.finish(err) // gRPC has reported it, unless an interceptor replaced its stream
	} else {
		s.mark(streamAnswered)
	}
	return withRequestID(err, s.requestID)
}

// SendMsg sends a message; on an error other than io.EOF, gRPC has finished the stream and
// the caller (generated code returns nil, err) need not call RecvMsg, so the outcome is
// recorded here. With grpcgcp's interceptor the real stream is created here, so this is where
// a failing endpoint's error shows first.
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
