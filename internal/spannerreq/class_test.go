package spannerreq

import (
	"testing"

	"cloud.google.com/go/spanner/apiv1/spannerpb"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

func TestClass(t *testing.T) {
	ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	rw := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}
	pdml := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_PartitionedDml_{PartitionedDml: &spannerpb.TransactionOptions_PartitionedDml{}}}
	sel := func(s *spannerpb.TransactionSelector) *spannerpb.ExecuteSqlRequest {
		return &spannerpb.ExecuteSqlRequest{Transaction: s}
	}
	for _, tc := range []struct {
		name   string
		method string
		req    any
		want   health.Class
	}{
		{"streaming query", "ExecuteStreamingSql", nil, health.Reads},
		{"streaming read", "StreamingRead", nil, health.Reads},
		{"partition query", "PartitionQuery", nil, health.Reads},
		{"commit", "Commit", nil, health.Writes},
		{"batch DML", "ExecuteBatchDml", nil, health.Writes},
		{"rollback", "Rollback", nil, health.Writes},
		{"single-use query (no selector)", "ExecuteSql", sel(nil), health.Reads},
		{"single-use read-only", "ExecuteSql", sel(&spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: ro}}), health.Reads},
		{"partitioned DML", "ExecuteSql", sel(&spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: pdml}}), health.Writes},
		{"DML beginning a read-write transaction", "ExecuteSql", sel(&spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: rw}}), health.Writes},
		{"DML in a transaction by ID", "ExecuteSql", sel(&spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: []byte("t")}}), health.Writes},
		{"read-only BeginTransaction", "BeginTransaction", &spannerpb.BeginTransactionRequest{Options: ro}, health.Reads},
		{"read-write BeginTransaction", "BeginTransaction", &spannerpb.BeginTransactionRequest{Options: rw}, health.Writes},
		{"create session", "BatchCreateSessions", nil, health.Sessions},
		{"get session (the probe)", "GetSession", nil, health.Sessions},
		{"unknown Spanner method", "Frobnicate", nil, health.Calls},
	} {
		if got := Class(Service+tc.method, tc.req); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := Class("/grpc.testing.TestService/UnaryCall", nil); got != health.Calls {
		t.Errorf("another service's method: %v, want calls", got)
	}
}

// BenchmarkMethodClass measures what classing a call costs on the call path.
func BenchmarkClass(b *testing.B) {
	req := &spannerpb.ExecuteSqlRequest{}
	for _, m := range []string{"ExecuteStreamingSql", "Commit", "ExecuteSql", "GetSession"} {
		method := Service + m
		b.Run(m, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Class(method, req)
			}
		})
	}
}

// A read-write BeginTransaction's success says nothing of the commit path; every other
// success, a read-only BeginTransaction's included, counts for its class.
func TestSuccessCounts(t *testing.T) {
	ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	rw := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}
	for _, tc := range []struct {
		method string
		req    any
		want   bool
	}{
		{MethodBeginTransaction, &spannerpb.BeginTransactionRequest{Options: rw}, false},
		{MethodBeginTransaction, &spannerpb.BeginTransactionRequest{}, false},
		{MethodBeginTransaction, nil, false},
		{MethodBeginTransaction, &spannerpb.BeginTransactionRequest{Options: ro}, true},
		{Service + "Commit", &spannerpb.CommitRequest{}, true},
		{MethodExecuteSQL, &spannerpb.ExecuteSqlRequest{}, true},
	} {
		if got := SuccessCounts(tc.method, tc.req); got != tc.want {
			t.Errorf("SuccessCounts(%s, %v) = %v, want %v", tc.method, tc.req, got, tc.want)
		}
	}
}
