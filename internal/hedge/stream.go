package hedge

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/callinfo"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// StreamMethod reports whether a stream of method with desc may be hedged: a streaming
// query or read, server streaming only.
func StreamMethod(method string, desc *grpc.StreamDesc) bool {
	return methodIndex(method) >= 0 && desc.ServerStreams && !desc.ClientStreams
}

// Race states of a Stream.
const (
	hedgeUnsent     int32 = iota // no request yet
	hedgeArmed                   // hedgeable request sent; queued in the hedge scheduler; no hedge yet
	hedgeFiring                  // the delay passed and the budget allowed: the hedge is being sent
	hedgeRacing                  // hedge sent; first message awaited from both
	hedgeDecided                 // the first message (or end) is in: no more hedging
	hedgeOff                     // not hedgeable: plain pass-through
	hedgeHedgeWon                // decided, and the hedge is the stream the caller reads
	hedgePrimaryWon              // decided for the primary while a hedge was racing
)

// Stream is a stream of a hedging group; see the package documentation. gRPC lets SendMsg and RecvMsg run
// on two goroutines, and Header, Trailer and Context on any: those read the stream the
// caller reads (cur).
type Stream struct {
	primary       grpc.ClientStream
	cancelPrimary context.CancelFunc
	h             *Hedger
	group         *Group
	me            *multiendpoint.MultiEndpoint
	endpoint      string // the primary's
	ctx           context.Context
	desc          *grpc.StreamDesc
	method        string
	methodIndex   int
	id            string
	opts          []grpc.CallOption

	hedged atomic.Bool // the caller reads the hedge (set before the caller's RecvMsg returns it)

	mu    sync.Mutex
	state int32
	req   any
	sent  time.Time
	delay time.Duration // the hedge delay
	tries int           // how many times the budget was asked for the hedge
	// schedPos and schedDue are the stream's place in the Hedger's Scheduler queue (index + 1; 0
	// when not queued) and its fire time (Unix nanoseconds); guarded by the scheduler's mu.
	schedPos int
	schedDue int64
	// hedge, once sent: its stream, its context's cancel, its own header, trailer and peer,
	// its first message and end (hedgeMsg, hedgeErr), and hedgeDone, closed when they are in.
	hedge       grpc.ClientStream
	cancelHedge context.CancelFunc
	hedgeHeader metadata.MD
	hedgeTrail  metadata.MD
	hedgePeer   peer.Peer
	hedgeMsg    *spannerpb.PartialResultSet
	hedgeErr    error
	hedgeDone   chan struct{}
	// learn: the request begins a read-only transaction inline; its ID is remembered from
	// the winner's first message.
	learn   bool
	session string
}

// cur is the stream the caller reads.
func (s *Stream) cur() grpc.ClientStream {
	if s.hedged.Load() {
		return s.hedge
	}
	return s.primary
}

func (s *Stream) Header() (metadata.MD, error) { return s.cur().Header() }
func (s *Stream) Trailer() metadata.MD         { return s.cur().Trailer() }
func (s *Stream) Context() context.Context     { return s.cur().Context() }

// CloseSend closes the primary's sending side; the hedge's is closed when it is sent.
func (s *Stream) CloseSend() error { return s.primary.CloseSend() }

// SendMsg sends the request on the primary and, when it may be hedged, arms the hedge.
func (s *Stream) SendMsg(m any) error {
	s.mu.Lock()
	if s.state != hedgeUnsent {
		s.mu.Unlock()
		return s.primary.SendMsg(m) // one request per stream: no second one is hedged
	}
	if !s.h.txns.Hedgeable(s.ctx, m) {
		s.state = hedgeOff
		if s.session, s.learn = spannerreq.BeginsReadOnly(m); s.learn {
			s.state = hedgeDecided // not hedged, but its first message names the transaction
		}
		s.mu.Unlock()
		return s.primary.SendMsg(m)
	}
	s.group.earn()
	now := time.Now()
	d, ok := s.group.delay(s.methodIndex, now)
	s.req, s.sent, s.delay = m, now, d
	s.state = hedgeArmed
	if !ok {
		s.state = hedgeDecided // the adaptive delay knows too little: measure only
	}
	err := s.primary.SendMsg(m)
	if err != nil {
		s.state = hedgeOff
	} else if ok {
		s.h.sched.add(s, d)
	}
	s.mu.Unlock()
	return err
}

// fire sends the hedge, unless the race is over or the budget or the group says no. A
// stream the budget refuses is queued to ask again a quarter of the delay later, up to
// Tries asks (Group.spend).
func (s *Stream) fire() {
	s.mu.Lock()
	if s.state != hedgeArmed || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.tries++
	if !s.group.spend(s.tries) {
		if s.tries < Tries {
			s.h.sched.add(s, s.delay/Tries) // asks again a quarter of the delay later
		} else {
			s.group.refused.Add(1)
			s.state = hedgeDecided
		}
		s.mu.Unlock()
		return
	}
	pm, ok := s.req.(proto.Message)
	if !ok {
		s.state = hedgeDecided
		s.mu.Unlock()
		return
	}
	// The hedge sends a copy, made while the caller cannot have the request back: its
	// RecvMsg decides the race under mu, and once it returns the Spanner client may rewrite
	// the request for its retry (a resume token) while the hedge is still being opened.
	req := proto.Clone(pm)
	ctx, cancel := context.WithCancel(s.ctx)
	s.state = hedgeFiring  // the caller's RecvMsg waits for nothing held here
	s.cancelHedge = cancel // the caller's RecvMsg abandons the hedge with it (first)
	s.mu.Unlock()

	hs, err := s.openHedge(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != hedgeFiring { // the primary's first message or end came first: no race
		cancel()
		return
	}
	if err != nil {
		cancel()
		s.state = hedgeDecided
		return
	}
	s.group.sent.Add(1)
	s.state = hedgeRacing
	s.hedge = hs
	s.hedgeDone = make(chan struct{})
	s.hedgeMsg = new(spannerpb.PartialResultSet)
	go s.raceHedge()
}

// openHedge sends req, the hedge's copy of the request, to another available endpoint of
// the group, on ctx, the hedge's own context. Errors: no other endpoint (counted), or the
// stream's.
func (s *Stream) openHedge(ctx context.Context, req proto.Message) (grpc.ClientStream, error) {
	p, ok := s.h.env.Other(s.me, s.endpoint)
	if !ok {
		s.group.none.Add(1)
		return nil, errNoOtherEndpoint
	}
	opts := make([]grpc.CallOption, 0, len(s.opts)+3)
	for _, o := range s.opts {
		switch o.(type) {
		case grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption:
			continue
		}
		opts = append(opts, o)
	}
	opts = append(opts, grpc.Header(&s.hedgeHeader), grpc.Trailer(&s.hedgeTrail), grpc.Peer(&s.hedgePeer))
	start := s.h.env.Begin(ctx, p, s.me.Name())
	cs, err := p.NewStream(ctx, s.desc, s.method, opts, pool.CallInfo{Group: s.me.Name(), Tag: s.id, Start: start, Class: spannerreq.Class(s.method, nil),
		Rec: callinfo.HandleFrom(s.ctx).Hedge(p.Endpoint())})
	if err == nil {
		if err = cs.SendMsg(req); err == nil {
			err = cs.CloseSend()
		}
	}
	if err != nil {
		return nil, err
	}
	return cs, nil
}

var errNoOtherEndpoint = errors.New("spannerme: no other endpoint to hedge on")

// raceHedge reads the hedge's first message, or its end, and decides the race when it is
// the first to deliver one that counts.
func (s *Stream) raceHedge() {
	err := s.hedge.RecvMsg(s.hedgeMsg)
	s.mu.Lock()
	s.hedgeErr = err
	// The caller's own end (deadline, cancellation) ends both streams: no winner.
	if s.state == hedgeRacing && !s.callerEnded(err) && (err == nil || !hedgeRetryable(err)) {
		s.state = hedgeHedgeWon
		s.cancelPrimary() // the caller's RecvMsg on the primary returns, and takes the hedge's
	}
	close(s.hedgeDone)
	s.mu.Unlock()
}

// callerEnded reports whether err, how a stream of s ended (nil: it delivered a message),
// is the caller's own end rather than an answer: the caller's context is done, or the stream
// met the caller's deadline. Both streams carry that deadline to the server (gRPC's
// grpc-timeout header), whose DEADLINE_EXCEEDED can arrive before the caller's own timer has
// fired (seen under -race: the race was counted won or lost by whichever stream's status came
// first).
func (s *Stream) callerEnded(err error) bool {
	if s.ctx.Err() != nil {
		return true
	}
	_, has := s.ctx.Deadline()
	return has && err != nil && status.Code(err) == codes.DeadlineExceeded
}

// hedgeRetryable reports whether a stream's status is one the Spanner client retries a
// streaming query or read on (cloud.google.com/go/spanner v1.96.1, read.go
// isRetryable: UNAVAILABLE, INTERNAL with some messages, RESOURCE_EXHAUSTED with
// some settings): such an end does not win the race while the other stream may answer.
func hedgeRetryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.ResourceExhausted:
		return true
	}
	return false
}

// RecvMsg receives the next message of the stream the caller reads; the first one decides
// the race.
func (s *Stream) RecvMsg(m any) error {
	if s.hedged.Load() {
		err := s.hedge.RecvMsg(m)
		if err != nil {
			s.endHedged()
		}
		return err
	}
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st == hedgeOff || st == hedgeUnsent || st == hedgePrimaryWon {
		err := s.primary.RecvMsg(m)
		if err != nil {
			s.cancelPrimary()
		}
		return err
	}
	return s.first(m)
}

// first receives the first message: from the primary, or from the hedge if it wins.
func (s *Stream) first(m any) error {
	err := s.primary.RecvMsg(m)
	s.mu.Lock()
	switch s.state {
	case hedgeArmed, hedgeFiring, hedgeDecided:
		// No hedge is racing: the primary's first message (or end) is the call's. A hedge
		// being opened is abandoned: it is not sent, or is cancelled, and counts for nothing.
		s.h.sched.remove(s)
		if s.state == hedgeFiring {
			s.cancelHedge()
		}
		s.state = hedgePrimaryWon
		s.mu.Unlock()
		return s.primaryFirst(m, err)
	case hedgeRacing:
		if err == nil || !hedgeRetryable(err) {
			s.state = hedgePrimaryWon
			s.cancelHedge()
			if err == nil || !s.callerEnded(err) { // the caller's own end is no one's win
				s.group.lost.Add(1)
			}
			s.mu.Unlock()
			return s.primaryFirst(m, err)
		}
		// The primary failed with a retryable status: the hedge may yet answer.
		done := s.hedgeDone
		s.mu.Unlock()
		<-done // the hedge's first RecvMsg ends: with a message, an error, or the context's end
		s.mu.Lock()
		if s.state != hedgeHedgeWon { // it failed as retryably: the primary's error is the call's
			s.state = hedgePrimaryWon
			s.mu.Unlock()
			s.cancelHedge()
			s.cancelPrimary()
			return err
		}
	}
	// The hedge won (while this RecvMsg waited, or before it started).
	s.mu.Unlock()
	<-s.hedgeDone
	s.drainPrimary(err)
	s.group.won.Add(1)
	callinfo.HandleFrom(s.ctx).HedgeWon()
	s.hedged.Store(true)
	if s.hedgeErr != nil {
		s.endHedged()
		return s.hedgeErr
	}
	s.noteFirst(s.hedgeMsg)
	if pm, ok := m.(proto.Message); ok {
		proto.Reset(pm)
		proto.Merge(pm, s.hedgeMsg)
	}
	s.hedgeMsg = nil
	return nil
}

// primaryFirst ends the race for the primary's first message (nil err) or end.
func (s *Stream) primaryFirst(m any, err error) error {
	if err != nil {
		s.cancelPrimary()
		return err
	}
	if !s.sent.IsZero() {
		s.group.firstResponse(s.methodIndex, time.Now(), time.Since(s.sent))
	}
	if prs, ok := m.(*spannerpb.PartialResultSet); ok {
		s.noteFirst(prs)
	}
	return nil
}

// noteFirst remembers the read-only transaction the request began inline, from the
// winner's first message.
func (s *Stream) noteFirst(prs *spannerpb.PartialResultSet) {
	if s.learn {
		s.h.txns.Add(s.session, prs.GetMetadata().GetTransaction().GetId())
	}
}

// drainPrimary waits for the cancelled primary to end (err is what its RecvMsg returned), so
// that gRPC has written the caller's header, trailer and peer options before the hedge's
// replace them.
func (s *Stream) drainPrimary(err error) {
	s.cancelPrimary()
	if err != nil {
		return
	}
	scratch := new(spannerpb.PartialResultSet)
	for s.primary.RecvMsg(scratch) == nil {
		proto.Reset(scratch)
	}
}

// endHedged ends a stream whose hedge won: the caller's header, trailer and peer options get
// the hedge's (gRPC wrote them when the hedge ended, before its RecvMsg returned), and both
// contexts are released.
func (s *Stream) endHedged() {
	for _, o := range s.opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			if o.HeaderAddr != nil {
				*o.HeaderAddr = s.hedgeHeader
			}
		case grpc.TrailerCallOption:
			if o.TrailerAddr != nil {
				*o.TrailerAddr = s.hedgeTrail
			}
		case grpc.PeerCallOption:
			if o.PeerAddr != nil {
				*o.PeerAddr = s.hedgePeer
			}
		}
	}
	s.cancelHedge()
	s.cancelPrimary()
}
