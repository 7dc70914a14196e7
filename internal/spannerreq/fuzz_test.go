package spannerreq

import (
	"testing"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// FuzzRequestClassifiers: any request of any method is classed (Class), judged
// read-only or not, and given a group's directed reads or not, without a panic and without
// the caller's message being changed; a request gets the policy only if it is a query or
// read without one of its own.
func FuzzRequestClassifiers(f *testing.F) {
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	rw := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}
	for _, s := range []struct {
		method string
		kind   uint8
		msg    proto.Message
	}{
		{"ExecuteSql", 0, &spannerpb.ExecuteSqlRequest{Session: "s", Sql: "SELECT 1"}},
		{"ExecuteStreamingSql", 0, &spannerpb.ExecuteSqlRequest{Session: "s", Transaction: &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: ro}}}},
		{"ExecuteSql", 0, &spannerpb.ExecuteSqlRequest{Session: "s", Transaction: &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: []byte("tx")}}}},
		{"Read", 1, &spannerpb.ReadRequest{Session: "s", Transaction: &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: rw}}}},
		{"StreamingRead", 1, &spannerpb.ReadRequest{Session: "s", DirectedReadOptions: &spannerpb.DirectedReadOptions{}}},
		{"BeginTransaction", 2, &spannerpb.BeginTransactionRequest{Session: "s", Options: ro}},
		{"BeginTransaction", 2, &spannerpb.BeginTransactionRequest{Session: "s", Options: rw}},
		{"Commit", 3, &spannerpb.CommitRequest{Session: "s"}},
		{"CreateSession", 3, &spannerpb.CreateSessionRequest{Database: "d"}},
	} {
		f.Add("/google.spanner.v1.Spanner/"+s.method, s.kind, marshal(s.msg))
	}
	f.Add("/other.Service/Method", uint8(0), []byte{0xff, 0x01})
	f.Add("", uint8(9), []byte(nil))
	dro := &spannerpb.DirectedReadOptions{Replicas: &spannerpb.DirectedReadOptions_ExcludeReplicas_{
		ExcludeReplicas: &spannerpb.DirectedReadOptions_ExcludeReplicas{}}}
	f.Fuzz(func(t *testing.T, method string, kind uint8, payload []byte) {
		var req proto.Message
		switch kind % 4 {
		case 0:
			req = &spannerpb.ExecuteSqlRequest{}
		case 1:
			req = &spannerpb.ReadRequest{}
		case 2:
			req = &spannerpb.BeginTransactionRequest{}
		default:
			req = &spannerpb.CommitRequest{}
		}
		if proto.Unmarshal(payload, req) != nil {
			return
		}
		before := proto.Clone(req)
		if c := Class(method, req); c > health.Sessions {
			t.Fatalf("Class(%q) = %d: no such class", method, c)
		}
		_ = Class(method, nil)
		var txns ReadOnlyTxns
		txns.NoteBegin(method, req, &spannerpb.Transaction{Id: []byte("tx")})
		out := txns.WithDirectedReads(req, dro)
		if !proto.Equal(req, before) {
			t.Fatalf("the caller's request was changed: %v, was %v", req, before)
		}
		if out != any(req) {
			var own *spannerpb.DirectedReadOptions
			switch r := req.(type) {
			case *spannerpb.ExecuteSqlRequest:
				own = r.GetDirectedReadOptions()
			case *spannerpb.ReadRequest:
				own = r.GetDirectedReadOptions()
			default:
				t.Fatalf("a %T got directed reads", req)
			}
			if own != nil {
				t.Fatal("a request with directed reads of its own got the group's")
			}
		}
	})
}
