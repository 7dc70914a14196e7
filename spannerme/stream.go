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

// trackedStream keeps its pool's in-flight count until the stream ends: RecvMsg returns an
// error (io.EOF included), SendMsg returns an error other than io.EOF, a non-server-streaming
// call has received its response, or the call's context is done. It needs no goroutine of its own: context.AfterFunc covers the
// context.
type trackedStream struct {
	grpc.ClientStream
	ctx           context.Context
	pool          *pool
	serverStreams bool
	done          atomic.Bool
	stopAfter     func() bool
	health        atomic.Uint32 // streamSent, streamAnswered, streamReported (health.go)

	// obs, if not nil, measures the stream as a call of group that started at start. These
	// fields and serverStreams are set before the stream is shared, never changed after.
	obs   *observer
	group string
	start callStart
}

// newTrackedStream tracks cs, a stream of desc on p, measured by obs (nil: not measured) as a
// call of group that started at start. Every field is set before the context's callback is
// registered: it may run at once, on another goroutine, if ctx is already done.
func newTrackedStream(ctx context.Context, cs grpc.ClientStream, p *pool, desc *grpc.StreamDesc, obs *observer, group string, start callStart) *trackedStream {
	s := &trackedStream{ClientStream: cs, ctx: ctx, pool: p, serverStreams: desc.ServerStreams, obs: obs, group: group, start: start}
	s.stopAfter = context.AfterFunc(ctx, s.ctxDone)
	return s
}

// finish ends the tracking once, with the stream's outcome: nil or io.EOF for OK.
func (s *trackedStream) finish(err error) {
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

// ctxDone ends the tracking when the call's context is done first.
func (s *trackedStream) ctxDone() { s.finish(status.FromContextError(s.ctx.Err()).Err()) }

// RecvMsg receives a message and ends the tracking when the stream is over.
func (s *trackedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || !s.serverStreams {
		s.ended(err)
		s.stopAfter()
		s.finish(err)
	} else {
		s.mark(streamAnswered)
	}
	return err
}

// SendMsg sends a message and ends the tracking on an error other than io.EOF: gRPC has then
// finished the stream, and the caller (generated code returns nil, err) need not call
// RecvMsg. With grpcgcp's interceptor the real stream is created here, so this is where a
// failing endpoint's error shows first.
func (s *trackedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		s.ended(err)
		s.stopAfter()
		s.finish(err)
	} else {
		s.mark(streamSent)
	}
	return err
}

func connectivityString(s int32) string { return connectivity.State(s).String() }
