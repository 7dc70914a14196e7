package spannerreq

import (
	"context"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc/metadata"
)

// RouteToLeaderHeader is the header with which the Spanner client sends a request of a
// read-write or partitioned DML transaction to the leader region (cloud.google.com/go/spanner
// v1.96.1, client.go routeToLeaderHeader).
const RouteToLeaderHeader = "x-goog-spanner-route-to-leader"

// Hedgeable reports whether req, the request of a streaming query or read, may be sent twice
// (spannerme.Settings.Hedging): an explicit allow-list of requests that read, and only read, in a
// read-only transaction:
//
//   - a query (*spannerpb.ExecuteSqlRequest) or read (*spannerpb.ReadRequest) without a
//     transaction selector (Spanner runs it in a temporary read-only transaction) or in a
//     single-use read-only transaction;
//   - one naming by ID a transaction t saw begin read-only: by a
//     BeginTransaction, or inline by a query or read whose first response it saw;
//
// and none of those when it runs a partition (PartitionToken: a partitioned query or read of
// a batch transaction), when it is DML (a query in a read-only transaction cannot be: Spanner
// refuses DML outside read-write transactions), or when ctx carries the route-to-leader
// header, which the Spanner client sends only with read-write and partitioned DML
// transactions' requests. Everything else (read-write transactions, DML, batch DML,
// Commit, Rollback, BeginTransaction, partitioned calls, unknown messages) is not hedgeable.
//
// Nor is a query or read that begins a read-only transaction inline: its hedge would begin a
// second transaction in the same session, and a backend that keeps one transaction per
// session invalidates the first when the second begins (the Cloud Spanner emulator then
// fails the first transaction's next query: NOT_FOUND, or FAILED_PRECONDITION "Invalid
// transaction ID" in a multiplexed session; TestHedgedReadOnlyTransactionOfTheSpannerClient). The transaction's later queries, which name it by ID,
// are hedgeable once its first response has been seen.
// It allocates nothing, except that it reads the route-to-leader header, which copies the
// header's value when the request is otherwise hedgeable and the header is present.
func (t *ReadOnlyTxns) Hedgeable(ctx context.Context, req any) bool {
	var session string
	var sel *spannerpb.TransactionSelector
	switch r := req.(type) {
	case *spannerpb.ExecuteSqlRequest:
		if r == nil || len(r.PartitionToken) != 0 {
			return false
		}
		session, sel = r.Session, r.Transaction
	case *spannerpb.ReadRequest:
		if r == nil || len(r.PartitionToken) != 0 {
			return false
		}
		session, sel = r.Session, r.Transaction
	default:
		return false
	}
	if sel.GetBegin() != nil || !t.readOnlySelector(session, sel) {
		return false
	}
	for _, v := range metadata.ValueFromOutgoingContext(ctx, RouteToLeaderHeader) {
		if v == "true" {
			return false
		}
	}
	return true
}
