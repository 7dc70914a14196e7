package spannerreq

import (
	"strings"

	"cloud.google.com/go/spanner/apiv1/spannerpb"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// Service prefixes the Spanner API's full method names.
const Service = "/google.spanner.v1.Spanner/"

// Class returns the class a call to method with request req (nil for a stream, whose
// request comes later) counts in for health from call outcomes (spannerme.HealthSettings): each class
// is judged apart, so that an endpoint whose writes keep failing while its reads succeed is
// ejected. Streams are classed by method alone: a streaming query or read counts as a read,
// inside a read-write transaction too. It allocates nothing.
func Class(method string, req any) health.Class {
	name, ok := strings.CutPrefix(method, Service)
	if !ok {
		return health.Calls
	}
	switch name {
	case "ExecuteStreamingSql", "StreamingRead", "Read", "PartitionQuery", "PartitionRead":
		return health.Reads
	case "Commit", "ExecuteBatchDml", "Rollback":
		return health.Writes
	case "ExecuteSql": // DML, and queries of the legacy session pool
		if r, ok := req.(*spannerpb.ExecuteSqlRequest); ok && ReadOnly(r.GetTransaction()) {
			return health.Reads
		}
		return health.Writes
	case "BeginTransaction":
		if r, ok := req.(*spannerpb.BeginTransactionRequest); ok && r.GetOptions().GetReadOnly() != nil {
			return health.Reads
		}
		return health.Writes
	case "CreateSession", "BatchCreateSessions", "GetSession", "DeleteSession", "ListSessions":
		return health.Sessions
	}
	return health.Calls
}

// ReadOnly reports whether a request with the transaction selector sel runs read-only: a
// single-use transaction (the default) or one it begins that is read-only. A transaction
// named by ID is taken as read-write, as the Spanner client's DML uses them; a unary call
// is classed with the read-only transactions seen beginning too (ReadOnlyTxns.NamesReadOnly).
func ReadOnly(sel *spannerpb.TransactionSelector) bool {
	switch {
	case sel == nil:
		return true
	case sel.GetSingleUse() != nil:
		return sel.GetSingleUse().GetReadOnly() != nil
	case sel.GetBegin() != nil:
		return sel.GetBegin().GetReadOnly() != nil
	}
	return false
}

// SuccessCounts reports whether a successful call to method with request req says that the
// calls of its class (Class) work. A read-write BeginTransaction does not: it reaches no
// commit path (a transaction is begun without writing anything), so when the endpoint's
// commits fail while its transactions begin (a gray failure of writes), counting each begin
// as a write that succeeded would reset the writes' run of consecutive failures before every
// commit of the Spanner client's mutation-only transactions (each begins with a
// BeginTransaction) and keep the endpoint in service for many more refused commits. Its
// failures still count. It allocates nothing.
func SuccessCounts(method string, req any) bool {
	if method != MethodBeginTransaction {
		return true
	}
	r, ok := req.(*spannerpb.BeginTransactionRequest)
	return ok && r.GetOptions().GetReadOnly() != nil
}
