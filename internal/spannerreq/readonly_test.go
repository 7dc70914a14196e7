package spannerreq

import (
	"fmt"
	"testing"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// includeReplicas returns a policy that includes the given locations' replicas of type typ.
func includeReplicas(typ spannerpb.DirectedReadOptions_ReplicaSelection_Type, locations ...string) *spannerpb.DirectedReadOptions {
	inc := &spannerpb.DirectedReadOptions_IncludeReplicas{}
	for _, l := range locations {
		inc.ReplicaSelections = append(inc.ReplicaSelections, &spannerpb.DirectedReadOptions_ReplicaSelection{Location: l, Type: typ})
	}
	return &spannerpb.DirectedReadOptions{Replicas: &spannerpb.DirectedReadOptions_IncludeReplicas_{IncludeReplicas: inc}}
}

var westReadOnly = includeReplicas(spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY, "us-west2")

// WithDirectedReads adds the policy to read-only queries and reads without options of their
// own, on a copy, and leaves every other request (the very same message) alone.
func TestWithDirectedReadsRequestKinds(t *testing.T) {
	var txns ReadOnlyTxns
	txns.Add("s", []byte("ro-txn"))
	ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	rw := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}
	pdml := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_PartitionedDml_{PartitionedDml: &spannerpb.TransactionOptions_PartitionedDml{}}}
	singleUse := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: ro}}
	begin := func(o *spannerpb.TransactionOptions) *spannerpb.TransactionSelector {
		return &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: o}}
	}
	id := func(s string) *spannerpb.TransactionSelector {
		return &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: []byte(s)}}
	}
	own := includeReplicas(spannerpb.DirectedReadOptions_ReplicaSelection_READ_WRITE, "us-east4")
	params, _ := structpb.NewStruct(map[string]any{"p": "v"})
	query := func(ts *spannerpb.TransactionSelector) *spannerpb.ExecuteSqlRequest {
		return &spannerpb.ExecuteSqlRequest{Session: "s", Transaction: ts, Sql: "SELECT 1", Params: params, Seqno: 3}
	}
	read := func(ts *spannerpb.TransactionSelector) *spannerpb.ReadRequest {
		return &spannerpb.ReadRequest{Session: "s", Transaction: ts, Table: "Accounts", Columns: []string{"AccountId"},
			KeySet: &spannerpb.KeySet{All: true}}
	}
	ownQuery := query(singleUse)
	ownQuery.DirectedReadOptions = own
	partitioned := query(id("ro-txn"))
	partitioned.PartitionToken = []byte("partition")
	for _, tc := range []struct {
		name string
		req  proto.Message
		want bool // gets the policy
	}{
		{"single-use query", query(singleUse), true},
		{"query without a selector", query(nil), true},
		{"query beginning a read-only transaction", query(begin(ro)), true},
		{"query in a known read-only transaction", query(id("ro-txn")), true},
		{"partitioned query", partitioned, true},
		{"query in an unknown transaction", query(id("rw-txn")), false},
		{"query beginning a read-write transaction", query(begin(rw)), false},
		{"DML beginning partitioned DML", query(begin(pdml)), false},
		{"single-use read-write", query(&spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: rw}}), false},
		{"query with its own options", ownQuery, false},
		{"single-use read", read(singleUse), true},
		{"read in a known read-only transaction", read(id("ro-txn")), true},
		{"read in an unknown transaction", read(id("rw-txn")), false},
		{"the read-only ID in another session", func() *spannerpb.ExecuteSqlRequest { q := query(id("ro-txn")); q.Session = "other"; return q }(), false},
		{"BeginTransaction", &spannerpb.BeginTransactionRequest{Session: "s", Options: ro}, false},
		{"ExecuteBatchDml", &spannerpb.ExecuteBatchDmlRequest{Session: "s", Transaction: singleUse}, false},
		{"Commit", &spannerpb.CommitRequest{Session: "s"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.req)
			got := txns.WithDirectedReads(tc.req, westReadOnly)
			if !proto.Equal(tc.req, before) {
				t.Fatalf("the caller's message was modified: %v", tc.req)
			}
			if !tc.want {
				if got != any(tc.req) {
					t.Fatalf("got %v, want the request itself", got)
				}
				return
			}
			want := proto.Clone(tc.req)
			switch w := want.(type) {
			case *spannerpb.ExecuteSqlRequest:
				w.DirectedReadOptions = westReadOnly
			case *spannerpb.ReadRequest:
				w.DirectedReadOptions = westReadOnly
			}
			if got == any(tc.req) || !proto.Equal(got.(proto.Message), want) {
				t.Fatalf("got %v, want a copy with the policy: %v", got, want)
			}
		})
	}
}

// Past maxReadOnlyTxns, the oldest read-only transaction is forgotten, the others kept.
func TestReadOnlyTxnsForgetsTheOldest(t *testing.T) {
	var txns ReadOnlyTxns
	for i := range maxReadOnlyTxns + 1 {
		txns.Add("s", fmt.Appendf(nil, "tx-%d", i))
	}
	txns.Add("s", []byte("tx-1")) // known: not added again
	txns.Add("s", nil)
	has := func(id []byte) bool { return txns.has("s", id) }
	if has([]byte("tx-0")) || !has([]byte("tx-1")) || !has(fmt.Appendf(nil, "tx-%d", maxReadOnlyTxns)) {
		t.Errorf("after %d IDs: tx-0 %v (want forgotten), tx-1 %v, the last %v (want kept)", maxReadOnlyTxns+1,
			has([]byte("tx-0")), has([]byte("tx-1")), has(fmt.Appendf(nil, "tx-%d", maxReadOnlyTxns)))
	}
	if txns.has("t", []byte("tx-1")) {
		t.Error("tx-1 of session s counts in session t")
	}
	if len(txns.ids) != maxReadOnlyTxns {
		t.Errorf("%d IDs kept, want %d", len(txns.ids), maxReadOnlyTxns)
	}
}
