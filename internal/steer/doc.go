// Package steer decides where a call goes when the group's pick is not the place for it:
// retry elsewhere (a Spanner client's retry of an attempt that failed on an endpoint goes to
// another one, within a retry budget), the resend at once of a streaming read that failed
// before any response, and the overload cooldown (an endpoint that answered
// RESOURCE_EXHAUSTED is skipped for a while). A Steerer holds the budget, the memory of failed
// attempts and the cooldowns; it reaches the routing table, the verdicts and the metrics
// through its Env and knows nothing of the GCPMultiEndpoint that holds it.
//
// Retry elsewhere (docs/health.md, "Retry elsewhere"). The Spanner client retries a call
// that failed with a retryable code, after its own backoff, as a new attempt of the same
// request: its request-ID header (cloud.google.com/go/spanner v1.96.1,
// request_id_header.go: version.process.client.channel.request.attempt) keeps the request
// and counts the attempt. When the previous attempt of a request failed on endpoint E, the
// next one goes to another available endpoint of the group than E, as the client's own
// location-aware routing does (location_aware_client.go, rerouteErrorMarker), within a
// retry budget. The client still does the retrying and the backoff; this layer only steers
// where the retry goes. The one request this layer sends itself is the resend at once of a
// streaming read that failed before any response message (resendStream).
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
//
// Resend at once (docs/health.md, "Retry elsewhere"). Retry elsewhere (Steer) steers
// the Spanner client's own retry, which comes after the client's backoff, so a request that
// met a failing endpoint still waits that backoff. A streaming read of a group that does not
// hedge is instead sent again at once, from inside this layer, to another available endpoint
// of the group, when:
//
//   - its stream ended with an error the Spanner client retries (resendOnError: UNAVAILABLE
//     other than a lost connection, RESOURCE_EXHAUSTED with a RetryInfo delay, the INTERNAL
//     of a reset stream) before any response message arrived (internal/pool, resend.go:
//     never after a message; a header alone is no answer), and its context is not done;
//   - its request is one that only reads (Resendable): what hedging may send twice
//     (spannerreq.ReadOnlyTxns.Hedgeable), plus a query or read that begins a read-only
//     transaction inline;
//   - the retry budget allows a retry (retry.Budget, gRFC A6 throttling; the failed attempt
//     has already taken its token in CallEnded), so a fault everywhere does not double the
//     load;
//   - another endpoint of the group is available and connected (Other, as retry
//     elsewhere picks).
//
// The resend is the same request on the same context, so it carries the failed attempt's
// request-ID header unchanged (request and attempt), and the caller sees only its outcome.
// At most one per stream: the replacement has no hook. When the resend fails too, its error
// is what the caller sees, and the Spanner client's retry after its backoff goes elsewhere
// than the resend's endpoint (retry elsewhere remembers the resend's failure).
//
// A stream of a group that hedges is not resent: its hedge already sends a second request
// (internal/hedge), and the two are not stacked.
package steer
