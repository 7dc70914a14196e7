package spannerme

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc/metadata"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// Resend at once (docs/health.md, "Retry elsewhere"). Retry elsewhere (elsewhere.go) steers
// the Spanner client's own retry, which comes after the client's backoff, so a request that
// met a failing endpoint still waits that backoff. A streaming read of a group that does not
// hedge is instead sent again at once, from inside this layer, to another available endpoint
// of the group, when:
//
//   - its stream ended with an error the Spanner client retries (resendOnError: UNAVAILABLE
//     other than a lost connection, RESOURCE_EXHAUSTED with a RetryInfo delay, the INTERNAL
//     of a reset stream) before any response message arrived (internal/pool, resend.go: never after a message; a header alone is
//     no answer), and its context is not done;
//   - its request is one that only reads (resendable): what hedging may send twice
//     (spannerreq.ReadOnlyTxns.Hedgeable), plus a query or read that begins a read-only
//     transaction inline;
//   - the retry budget allows a retry (retry.Budget, gRFC A6 throttling; the failed attempt
//     has already taken its token in callEnded), so a fault everywhere does not double the
//     load;
//   - another endpoint of the group is available and connected (pickOther, as retry
//     elsewhere picks).
//
// The resend is the same request on the same context, so it carries the failed attempt's
// request-ID header unchanged (request and attempt), and the caller sees only its outcome.
// At most one per stream: the replacement has no hook. When the resend fails too, its error
// is what the caller sees, and the Spanner client's retry after its backoff goes elsewhere
// than the resend's endpoint (retry elsewhere remembers the resend's failure).
//
// A stream of a group that hedges is not resent: its hedge already sends a second request
// (hedge.go), and the two are not stacked.

// resendStream is the pool.Resender of every stream newStream sends (gme.resendHook, made
// once in NewGCPMultiEndpoint*): it returns the acquired pool of another available endpoint
// of r's group and the replacement's CallInfo, counted in Status.Retries.Resent and the
// resends metric, or false (counted in Status.Retries.ResendRefused when the budget refused).
func (gme *GCPMultiEndpoint) resendStream(r pool.ResendRequest) (*pool.Pool, pool.CallInfo, bool) {
	if !resendOnError(r.Err) || !gme.resendable(r.Ctx, r.Req) {
		return nil, pool.CallInfo{}, false
	}
	s := gme.snap.Load()
	if s == nil {
		return nil, pool.CallInfo{}, false
	}
	me := s.Group(r.Call.Group)
	if me == nil {
		return nil, pool.CallInfo{}, false
	}
	from := r.Pool.Endpoint()
	if !gme.budget.Allows() {
		gme.resendRefused.Add(1)
		gme.obs.metrics.rerouted(rerouteRefused)
		return nil, pool.CallInfo{}, false
	}
	q, ok := gme.pickOther(me, from)
	if !ok {
		return nil, pool.CallInfo{}, false
	}
	gme.resent.Add(1)
	gme.obs.metrics.resends.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(AttrMultiEndpoint, me.Name()), attribute.String(AttrResendFrom, from), attribute.String(AttrEndpoint, q.Endpoint())))
	start := gme.obs.callBegin(r.Ctx, q.Endpoint(), poolName(q), me.Name())
	tc := gme.tiers.Begin(me, q)
	return q, pool.CallInfo{Group: me.Name(), Tag: r.Call.Tag, Start: start, Class: r.Call.Class, First: tc.First()}, true
}

// resendOnError reports whether a stream that ended with err before any response message
// is resent: err is one the Spanner client retries (spannerreq.RetryableByClient), except
//
//   - RESOURCE_EXHAUSTED without a RetryInfo delay, which the client does not retry
//     (cloud.google.com/go/spanner v1.96.1, retry.go: "Retry ResourceExhausted error only if
//     there's a server delay in the trailer"): its caller sees it, as before. With a delay
//     the resend does not wait for it: the delay is the failed endpoint's, which its
//     overload cooldown keeps out of the group's choice meanwhile, and the resend goes
//     elsewhere;
//   - a connection lost under the stream (health.ConnectionLost: a reset, GOAWAY, the
//     transport closing), which says nothing of the endpoint: the client's retry goes where
//     the group sends it, as the pool reconnects, as retry elsewhere does (callEnded).
func resendOnError(err error) bool {
	if !spannerreq.RetryableByClient(err) {
		return false
	}
	if spannerreq.Overloaded(err) {
		_, ok := spannerreq.RetryDelay(err)
		return ok
	}
	return health.Classify(err, false, false) != health.ConnectionLost
}

// resendable reports whether req, the request of a streaming query or read sent with ctx,
// may be sent again at once to another endpoint after its stream failed before any response
// message: it only reads. Those are
//
//   - what hedging may send twice (spannerreq.ReadOnlyTxns.Hedgeable): a query or read in a
//     single-use read-only transaction or with no transaction selector (a temporary
//     read-only transaction), or naming by ID a read-only transaction seen to begin; none
//     of them partitioned, DML, or carrying the route-to-leader header;
//   - a query or read that begins a read-only transaction inline (TransactionSelector.begin
//     with read_only options), not partitioned, without route-to-leader: the failed attempt
//     delivered no message, so the client never learnt a transaction from it; the resend
//     begins one, whose ID the client learns from the resend's first message, as from its
//     own retry. A transaction the failed attempt may have begun in the database is a
//     read-only one, which takes no locks (Spanner docs, Transactions overview,
//     https://cloud.google.com/spanner/docs/transactions: read-only transactions "do not
//     take locks"), and is never used.
//
// Everything else is not: a read-write transaction's reads take locks, DML and batch DML
// write (their seqno makes a replay within the transaction idempotent, but only the client
// knows whether it replays), Commit, Rollback, BeginTransaction and partitioned calls are
// unary or tied to state this layer does not follow.
func (gme *GCPMultiEndpoint) resendable(ctx context.Context, req any) bool {
	if gme.roTxns.Hedgeable(ctx, req) {
		return true
	}
	if _, ok := spannerreq.BeginsReadOnly(req); !ok {
		return false
	}
	switch r := req.(type) {
	case *spannerpb.ExecuteSqlRequest:
		if len(r.GetPartitionToken()) != 0 {
			return false
		}
	case *spannerpb.ReadRequest:
		if len(r.GetPartitionToken()) != 0 {
			return false
		}
	}
	for _, v := range metadata.ValueFromOutgoingContext(ctx, spannerreq.RouteToLeaderHeader) {
		if v == "true" {
			return false
		}
	}
	return true
}
