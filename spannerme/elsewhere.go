package spannerme

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/retry"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// Retry elsewhere (docs/health.md, "Retry elsewhere"). The Spanner client retries a call
// that failed with a retryable code, after its own backoff, as a new attempt of the same
// request: its request-ID header (cloud.google.com/go/spanner v1.96.1,
// request_id_header.go: version.process.client.channel.request.attempt) keeps the request
// and counts the attempt. When the previous attempt of a request failed on endpoint E, the
// next one goes to another available endpoint of the group than E, as the client's own
// location-aware routing does (location_aware_client.go, rerouteErrorMarker), within a
// retry budget. The client still does the retrying and the backoff; this layer only steers
// where the retry goes. The one request this layer sends itself is the resend at once of a
// streaming read that failed before any response message (resend.go).
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
		gme.budget.Success()
		if key, retry := spannerreq.SplitRequestID(id); retry {
			if f, ok := gme.retries.Take(key); ok && f.Endpoint != p.Endpoint() {
				if s := gme.snap.Load(); s != nil {
					if q := s.Pools[f.Endpoint]; q != nil {
						q.Observe(f.Class, f.Method, f.Err, false)
					}
				}
			}
		}
		return
	}
	if health.Classify(err, false, false) == health.ConnectionLost {
		return
	}
	if !spannerreq.RetryableByClient(err) {
		if c := status.Code(err); c != codes.Canceled && c != codes.DeadlineExceeded && c != codes.Unknown {
			gme.budget.Success() // the backend answered
		}
		return
	}
	gme.budget.Failure()
	if key, _ := spannerreq.SplitRequestID(id); key != "" {
		gme.retries.Record(key, retry.Failed{Endpoint: p.Endpoint(), Class: c, Method: method, Err: err})
	}
	if spannerreq.Overloaded(err) {
		gme.noteOverload(p.Endpoint(), err)
	}
}

// steer returns the pool a call of group me that picked p goes to: p itself, unless p's
// endpoint is where the previous attempt of the call's request (id) failed, or p's
// endpoint is cooling down after RESOURCE_EXHAUSTED, and another endpoint of the group is
// available (pickOther); then that one, p being released. A first attempt while nothing
// cools costs a string scan and an atomic load, and allocates nothing.
func (gme *GCPMultiEndpoint) steer(p *pool.Pool, me *multiendpoint.MultiEndpoint, id string) *pool.Pool {
	key, retry := spannerreq.SplitRequestID(id)
	if !retry && gme.cool.Active() == 0 {
		return p
	}
	ep := p.Endpoint()
	if retry {
		if failed, ok := gme.retries.FailedOn(key); ok && failed == ep {
			if !gme.budget.Allows() {
				gme.refused.Add(1)
				gme.obs.metrics.rerouted(rerouteRefused)
				return p
			}
			if q, ok := gme.pickOther(me, ep); ok {
				p.Release()
				gme.steered.Add(1)
				gme.obs.metrics.rerouted(rerouteRetry)
				return q
			}
			return p
		}
	}
	if gme.cool.Cooling(ep) {
		if q, ok := gme.pickOther(me, ep); ok {
			p.Release()
			gme.skipped.Add(1)
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
	if s == nil || s.Group(me.Name()) != me {
		return nil, false
	}
	for _, e := range gme.verdicts.Available(me.Name()) {
		if e == exclude {
			continue
		}
		q := s.Pools[e]
		if q == nil || q.State() != connectivity.Ready {
			continue
		}
		if q.Acquire() {
			return q, true
		}
	}
	return nil, false
}

// noteOverload starts (or extends) endpoint's overload cooldown (internal/cooldown) after
// a call on it ended with err, a RESOURCE_EXHAUSTED status, with the server's RetryInfo delay
// when err has one (spannerreq.RetryDelay). When a cooldown starts the groups are evaluated
// again (the verdicts read it), as they are when it ends (cooldownEnded, on its timer).
func (gme *GCPMultiEndpoint) noteOverload(endpoint string, err error) {
	delay, fromInfo := spannerreq.RetryDelay(err)
	started, length, repeats := gme.cool.Note(endpoint, delay, fromInfo)
	if !started {
		return
	}
	gme.obs.cooling(endpoint, gme.endpointName(endpoint), length, fromInfo, repeats)
	gme.evaluateAll()
	gme.changed.signal()
}

// cooldownEnded is told by the cooldowns when endpoint's cooldown of length ends: it logs,
// and the groups are evaluated again.
func (gme *GCPMultiEndpoint) cooldownEnded(endpoint string, length time.Duration) {
	gme.obs.cooled(endpoint, gme.endpointName(endpoint), length)
	gme.evaluateAll()
	gme.changed.signal()
}
