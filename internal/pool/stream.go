package pool

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/callinfo"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// inlineCallOptions is how many call options a stream carries without an allocation of its
// own: the caller's plus the one through which gRPC reports the stream's end (grpc.OnFinish).
// The Spanner client passes two or three per call.
const inlineCallOptions = 6

// CallInfo describes a call sent to a pool.
type CallInfo struct {
	// Group is the name of the group that picked the pool, for Observer.CallEnd.
	Group string
	// Tag, if not empty, is passed with the call's errors to Options.DecorateError (the
	// Spanner client's request ID).
	Tag string
	// Start is when the caller began measuring the call; zero means "not measured" (no
	// Observer.CallEnd).
	Start time.Time
	// Class is the call's class for health from call outcomes (Observe).
	Class health.Class
	// First, if not nil, is told once when the stream's first response message arrives
	// (FirstResponse(nil)) or, when it ends before any, with its end (nil or io.EOF for a
	// stream that ended well, else the error): the latency of a spread call (tiers). Nil
	// costs nothing.
	First FirstResponder
	// Resend, if not nil, may send a server-streaming stream that failed before any
	// response message again on another pool (resend.go). Nil costs nothing.
	Resend Resender
	// Rec, if not nil, is the stream's attempt in the caller's call record (internal/callinfo):
	// told of the stream's end, and of its resend. Nil costs nothing.
	Rec *callinfo.Handle
}

// FirstResponder receives the first response of a stream (CallInfo.First). It is called
// once per stream, on the goroutine of RecvMsg, SendMsg or the context's end; it must not block.
type FirstResponder interface {
	FirstResponse(err error)
}

// NewStream starts a streaming call on the pool, which the caller has acquired (Acquire):
// the stream releases it when it ends, and so does a NewStream that fails. The stream counts
// as in flight until it ends (see Stream), its outcome is recorded for health (Observe), and
// its end is reported to Observer.CallEnd when call.Start is set. Errors: gRPC's, decorated
// (Options.DecorateError) when call.Tag is set.
func (p *Pool) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts []grpc.CallOption, call CallInfo) (grpc.ClientStream, error) {
	s := &Stream{ctx: ctx, pool: p, serverStreams: desc.ServerStreams, method: method, call: call}
	if call.Resend != nil && desc.ServerStreams && !desc.ClientStreams {
		s.desc, s.callerOpts = desc, opts
	}
	if p.lazyStreams {
		s.watchContext()
	}
	cs, err := p.conn.NewStream(ctx, desc, method, s.callOptions(opts)...)
	if err != nil {
		if status.Code(err) != codes.DeadlineExceeded {
			// A deadline that passes here passed before the stream existed (gRPC held it
			// for a free HTTP/2 stream of a busy pool, or it was already over): it says
			// nothing about the endpoint.
			p.Observe(call.Class, method, err, false)
		}
		s.finish(err)
		return nil, s.decorate(err)
	}
	s.ClientStream = cs
	return s, nil
}

// EndCall reports the end of a unary call that the caller measured (start not zero) to the
// pool's Observer.
func (p *Pool) EndCall(ctx context.Context, group string, start time.Time, err error) {
	if !start.IsZero() {
		p.obs.CallEnd(ctx, group, start, err)
	}
}

// Stream is a stream sent to a pool. It keeps the pool's in-flight count, has the call
// measured, records its outcome for health (outcome.go) and decorates its errors, until the
// stream ends:
//
//   - RecvMsg returns an error (io.EOF included), SendMsg returns an error other than io.EOF,
//     or a call without server streaming has its response: seen here, as the caller sees it,
//     whatever interceptors sit between this package and gRPC;
//   - or the call's context is done, which may come with no further call of the caller (it
//     cancels and walks away). gRPC watches the context of every stream it creates, until the
//     stream ends, and reports that end through grpc.OnFinish (reported). A report that comes
//     with the context done ends the call. Any other report is one the caller sees in RecvMsg,
//     or, when it may not (gRPC ended the stream in Header, in SendMsg, or on a timeout of its
//     own, and the caller may yet cancel without reading), from then on the context is
//     watched here (watchAfterReport). A stream that an interceptor opens and gives up (a
//     retry) therefore does not end the call. Where grpcgcp's interceptor creates the gRPC
//     stream only at the first SendMsg, the context is watched from the start (watchContext).
//
// A stream costs two allocations: the Stream, which also holds the call options, and the
// OnFinish callback; watching the context costs two more, on the paths above only.
type Stream struct {
	grpc.ClientStream
	ctx           context.Context
	pool          *Pool
	serverStreams bool
	method        string
	call          CallInfo
	done          atomic.Bool
	health        atomic.Uint32 // streamSent, streamAnswered, streamReported (outcome.go)
	// stopAfter stops the context callback of watchContext; nil without one. Set before the
	// stream is shared, never changed after.
	stopAfter func() bool
	// recving: the caller is in RecvMsg. gotReport: gRPC has reported the stream's end.
	// stopLate stops the context callback of watchAfterReport. Each side stores its flag
	// before it loads the other's (sequentially consistent atomics), so a report made while
	// RecvMsg returns a message is seen by at least one of them.
	recving   atomic.Bool
	gotReport atomic.Bool
	stopLate  atomic.Pointer[func() bool]

	opts [inlineCallOptions]grpc.CallOption // backs the call options given to gRPC

	// Resending (resend.go), set only when call.Resend is: desc and the caller's call
	// options, set before the stream is shared; req, the request of the first SendMsg, set
	// by the goroutine that sends it before it reads (the stream is server streaming only);
	// closed: CloseSend was called; resent: the replacement stream, which RecvMsg, Header,
	// Trailer, CloseSend and Context use once it is set.
	desc       *grpc.StreamDesc
	callerOpts []grpc.CallOption
	req        any
	closed     atomic.Bool
	resent     atomic.Pointer[Stream]
}

// callOptions returns opts followed by the option through which gRPC reports the stream's
// end, in s's own storage when they fit. The slice has no spare capacity: an interceptor that
// appends to it gets a copy.
func (s *Stream) callOptions(opts []grpc.CallOption) []grpc.CallOption {
	all := s.opts[:0]
	if len(opts) >= len(s.opts) {
		all = make([]grpc.CallOption, 0, len(opts)+1)
	}
	all = append(all, opts...)
	all = append(all, grpc.OnFinish(s.reported))
	return all[:len(all):len(all)]
}

// reported receives gRPC's report that a stream of this call ended, with its error. With
// the call's context done, that ends the call. Otherwise, unless the caller is in RecvMsg
// (which returns the end), the context is watched from now on.
func (s *Stream) reported(err error) {
	if s.ctx.Err() != nil {
		s.finish(err)
		return
	}
	s.gotReport.Store(true)
	if !s.recving.Load() {
		s.watchAfterReport(err, true)
	}
}

// watchAfterReport ends the tracking when the call's context is done, after gRPC reported an
// end that the caller may not see: with err, gRPC's outcome, if known, else the context's
// error. Idempotent; a no-op once the tracking has ended.
func (s *Stream) watchAfterReport(err error, known bool) {
	if s.done.Load() || s.stopAfter != nil || s.stopLate.Load() != nil {
		return
	}
	stop := context.AfterFunc(s.ctx, func() {
		if !known {
			err = status.FromContextError(s.ctx.Err()).Err()
		}
		s.end(err)
	})
	if !s.stopLate.CompareAndSwap(nil, &stop) || s.done.Load() {
		stop() // another goroutine watches, or finish may have missed this callback
	}
}

// watchContext ends the tracking when the call's context is done, for pools where gRPC may
// not have created the stream by then (grpcgcp's interceptor creates it at the first
// SendMsg) and so would not report it. It is called before the stream is handed to gRPC, so
// that finish sees stopAfter.
func (s *Stream) watchContext() {
	s.stopAfter = context.AfterFunc(s.ctx, func() { s.end(status.FromContextError(s.ctx.Err()).Err()) })
}

// finish ends the tracking (once) with the stream's outcome, nil or io.EOF for OK, and stops
// watching the context.
func (s *Stream) finish(err error) {
	s.end(err)
	if s.stopAfter != nil {
		s.stopAfter()
	}
	if stop := s.stopLate.Load(); stop != nil {
		(*stop)()
	}
}

// end ends the tracking once: the call's end is reported and the pool released.
func (s *Stream) end(err error) {
	if s.done.CompareAndSwap(false, true) {
		if errors.Is(err, io.EOF) {
			err = nil
		}
		s.first(err)
		s.call.Rec.End(err)
		if !s.call.Start.IsZero() {
			s.pool.obs.CallEnd(s.ctx, s.call.Group, s.call.Start, err)
		}
		if s.pool.callEnded != nil {
			s.pool.callEnded(s.pool, s.call, s.method, err)
		}
		s.pool.Release()
	}
}

// first tells call.First, once, of the first response (err nil) or of the stream's end
// without one.
func (s *Stream) first(err error) {
	if s.call.First != nil && s.health.Or(streamFirst)&streamFirst == 0 {
		s.call.First.FirstResponse(err)
	}
}

// RecvMsg receives a message and, when the stream is over, records its outcome and ends the
// tracking.
func (s *Stream) RecvMsg(m any) error {
	if r := s.resent.Load(); r != nil {
		return r.RecvMsg(m)
	}
	s.recving.Store(true)
	err := s.ClientStream.RecvMsg(m)
	s.recving.Store(false)
	if err != nil || !s.serverStreams {
		s.ended(err)
		s.finish(err)
		if err != nil && s.desc != nil {
			if r := s.resend(err); r != nil {
				return r.RecvMsg(m)
			}
		}
	} else {
		s.first(nil)
		s.mark(streamAnswered)
		if s.gotReport.Load() { // gRPC ended the stream while this message was returned
			s.watchAfterReport(nil, false)
		}
	}
	return s.decorate(err)
}

// SendMsg sends a message and ends the tracking on an error other than io.EOF: gRPC has then
// finished the stream, and the caller (generated code returns nil, err) need not call
// RecvMsg. With grpcgcp's interceptor the real stream is created here, so this is where a
// failing endpoint's error shows first.
func (s *Stream) SendMsg(m any) error {
	if s.desc != nil && s.req == nil {
		s.req = m
	}
	err := s.ClientStream.SendMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		if s.pool.lazyStreams && s.health.Load()&streamSent == 0 && status.Code(err) == codes.DeadlineExceeded {
			// grpcgcp's interceptor creates the gRPC stream here: a deadline that passes in
			// this first SendMsg passed while the stream waited for a free HTTP/2 stream of a
			// busy pool (or was already over). It never reached the endpoint, as a deadline
			// in NewStream without the interceptor: it counts for nothing.
			s.mark(streamReported)
		}
		s.ended(err)
		s.finish(err)
	} else {
		s.mark(streamSent)
	}
	return s.decorate(err)
}

// decorate returns err decorated with the call's tag, or err itself without a tag or a
// decorator.
func (s *Stream) decorate(err error) error {
	if err == nil || s.call.Tag == "" || s.pool.decorateError == nil {
		return err
	}
	return s.pool.decorateError(err, s.call.Tag)
}
