package spannerme

import (
	"context"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// The caller's request belongs to the caller. The hedge fires while E1 holds the primary,
// and its stream is held open on E2 (as on a busy pool, where a stream waits for a free
// HTTP/2 stream); E1 then fails the primary with UNAVAILABLE, and the caller, as the Spanner
// client does for its retry, rewrites the same request at once. The hedge sends nothing and
// counts nothing after the call returned (it is abandoned: its context ends), and under
// -race no read of the request races the caller's writes (the hedge would send a copy made
// while the caller could not have the request back).
func TestHedgeLeavesTheCallersRequestAlone(t *testing.T) {
	addr, db := startSeededSpannertest(t)
	opening := make(chan struct{}, 1)
	release := make(chan struct{})
	abandoned := make(chan bool, 1)
	var e2 string
	holdHedge := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == spannerreq.MethodExecuteStreamingSQL && e2 != "" && strings.Contains(cc.Target(), e2) {
			select {
			case opening <- struct{}{}:
			default:
			}
			select {
			case <-release:
				abandoned <- false
			case <-ctx.Done():
				abandoned <- true
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
	r := &rawHedgeRig{hedgeRig: newHedgeRigOn(t, addr, db, &HedgingSettings{Delay: 5 * time.Millisecond}, option.WithGRPCDialOption(holdHedge))}
	r.api = spannerpb.NewSpannerClient(r.gme)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := r.api.CreateSession(ctx, &spannerpb.CreateSessionRequest{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	e2 = r.e2.Addr()
	r.e1.SetLatency(200 * time.Millisecond)
	if err := r.e1.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	before := streamsReceived(r.e2)

	req := &spannerpb.ExecuteSqlRequest{Session: sess.Name, Sql: countSQL, Transaction: singleUse}
	stream, err := r.api.ExecuteStreamingSql(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-opening:
	case <-ctx.Done():
		t.Fatal("the hedge was not opened")
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the call: %v, want E1's UNAVAILABLE", err)
	}
	// The call returned: the caller rewrites its request (the client's retry sets a resume
	// token), while the held hedge is released.
	close(release)
	for i := range 1000 {
		req.ResumeToken = []byte{byte(i)}
		req.Sql = countSQL + " -- retry"
	}
	select {
	case a := <-abandoned:
		if !a {
			t.Error("the hedge was still being opened after the call returned; want it abandoned")
		}
	case <-ctx.Done():
		t.Fatal("the held hedge never ended")
	}
	h := r.hedging(t)
	want := HedgingStatus{Hedgeable: 1, Delay: 5 * time.Millisecond, MinDelay: hedge.DefaultMinDelay, Budget: hedge.DefaultBudget}
	if h != want {
		t.Errorf("hedging status %+v, want %+v: a hedge that never raced counts neither sent, won nor lost", h, want)
	}
	if n := streamsReceived(r.e2) - before; n != 0 {
		t.Errorf("E2 received %d query streams, want none", n)
	}
}
