package integration_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// testDirectedReadsByGroup: groups "default" [F1] and "west" [F2], two recording frontends in
// front of ONE backend; "west" has the policy "include us-west2 READ_ONLY". Through the real
// Spanner client, each kind of request routed to "west" reaches F2 with the policy when it is
// a read-only query or read without options of its own (single-use, read-only transaction,
// partitioned query) and unchanged otherwise (read-write transaction, DML, partitioned DML,
// its own options); the backend serves every one of them.
//
// What the backends make of the field: spannertest ignores it; the emulator accepts it on
// read-only requests and refuses it in read-write transactions, DML included, with
// FAILED_PRECONDITION "Directed reads can only be performed in a read-only transaction.", as
// Spanner refuses it (https://cloud.google.com/spanner/docs/directed-reads), which this
// test checks. Which replica served is not observable offline: neither has replicas.
func testDirectedReadsByGroup(t *testing.T, b backend) {
	policy := &spannerpb.DirectedReadOptions{Replicas: &spannerpb.DirectedReadOptions_IncludeReplicas_{
		IncludeReplicas: &spannerpb.DirectedReadOptions_IncludeReplicas{ReplicaSelections: []*spannerpb.DirectedReadOptions_ReplicaSelection{
			{Location: "us-west2", Type: spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY}}}}}
	own := &spannerpb.DirectedReadOptions{Replicas: &spannerpb.DirectedReadOptions_ExcludeReplicas_{
		ExcludeReplicas: &spannerpb.DirectedReadOptions_ExcludeReplicas{ReplicaSelections: []*spannerpb.DirectedReadOptions_ReplicaSelection{
			{Location: "us-east1"}}}}}
	f1 := spannermetest.NewFrontendTB(t, b.addr, spannermetest.WithRequestRecording(10000))
	f2 := spannermetest.NewFrontendTB(t, b.addr, spannermetest.WithRequestRecording(10000))
	settings := spannerme.Settings{
		ReconnectMaxDelay: 200 * time.Millisecond, MinConnectTimeout: minConnectTimeout,
		Logger:        slog.New(slog.DiscardHandler),
		DirectedReads: map[string]*spannerpb.DirectedReadOptions{"west": policy},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(),
		options(map[string]*multiendpointOptions{
			"default": group(recoveryTimeout, switchingDelay, f1.Addr()),
			"west":    group(recoveryTimeout, switchingDelay, f2.Addr()),
		}), settings,
		option.WithoutAuthentication(), option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	west := spannerme.NewMEContext(ctx, "west")

	drain := func(it *spanner.RowIterator) error {
		defer it.Stop()
		for {
			if _, err := it.Next(); err != nil {
				if errors.Is(err, iterator.Done) {
					return nil
				}
				return err
			}
		}
	}
	stmt := func(sql string) spanner.Statement { return spanner.Statement{SQL: sql} }
	// Each kind has its own SQL text (or the read's key), by which its requests are found.
	kinds := []struct {
		name string
		sql  string // the text its queries carry; "" for the read
		want string // "west", "own" or "none"
		run  func() error
	}{
		{"single-use query", "SELECT 1", "west", func() error { return drain(client.Single().Query(west, stmt("SELECT 1"))) }},
		{"single-use read", "", "west", func() error {
			return drain(client.Single().Read(west, fixture.TableAccounts, spanner.AllKeys(), []string{"AccountId"}))
		}},
		{"read-only transaction query", "SELECT 2", "west", func() error {
			tx := client.ReadOnlyTransaction()
			defer tx.Close()
			if err := drain(tx.Query(west, stmt("SELECT 2"))); err != nil {
				return err
			}
			return drain(tx.Query(west, stmt("SELECT 2")))
		}},
		{"own options", "SELECT 3", "own", func() error {
			return drain(client.Single().QueryWithOptions(west, stmt("SELECT 3"), spanner.QueryOptions{DirectedReadOptions: own}))
		}},
		{"read-write transaction query and DML", "SELECT 4", "none", func() error {
			_, err := client.ReadWriteTransaction(west, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				if err := drain(tx.Query(ctx, stmt("SELECT 4"))); err != nil {
					return err
				}
				_, err := tx.Update(ctx, stmt("UPDATE Accounts SET Balance = 0 WHERE AccountId = 'no-such-account-4'"))
				return err
			})
			return err
		}},
		{"DML", "UPDATE Accounts SET Balance = 0 WHERE AccountId = 'no-such-account-4'", "none", nil}, // run by the previous kind
		{"partitioned DML", "UPDATE Accounts SET Balance = 0 WHERE AccountId = 'no-such-account-5'", "none", func() error {
			_, err := client.PartitionedUpdate(west, stmt("UPDATE Accounts SET Balance = 0 WHERE AccountId = 'no-such-account-5'"))
			return err
		}},
		{"partitioned query", "SELECT AccountId FROM Accounts", "west", func() error {
			if b.name == "spannertest" {
				// spannertest does not implement PartitionQuery (its server panics on one).
				return status.Error(codes.Unimplemented, "PartitionQuery")
			}
			tx, err := client.BatchReadOnlyTransaction(west, spanner.StrongRead())
			if err != nil {
				return err
			}
			defer tx.Close()
			parts, err := tx.PartitionQuery(west, stmt("SELECT AccountId FROM Accounts"), spanner.PartitionOptions{})
			if err != nil {
				return err
			}
			for _, p := range parts {
				if err := drain(tx.Execute(west, p)); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	unsupported := map[string]bool{}
	for _, k := range kinds {
		if k.run == nil {
			continue
		}
		if err := k.run(); err != nil {
			if b.name == "spannertest" && spanner.ErrCode(err) == codes.Unimplemented {
				// spannertest implements no partitioned queries.
				t.Logf("%s: %s does not implement it: %v", k.name, b.name, err)
				unsupported[k.name] = true
				continue
			}
			t.Fatalf("%s through the west group: %v", k.name, err)
		}
	}
	if err := drain(client.Single().Query(ctx, stmt("SELECT 6"))); err != nil {
		t.Fatal(err)
	}
	if b.name == "emulator" {
		// The emulator refuses directed reads in a read-write transaction, as Spanner does, so
		// the read-write kinds above were served only because they went without.
		_, err := client.ReadWriteTransaction(west, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return drain(tx.QueryWithOptions(ctx, stmt("SELECT 7"), spanner.QueryOptions{DirectedReadOptions: own}))
		})
		if spanner.ErrCode(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "read-only transaction") {
			t.Errorf("a read-write transaction query with its own directed reads: %v, want the emulator's FAILED_PRECONDITION", err)
		}
	}

	got2 := received(t, f2)
	for _, k := range kinds {
		if unsupported[k.name] || (k.name == "DML" && unsupported["read-write transaction query and DML"]) {
			continue
		}
		key := k.sql
		if key == "" {
			key = "read " + fixture.TableAccounts
		}
		carriers := got2[key]
		if len(carriers) == 0 {
			t.Errorf("%s: no request reached the west frontend (received: %v)", k.name, got2)
			continue
		}
		for _, c := range carriers {
			if c.policy(policy, own) != k.want {
				t.Errorf("%s: a %s request reached the west frontend with %s options, want %s", k.name, c.method, c.policy(policy, own), k.want)
			}
		}
	}
	for key, carriers := range received(t, f1) {
		for _, c := range carriers {
			if c.dro != nil {
				t.Errorf("the default group (no policy) sent %q (%s) with options %v", key, c.method, c.dro)
			}
		}
	}
	if got := received(t, f1)["SELECT 6"]; len(got) == 0 {
		t.Errorf("the query of the default group did not reach its frontend")
	}
	if st := gme.Status(); st.Groups[1].Name != "west" || st.Groups[1].DirectedReads.String() != "include us-west2/READ_ONLY" || st.Groups[0].DirectedReads != nil {
		t.Errorf("status policies: %s %v, %s %v", st.Groups[0].Name, st.Groups[0].DirectedReads, st.Groups[1].Name, st.Groups[1].DirectedReads)
	}
}

// carrier is one query or read request a frontend received.
type carrier struct {
	method string
	dro    *spannerpb.DirectedReadOptions
}

func (c carrier) policy(group, own *spannerpb.DirectedReadOptions) string {
	switch {
	case c.dro == nil:
		return "none"
	case proto.Equal(c.dro, group):
		return "west"
	case proto.Equal(c.dro, own):
		return "own"
	}
	return fmt.Sprintf("other (%v)", c.dro)
}

// received groups the query and read requests f recorded by their SQL text ("read <table>"
// for reads).
func received(t *testing.T, f *spannermetest.Frontend) map[string][]carrier {
	t.Helper()
	out := map[string][]carrier{}
	for _, r := range f.Requests() {
		method := r.Method[strings.LastIndex(r.Method, "/")+1:]
		switch method {
		case "ExecuteSql", "ExecuteStreamingSql":
			var m spannerpb.ExecuteSqlRequest
			if err := proto.Unmarshal(r.Message, &m); err != nil {
				t.Fatal(err)
			}
			out[m.Sql] = append(out[m.Sql], carrier{method, m.DirectedReadOptions})
		case "Read", "StreamingRead":
			var m spannerpb.ReadRequest
			if err := proto.Unmarshal(r.Message, &m); err != nil {
				t.Fatal(err)
			}
			out["read "+m.Table] = append(out["read "+m.Table], carrier{method, m.DirectedReadOptions})
		}
	}
	return out
}
