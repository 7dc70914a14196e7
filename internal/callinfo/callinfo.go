// Package callinfo is the per-call record behind spannerme.CallInfo: for the calls made with one
// context, which group and endpoint each attempt went to, whether it was steered away from the
// endpoint its group picked, resent, or hedged, and which stream of a hedged read won.
//
// The record travels in the context (With, From). Nothing is recorded, and nothing allocated,
// for a context without one: every function and method here is a no-op on a nil *Record or a
// nil *Handle, and a Handle (one per attempt) is made only for a record. The call path begins
// an attempt (Record.Begin) where it knows the group, the endpoint picked and the endpoint sent
// to; the stream that carries it ends it (Handle.End, internal/pool); a resend and a hedge begin
// attempts of their own from the one they replace or race (Handle.Resent, Handle.Hedge), and the
// hedged read's race names its winner (Handle.HedgeWon).
package callinfo

import (
	"context"
	"sync"
	"time"
)

// Why an attempt was steered away from the endpoint its group picked (internal/steer).
const (
	// SteeredRetry: the Spanner client's retry of a request that failed on the picked
	// endpoint goes to another one (retry elsewhere).
	SteeredRetry = "retry elsewhere"
	// SteeredOverload: the picked endpoint was cooling down after RESOURCE_EXHAUSTED.
	SteeredOverload = "overload cooldown"
)

// Attempt is one RPC sent to an endpoint. spannerme.CallAttempt has the same fields, in the same
// order (it is converted from this type): their documentation is there.
type Attempt struct {
	Group, Method, Endpoint string
	SteeredFrom, Steered    string
	ResentFrom              string
	Hedge, Hedged, Won      bool
	Start, End              time.Time
	Err                     error
}

// Record is the attempts of the calls made with one context. The zero value is ready; safe for
// concurrent use (a hedge ends on a goroutine of its own).
type Record struct {
	mu       sync.Mutex // guards attempts
	attempts []Attempt
	// primaryOf is, for each attempt that is a hedge, the index of the stream it raced
	// (-1 for the others).
	primaryOf []int
}

// Handle is one attempt of a Record, by index.
type Handle struct {
	r *Record
	i int
}

type recordKey struct{}

type handleKey struct{}

// With returns ctx carrying r; ctx itself when r is nil.
func With(ctx context.Context, r *Record) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, recordKey{}, r)
}

// From returns the record ctx carries, or nil. It allocates nothing.
func From(ctx context.Context) *Record {
	r, _ := ctx.Value(recordKey{}).(*Record)
	return r
}

// Attach returns ctx carrying h, for the streams started with it (HandleFrom); ctx itself when
// h is nil.
func Attach(ctx context.Context, h *Handle) context.Context {
	if h == nil {
		return ctx
	}
	return context.WithValue(ctx, handleKey{}, h)
}

// HandleFrom returns the attempt Attach put in ctx, or nil.
func HandleFrom(ctx context.Context) *Handle {
	h, _ := ctx.Value(handleKey{}).(*Handle)
	return h
}

// Begin records an attempt of method, routed by group, that the group picked on from and that
// is sent to to, and returns its handle; from is "" when it was not looked at (then the attempt
// is not steered). An attempt sent elsewhere than picked was steered: SteeredRetry when the
// record's last attempt failed on the picked endpoint (the Spanner client's retry of it),
// else SteeredOverload. Nil (and nothing recorded) for a nil r.
func (r *Record) Begin(group, method, from, to string) *Handle {
	if r == nil {
		return nil
	}
	a := Attempt{Group: group, Method: method, Endpoint: to, Start: time.Now()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if from != "" && from != to {
		a.SteeredFrom, a.Steered = from, SteeredOverload
		if n := len(r.attempts); n > 0 && r.attempts[n-1].Endpoint == from && r.attempts[n-1].Err != nil {
			a.Steered = SteeredRetry
		}
	}
	return r.addLocked(a, -1)
}

func (r *Record) addLocked(a Attempt, primary int) *Handle {
	r.attempts = append(r.attempts, a)
	r.primaryOf = append(r.primaryOf, primary)
	return &Handle{r: r, i: len(r.attempts) - 1}
}

// End records the end of h's attempt: err nil for a success. Only the first End counts.
func (h *Handle) End(err error) {
	if h == nil {
		return
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if a := &h.r.attempts[h.i]; a.End.IsZero() {
		a.End, a.Err = time.Now(), err
	}
}

// Resent records that h's stream, which failed before any response message, is sent again at
// once to endpoint, and returns the new attempt's handle. Nil for a nil h.
func (h *Handle) Resent(endpoint string) *Handle {
	if h == nil {
		return nil
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	old := h.r.attempts[h.i]
	return h.r.addLocked(Attempt{Group: old.Group, Method: old.Method, Endpoint: endpoint, ResentFrom: old.Endpoint, Start: time.Now()}, -1)
}

// Hedge records that a hedge of h's stream is sent to endpoint, and returns the hedge's handle.
// Nil for a nil h.
func (h *Handle) Hedge(endpoint string) *Handle {
	if h == nil {
		return nil
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	p := &h.r.attempts[h.i]
	p.Hedged = true
	return h.r.addLocked(Attempt{Group: p.Group, Method: p.Method, Endpoint: endpoint, Hedge: true, Start: time.Now()}, h.i)
}

// HedgeWon records that the hedge of h's stream won the race: the caller read its answer.
// Without it, the stream that was hedged is the winner.
func (h *Handle) HedgeWon() {
	if h == nil {
		return
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	for i, p := range h.r.primaryOf {
		if p == h.i {
			h.r.attempts[i].Won = true
		}
	}
}

// Attempts returns a copy of the attempts recorded so far, in the order they began; a stream
// that was hedged is Won unless its hedge is.
func (r *Record) Attempts() []Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]Attempt(nil), r.attempts...)
	for i, p := range r.primaryOf {
		if p >= 0 && !out[i].Won {
			out[p].Won = true
		}
	}
	return out
}
