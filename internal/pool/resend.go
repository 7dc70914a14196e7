package pool

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Resending a failed stream at once (spannerme's docs/health.md, "Retry elsewhere"). A
// server-streaming stream whose CallInfo has a Resend hook keeps its request (the one
// message it sends) and, when RecvMsg ends it with an error before any response message
// arrived, finishes its own accounting with that error (health, in flight, the call's end),
// then asks the hook whether and where to send the same request again. When the hook gives
// another pool, a normal stream of that pool (the replacement, with its own accounting, no
// hook: at most one resend per stream) is started on the same context with the same call
// options, the request is sent and the sending side closed as the caller closed it, and the
// caller's RecvMsg reads from the replacement from then on; so do Header, Trailer, CloseSend
// and Context, which gRPC lets any goroutine call (the replacement is an atomic pointer).
//
// Never after a response message: the caller has read part of a result, which the
// replacement would deliver again from its start. A response header without a message does
// not prevent it: the header carries metadata about the attempt (the Spanner client reads it
// for its latency metrics only), none of the result, and the caller's grpc.Header call
// option is written again by the replacement at its end (gRPC writes it as a stream ends).
// Every call option of the caller is given to the replacement: a grpc.OnFinish among them is
// therefore called for both streams, the failed one first.
//
// The common path pays nothing for this: a stream with a hook keeps a pointer, a slice
// header and its request in fields of the Stream (no allocation), and RecvMsg, Header,
// Trailer, CloseSend and Context load one atomic pointer.

// Resender decides whether a stream that failed before any response message is sent again,
// and where: it returns the acquired pool of another endpoint and the CallInfo of the
// replacement (its Resend is ignored), or false to let the failure reach the caller. It is
// called on the goroutine of the caller's RecvMsg, after the failed stream's accounting has
// ended; it must not block.
type Resender func(r ResendRequest) (*Pool, CallInfo, bool)

// ResendRequest describes a stream that failed before any response message, for a Resender.
type ResendRequest struct {
	// Ctx is the stream's context; the replacement runs on it.
	Ctx context.Context
	// Method is the stream's full method name.
	Method string
	// Req is the request the stream sent.
	Req any
	// Pool is the pool where the stream failed.
	Pool *Pool
	// Call is the failed stream's CallInfo.
	Call CallInfo
	// Err is the error that ended the stream.
	Err error
}

// StartStream is NewStream returning the *Stream itself (nil with an error).
func (p *Pool) StartStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts []grpc.CallOption, call CallInfo) (*Stream, error) {
	cs, err := p.NewStream(ctx, desc, method, opts, call)
	if err != nil {
		return nil, err
	}
	return cs.(*Stream), nil
}

// resend asks call.Resend about s, which RecvMsg ended with err, and returns the started
// replacement; nil when s may not be sent again (a message arrived, no request was sent,
// the context is done, the stream ended well) or the hook says no, or the replacement
// failed to start or to send (its own accounting has its error; the caller gets err).
func (s *Stream) resend(err error) *Stream {
	if errors.Is(err, io.EOF) || s.req == nil || s.ctx.Err() != nil {
		return nil
	}
	if f := s.health.Load(); f&streamAnswered != 0 || f&streamSent == 0 {
		return nil
	}
	q, call, ok := s.call.Resend(ResendRequest{Ctx: s.ctx, Method: s.method, Req: s.req, Pool: s.pool, Call: s.call, Err: err})
	if !ok {
		return nil
	}
	call.Resend, call.Rec = nil, s.call.Rec.Resent(q.Endpoint())
	r, err := q.StartStream(s.ctx, s.desc, s.method, s.callerOpts, call)
	if err != nil {
		return nil
	}
	if err := r.SendMsg(s.req); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	s.resent.Store(r)
	if s.closed.Load() {
		_ = r.CloseSend()
	}
	return r
}

// Header returns the response header of the stream the caller reads: the replacement's once
// the stream was resent.
func (s *Stream) Header() (metadata.MD, error) {
	if r := s.resent.Load(); r != nil {
		return r.Header()
	}
	return s.ClientStream.Header()
}

// Trailer returns the trailer of the stream the caller reads.
func (s *Stream) Trailer() metadata.MD {
	if r := s.resent.Load(); r != nil {
		return r.Trailer()
	}
	return s.ClientStream.Trailer()
}

// CloseSend closes the sending side of the stream the caller reads; a replacement started
// later is closed when it is started.
func (s *Stream) CloseSend() error {
	if s.desc != nil {
		s.closed.Store(true)
		if r := s.resent.Load(); r != nil {
			return r.CloseSend()
		}
	}
	return s.ClientStream.CloseSend()
}

// Context returns the context of the stream the caller reads.
func (s *Stream) Context() context.Context {
	if r := s.resent.Load(); r != nil {
		return r.Context()
	}
	return s.ClientStream.Context()
}

// Resent reports whether the stream was sent again (the caller reads the replacement).
func (s *Stream) Resent() bool { return s.resent.Load() != nil }
