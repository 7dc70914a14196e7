package spannerme

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// trackedStream keeps its pool's in-flight count until the stream ends: RecvMsg returns an
// error (io.EOF included), SendMsg returns an error other than io.EOF, a non-server-streaming
// call has received its response, or the call's context is done. It needs no goroutine of its own: context.AfterFunc covers the
// context.
type trackedStream struct {
	grpc.ClientStream
	pool          *pool
	serverStreams bool
	done          atomic.Bool
	stopAfter     func() bool
	health        atomic.Uint32 // streamSent, streamAnswered, streamReported (health.go)
}

func newTrackedStream(ctx context.Context, cs grpc.ClientStream, p *pool) *trackedStream {
	s := &trackedStream{ClientStream: cs, pool: p, serverStreams: true}
	s.stopAfter = context.AfterFunc(ctx, s.finish)
	return s
}

// forDesc records whether the call streams responses; a call that does not is over after
// its one response.
func (s *trackedStream) forDesc(desc *grpc.StreamDesc) *trackedStream {
	s.serverStreams = desc.ServerStreams
	return s
}

func (s *trackedStream) finish() {
	if s.done.CompareAndSwap(false, true) {
		s.pool.release()
	}
}

// RecvMsg receives a message and ends the tracking when the stream is over.
func (s *trackedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || !s.serverStreams {
		s.ended(err)
		s.stopAfter()
		s.finish()
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
		s.finish()
	} else {
		s.mark(streamSent)
	}
	return err
}

func connectivityString(s int32) string { return connectivity.State(s).String() }
