// Package retry holds the state behind retry elsewhere (spannerme's docs/health.md, "Retry
// elsewhere"): the retry budget (Budget, gRFC A6's token bucket) and the memory of where each
// request's last attempt failed (Memory). It decides nothing about where a call goes.
package retry

import (
	"sync"
	"sync/atomic"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// Retry budget: the token bucket of gRFC A6 retry throttling ("Throttling Retry Attempts
// and Hedged RPCs", grpc/proposal A6-client-retries.md): each attempt that fails with a
// retryable code takes one token, each success gives back TokenRatio, and a retry is
// steered elsewhere only while more than half of MaxTokens remain. A fault on a few calls
// of one endpoint keeps the bucket full; a fault everywhere (the database, not a path to
// it) empties it within MaxTokens/2 failures, after which retries go where the group sends
// them, so a database-wide fault never doubles the load on the fallback.
const (
	MaxTokens  = 100
	TokenRatio = 0.1
	// tokenScale: tokens are counted in thousandths, so that tokenRatio is an integer.
	tokenScale = 1000
	// MaxMemory bounds the remembered failed attempts (request → endpoint); the
	// oldest is forgotten first.
	MaxMemory = 4096
)

// Budget is the token bucket; its zero value is full. Safe for concurrent use; a
// success on a full bucket is a single atomic load.
type Budget struct {
	spent atomic.Int64 // thousandths of a token below MaxTokens
}

// Success gives back TokenRatio of a token: an attempt that did not fail with a retryable
// code.
func (b *Budget) Success() {
	for {
		s := b.spent.Load()
		if s <= 0 {
			return
		}
		if b.spent.CompareAndSwap(s, max(s-int64(TokenRatio*tokenScale), 0)) {
			return
		}
	}
}

// Failure takes a token: an attempt that failed with a code the client retries.
func (b *Budget) Failure() {
	for {
		s := b.spent.Load()
		if s >= MaxTokens*tokenScale {
			return
		}
		if b.spent.CompareAndSwap(s, min(s+tokenScale, MaxTokens*tokenScale)) {
			return
		}
	}
}

// Allows reports whether more than half the tokens remain: a retry may be steered.
func (b *Budget) Allows() bool { return b.spent.Load() < MaxTokens*tokenScale/2 }

// Tokens returns the tokens left, from 0 to MaxTokens.
func (b *Budget) Tokens() float64 {
	return float64(MaxTokens*tokenScale-b.spent.Load()) / tokenScale
}

// Memory remembers, for the last MaxMemory failed attempts, where and how the request (its
// request ID without the attempt) failed. The zero value is empty, ready to use. Safe for
// concurrent use.
type Memory struct {
	mu    sync.Mutex
	m     map[string]Failed
	order []string // keys, oldest first (a ring of MaxMemory)
	next  int
}

// Failed is a request's last failed attempt: its endpoint, and the class, method and error
// it was counted with for that endpoint's health. Memory keeps Err as bounded.Keep makes it
// (ServerText bytes of text, its gRPC status and nothing else of it).
type Failed struct {
	Endpoint string
	Class    health.Class
	Method   string
	Err      error
}

// Record remembers f as key's last failed attempt. What it keeps of f.Err is bounded
// (bounded.Keep, bounded.ServerText): the memory holds MaxMemory attempts, and a server
// chooses how long its error messages are (8 MB each, 4,096 of them, would be 32 GiB).
func (r *Memory) Record(key string, f Failed) {
	f.Err = bounded.Keep(f.Err, bounded.ServerText)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]Failed)
	}
	if _, ok := r.m[key]; !ok {
		if len(r.order) < MaxMemory {
			r.order = append(r.order, key)
		} else {
			delete(r.m, r.order[r.next])
			r.order[r.next] = key
			r.next = (r.next + 1) % MaxMemory
		}
	}
	r.m[key] = f
}

// FailedOn returns the endpoint where key's last attempt failed; false when none is
// remembered.
func (r *Memory) FailedOn(key string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.m[key]
	return f.Endpoint, ok
}

// Take returns and forgets key's failed attempt.
func (r *Memory) Take(key string) (Failed, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.m[key]
	if ok {
		delete(r.m, key) // its slot in order is reused when the ring comes round
	}
	return f, ok
}
