package spannerme

import (
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// Retry elsewhere (docs/health.md, "Retry elsewhere"). The Spanner client retries a call
// that failed with a retryable code, after its own backoff, as a new attempt of the same
// request: its request-ID header (cloud.google.com/go/spanner v1.96.1,
// request_id_header.go: version.process.client.channel.request.attempt) keeps the request
// and counts the attempt. When the previous attempt of a request failed on endpoint E, the
// next one goes to another available endpoint of the group than E, as the client's own
// location-aware routing does (location_aware_client.go, rerouteErrorMarker), within a
// retry budget. The client still does the retrying and the backoff; this layer only steers
// where the retry goes, and never sends anything the client did not send.
//
// Why it is safe, per method: a session and a transaction live in the database, not in the
// frontend that carried the call (Spanner's API reference: a session is a "database
// session" addressed by name, projects/*/instances/*/databases/*/sessions/*, and any
// frontend of the instance serves it; docs/transport.md and F29 rely on the same fact), and
// every Spanner method names the session (and the transaction, by ID) it acts on:
//
//   - ExecuteSql / ExecuteStreamingSql / Read / StreamingRead: a read is repeatable at its
//     timestamp, and a resumed stream carries its resume_token; a DML statement carries its
//     seqno, which makes its replay within the transaction idempotent
//     (google.spanner.v1.ExecuteSqlRequest.seqno: "If the same seqno is used more than once,
//     the result of the first execution is returned");
//   - ExecuteBatchDml: the same, with its seqno;
//   - BeginTransaction, Rollback, PartitionQuery/PartitionRead, session calls
//     (CreateSession, BatchCreateSessions, GetSession, DeleteSession): they act on the
//     session named in the request, whichever frontend carries them;
//   - Commit: it names its transaction (or is single-use with its mutations, which the
//     client only retries when the first attempt failed before the commit could apply: the
//     client's own retry settings decide this, unchanged here);
//   - BatchWrite: the client retries it only with the groups not yet applied.
//
// So a retry is as safe on another endpoint as on the same one: the client would send the
// very same request again either way.

// Retry budget: the token bucket of gRFC A6 retry throttling ("Throttling Retry Attempts
// and Hedged RPCs", grpc/proposal A6-client-retries.md): each attempt that fails with a
// retryable code takes one token, each success gives back tokenRatio, and a retry is
// steered elsewhere only while more than half of maxTokens remain. A fault on a few calls
// of one endpoint keeps the bucket full; a fault everywhere (the database, not a path to
// it) empties it within maxTokens/2 failures, after which retries go where the group sends
// them, so a database-wide fault never doubles the load on the fallback.
const (
	retryMaxTokens  = 100
	retryTokenRatio = 0.1
	// tokenScale: tokens are counted in thousandths, so that tokenRatio is an integer.
	tokenScale = 1000
	// maxRetryMemory bounds the remembered failed attempts (request → endpoint); the
	// oldest is forgotten first.
	maxRetryMemory = 4096
)

// RetryStatus counts the retries steered to another endpoint (docs/health.md, "Retry
// elsewhere"), since the GCPMultiEndpoint was created.
type RetryStatus struct {
	// Steered counts the attempts sent to another endpoint of the group than the one where
	// the request's previous attempt failed.
	Steered int64 `json:"steered"`
	// Refused counts the attempts that would have been steered but that the retry budget
	// refused (they went where the group sends its calls).
	Refused int64 `json:"refused"`
	// OverloadSkipped counts the calls sent to another endpoint than their group's current
	// one because it was cooling down after RESOURCE_EXHAUSTED.
	OverloadSkipped int64 `json:"overloadSkipped"`
	// Tokens is the retry budget's token count now (gRFC A6: 0 to 100; retries are steered
	// while it is above 50).
	Tokens float64 `json:"tokens"`
}

// retryBudget is the token bucket; its zero value is full. Safe for concurrent use; a
// success on a full bucket is a single atomic load.
type retryBudget struct {
	spent atomic.Int64 // thousandths of a token below retryMaxTokens
}

func (b *retryBudget) success() {
	for {
		s := b.spent.Load()
		if s <= 0 {
			return
		}
		if b.spent.CompareAndSwap(s, max(s-int64(retryTokenRatio*tokenScale), 0)) {
			return
		}
	}
}

func (b *retryBudget) failure() {
	for {
		s := b.spent.Load()
		if s >= retryMaxTokens*tokenScale {
			return
		}
		if b.spent.CompareAndSwap(s, min(s+tokenScale, retryMaxTokens*tokenScale)) {
			return
		}
	}
}

// allows reports whether more than half the tokens remain.
func (b *retryBudget) allows() bool { return b.spent.Load() < retryMaxTokens*tokenScale/2 }

func (b *retryBudget) tokens() float64 {
	return float64(retryMaxTokens*tokenScale-b.spent.Load()) / tokenScale
}

// retryMemory remembers, for the last maxRetryMemory failed attempts, where and how the
// request (its request ID without the attempt) failed. Safe for concurrent use.
type retryMemory struct {
	mu    sync.Mutex
	m     map[string]failedAttempt
	order []string // keys, oldest first (a ring of maxRetryMemory)
	next  int

	steered, refused, skipped atomic.Int64
}

// failedAttempt is a request's last failed attempt: its endpoint, and the class, method and
// error it was counted with for that endpoint's health.
type failedAttempt struct {
	endpoint string
	class    health.Class
	method   string
	err      error
}

func (r *retryMemory) record(key string, f failedAttempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]failedAttempt)
	}
	if _, ok := r.m[key]; !ok {
		if len(r.order) < maxRetryMemory {
			r.order = append(r.order, key)
		} else {
			delete(r.m, r.order[r.next])
			r.order[r.next] = key
			r.next = (r.next + 1) % maxRetryMemory
		}
	}
	r.m[key] = f
}

func (r *retryMemory) failedOn(key string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.m[key]
	return f.endpoint, ok
}

// take returns and forgets key's failed attempt.
func (r *retryMemory) take(key string) (failedAttempt, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.m[key]
	if ok {
		delete(r.m, key) // its slot in order is reused when the ring comes round
	}
	return f, ok
}

// splitRequestID returns the request key of a Spanner request ID (everything before the
// last dot) and whether the ID names an attempt after the first. It allocates nothing.
func splitRequestID(id string) (key string, retry bool) {
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		return "", false
	}
	attempt := id[i+1:]
	return id[:i], attempt != "" && attempt != "1" && attempt != "0"
}

// retryableByClient reports whether the Spanner client retries an attempt that ended with
// err, by code: UNAVAILABLE and RESOURCE_EXHAUSTED (the retry settings of every method,
// cloud.google.com/go/spanner v1.96.1 apiv1/spanner_client.go, and its resumable streams,
// read.go) and the INTERNAL of a reset stream, which its streams retry (retry.go).
func retryableByClient(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	case codes.Internal:
		return strings.Contains(s.Message(), "stream terminated by RST_STREAM")
	}
	return false
}

// callEnded takes the outcome of one call of class c to method on p (a unary call, or a
// stream: pool Options.CallEnded) whose request ID is id ("" for none): the retry budget
// counts it, a retryable failure is remembered for the request's next attempt, and
// RESOURCE_EXHAUSTED starts p's endpoint's overload cooldown. A connection lost under the
// call (health.ConnectionLost) is none of these: it says nothing of the endpoint (internal/health
// counts it for nothing either), so its retry goes where the group sends it. A first attempt
// that succeeds on a full budget costs a string scan and one atomic load.
//
// A retry that succeeds on another endpoint than the one where its request last failed
// counts, for that endpoint's health, as the failure it would have met there again: retry
// elsewhere takes away the repeated failures by which health sees a fault of one endpoint
// (every Commit refused by E1 while its BeginTransactions pass: with each Commit retried on
// E1, most of E1's writes fail and it is ejected; with the retry on E2, half of them would,
// and a fault every write pays for would never eject E1).
func (gme *GCPMultiEndpoint) callEnded(p *pool.Pool, id string, c health.Class, method string, err error) {
	if err == nil {
		gme.budget.success()
		if key, retry := splitRequestID(id); retry {
			if f, ok := gme.retries.take(key); ok && f.endpoint != p.Endpoint() {
				if s := gme.snap.Load(); s != nil {
					if q := s.pools[f.endpoint]; q != nil {
						q.Observe(f.class, f.method, f.err, false)
					}
				}
			}
		}
		return
	}
	if health.Classify(err, false, false) == health.ConnectionLost {
		return
	}
	if !retryableByClient(err) {
		if c := status.Code(err); c != codes.Canceled && c != codes.DeadlineExceeded && c != codes.Unknown {
			gme.budget.success() // the backend answered
		}
		return
	}
	gme.budget.failure()
	if key, _ := splitRequestID(id); key != "" {
		gme.retries.record(key, failedAttempt{endpoint: p.Endpoint(), class: c, method: method, err: err})
	}
	if overloaded(err) {
		gme.noteOverload(p.Endpoint(), err)
	}
}

// steer returns the pool a call of group me that picked p goes to: p itself, unless p's
// endpoint is where the previous attempt of the call's request (id) failed, or p's
// endpoint is cooling down after RESOURCE_EXHAUSTED, and another endpoint of the group is
// available (pickOther); then that one, p being released. A first attempt while nothing
// cools costs a string scan and an atomic load, and allocates nothing.
func (gme *GCPMultiEndpoint) steer(p *pool.Pool, me *multiendpoint.MultiEndpoint, id string) *pool.Pool {
	key, retry := splitRequestID(id)
	if !retry && gme.cool.active.Load() == 0 {
		return p
	}
	ep := p.Endpoint()
	if retry {
		if failed, ok := gme.retries.failedOn(key); ok && failed == ep {
			if !gme.budget.allows() {
				gme.retries.refused.Add(1)
				gme.obs.metrics.rerouted(rerouteRefused)
				return p
			}
			if q, ok := gme.pickOther(me, ep); ok {
				p.Release()
				gme.retries.steered.Add(1)
				gme.obs.metrics.rerouted(rerouteRetry)
				return q
			}
			return p
		}
	}
	if gme.cool.cooling(ep) {
		if q, ok := gme.pickOther(me, ep); ok {
			p.Release()
			gme.retries.skipped.Add(1)
			gme.obs.metrics.rerouted(rerouteOverload)
			return q
		}
	}
	return p
}

// pickOther returns the acquired pool of another endpoint of group me than exclude: the
// first, in the group's priority order, of the endpoints its last verdicts find available
// whose pool is connected (READY) and not retired. False when there is none (the group's
// only available endpoint is exclude). It never waits.
func (gme *GCPMultiEndpoint) pickOther(me *multiendpoint.MultiEndpoint, exclude string) (*pool.Pool, bool) {
	s := gme.snap.Load()
	if s == nil || s.groups[me.Name()] != me {
		return nil, false
	}
	for _, e := range gme.verdicts.Available(me.Name()) {
		if e == exclude {
			continue
		}
		q := s.pools[e]
		if q == nil || q.State() != connectivity.Ready {
			continue
		}
		if q.Acquire() {
			return q, true
		}
	}
	return nil, false
}

// retryStatus returns the retry counters and the budget.
func (gme *GCPMultiEndpoint) retryStatus() RetryStatus {
	return RetryStatus{Steered: gme.retries.steered.Load(), Refused: gme.retries.refused.Load(),
		OverloadSkipped: gme.retries.skipped.Load(), Tokens: gme.budget.tokens()}
}
