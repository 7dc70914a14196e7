package spannerme

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// Queries (unary ExecuteSql) in a multi-use read-only transaction, named by the ID that its
// BeginTransaction returned, count in the reads class, with no directed-read policy on any
// group: when they fail, the endpoint is ejected for reads, never for writes (the class of
// DML in a read-write transaction, also named by ID).
func TestQueriesInAReadOnlyTransactionCountAsReads(t *testing.T) {
	addr, db := startSeededSpannertest(t)
	fe := spannermetest.NewFrontendTB(t, addr)
	events := make(chan HealthEvent, 16)
	s := fastSettings(nil)
	s.Health.ConsecutiveFailures = 3
	s.OnHealth = func(ev HealthEvent) { events <- ev }
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, fe.Addr())}), s)
	client := spannerpb.NewSpannerClient(gme)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := client.CreateSession(ctx, &spannerpb.CreateSessionRequest{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := client.BeginTransaction(ctx, &spannerpb.BeginTransactionRequest{Session: sess.Name,
		Options: &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fe.FailMethods(codes.Unavailable, spannerreq.MethodExecuteSQL); err != nil {
		t.Fatal(err)
	}
	byID := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: tx.Id}}
	for i := range 3 {
		_, err := client.ExecuteSql(ctx, &spannerpb.ExecuteSqlRequest{Session: sess.Name, Sql: "SELECT 1", Transaction: byID, Seqno: int64(i)})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("query %d: %v, want UNAVAILABLE from the frontend", i, err)
		}
	}
	select {
	case ev := <-events:
		if ev.Kind != EndpointEjected || ev.Class != "reads" {
			t.Fatalf("health event %+v, want the endpoint ejected for reads", ev)
		}
	case <-ctx.Done():
		t.Fatal("no ejection after 3 failed queries in a read-only transaction")
	}
}
