// Package hedge hedges the read-only streaming reads of a GCPMultiEndpoint's groups that hedge
// (spannerme.Settings.Hedging). A stream of a hedging group is a Stream over the stream sent to
// the group's current endpoint (the primary). Its request, seen in SendMsg, decides whether it
// may be hedged (spannerreq.ReadOnlyTxns.Hedgeable); if so, the Hedger's Scheduler sends the same request to another
// available endpoint of the group (Env.Other) when the delay passes with no response message
// yet, within the group's budget. From then on the two streams race for the first message: the
// caller reads RecvMsg on the primary, a goroutine of the hedge's reads the hedge's first
// message into a message of its own. The first stream to deliver a message, or to end with a
// status that is final for the Spanner client (not retryable), wins; the other's context is
// cancelled. Whichever wins, the caller reads on after that from the winner alone. A stream
// whose first message arrived is never hedged; nor is one of a method other than
// ExecuteStreamingSql and StreamingRead (both answer PartialResultSet messages).
//
// The loser is cancelled: its CANCELED counts for nothing in health (health.Classify), and is
// counted in the calls metric with code CANCELED. A hedgeable request begins no transaction
// (spannerreq.ReadOnlyTxns.Hedgeable refuses inline begins), so a loser leaves nothing behind
// on the server: a single-use read-only transaction ends with its stream, and a query naming a
// read-only transaction by ID only reads in it, at the transaction's timestamp, which both
// endpoints share (the transaction lives in the database, not in an endpoint). A stream whose
// request begins a read-only transaction inline is not hedged, but its first message is read
// here for the transaction's ID, so that the transaction's later queries can be.
//
// The Spanner client's grpc.Header, grpc.Trailer and grpc.Peer call options are not given
// to the hedge (gRPC writes them as a stream ends, which for a cancelled primary happens on a
// goroutine of gRPC's own): the hedge gets its own, and when it wins they are copied to the
// caller's once the primary has ended.
//
// The package knows nothing of the GCPMultiEndpoint: a Hedger reaches the endpoints through
// its Env, and the GCPMultiEndpoint holds one Hedger and calls it.
package hedge
