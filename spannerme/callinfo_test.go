package spannerme

// CallInfo through the Spanner client: a hedged read, a resent read and a write steered after a
// failure each report what happened; a context without one records nothing.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// describe prints attempts for a failure message.
func describe(as []CallAttempt) string {
	var b strings.Builder
	for i, a := range as {
		fmt.Fprintf(&b, "\n  %d: %s %s on %s steeredFrom=%q (%s) resentFrom=%q hedge=%v hedged=%v won=%v err=%v",
			i, a.Group, strings.TrimPrefix(a.Method, spannerreq.Service), a.Endpoint, a.SteeredFrom, a.Steered, a.ResentFrom, a.Hedge, a.Hedged, a.Won, a.Err)
	}
	return b.String()
}

// A point read whose stream E1 holds is hedged on E2, whose answer wins: the record has the
// read on E1, hedged and not won, and the hedge on E2, won and ended well.
func TestCallInfo_HedgedRead(t *testing.T) {
	r := newHedgeRig(t, &HedgingSettings{Delay: 20 * time.Millisecond, Budget: 1})
	r.slowQueries.Store(true)
	info := &CallInfo{}
	ctx, cancel := context.WithTimeout(WithCallInfo(context.Background(), info), 10*time.Second)
	defer cancel()
	if _, err := r.client.Single().ReadRow(ctx, fixture.TableAccounts, spanner.Key{"acct-0001"}, []string{"Balance"}); err != nil {
		t.Fatal(err)
	}
	as := info.Attempts()
	var primary, hedge *CallAttempt
	for i := range as {
		if as[i].Method != spannerreq.MethodStreamingRead {
			continue
		}
		if as[i].Hedge {
			hedge = &as[i]
		} else {
			primary = &as[i]
		}
	}
	if primary == nil || hedge == nil {
		t.Fatalf("want the read and its hedge, got:%s", describe(as))
	}
	if primary.Endpoint != r.e1.Addr() || !primary.Hedged || primary.Won || primary.Group != "default" {
		t.Errorf("the read: want on E1, hedged, lost:%s", describe(as))
	}
	if hedge.Endpoint != r.e2.Addr() || !hedge.Won || hedge.Err != nil || hedge.End.IsZero() || hedge.Hedged {
		t.Errorf("the hedge: want on E2, won, ended well:%s", describe(as))
	}
	t.Logf("record (E1 = %s, E2 = %s):%s", r.e1.Addr(), r.e2.Addr(), describe(as))
}

// A streaming read that E1 fails with UNAVAILABLE before any message is resent at once to E2:
// the record has the failed attempt on E1 and the resent one on E2, from E1, which succeeded.
func TestCallInfo_ResentRead(t *testing.T) {
	b := startFrontendBackend(t, 2)
	e1, e2 := b.fes[0], b.fes[1]
	client, _ := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(10*time.Second, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	if err := e1.FailMethods(codes.Unavailable, spannerreq.MethodStreamingRead); err != nil {
		t.Fatal(err)
	}
	info := &CallInfo{}
	ctx, cancel := context.WithTimeout(WithCallInfo(context.Background(), info), 10*time.Second)
	defer cancel()
	if _, err := client.Single().ReadRow(ctx, fixture.TableAccounts, spanner.Key{"acct-0001"}, []string{"Balance"}); err != nil {
		t.Fatal(err)
	}
	as := info.Attempts()
	if len(as) != 2 {
		t.Fatalf("want 2 attempts, got:%s", describe(as))
	}
	if a := as[0]; a.Endpoint != e1.Addr() || a.Method != spannerreq.MethodStreamingRead || spanner.ErrCode(a.Err) != codes.Unavailable || a.ResentFrom != "" {
		t.Errorf("attempt 1: want the read failing UNAVAILABLE on E1:%s", describe(as))
	}
	if a := as[1]; a.Endpoint != e2.Addr() || a.ResentFrom != e1.Addr() || a.Err != nil || a.End.IsZero() || a.SteeredFrom != "" {
		t.Errorf("attempt 2: want the read resent from E1 to E2, ended well:%s", describe(as))
	}
	t.Logf("record (E1 = %s, E2 = %s):%s", e1.Addr(), e2.Addr(), describe(as))
}

// A Commit that E1 fails with UNAVAILABLE is retried by the Spanner client; retry elsewhere
// steers the retry to E2: the record has the Commit failing on E1, then the Commit on E2,
// steered from E1 for "retry elsewhere", which succeeded.
func TestCallInfo_SteeredAfterFailure(t *testing.T) {
	b := startFrontendBackend(t, 2)
	e1, e2 := b.fes[0], b.fes[1]
	client, _ := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(10*time.Second, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	if err := e1.FailMethods(codes.Unavailable, methodCommit); err != nil {
		t.Fatal(err)
	}
	info := &CallInfo{}
	ctx, cancel := context.WithTimeout(WithCallInfo(context.Background(), info), 10*time.Second)
	defer cancel()
	m := spanner.Insert(fixture.TableInserts, []string{"RowId", "RequestId", "Writer"}, []any{"callinfo-1", "callinfo-1", "TestCallInfo"})
	if _, err := client.Apply(ctx, []*spanner.Mutation{m}); err != nil {
		t.Fatal(err)
	}
	var commits []CallAttempt
	for _, a := range info.Attempts() {
		if a.Method == methodCommit {
			commits = append(commits, a)
		}
	}
	if len(commits) != 2 {
		t.Fatalf("want 2 Commits, got:%s", describe(info.Attempts()))
	}
	if a := commits[0]; a.Endpoint != e1.Addr() || spanner.ErrCode(a.Err) != codes.Unavailable || a.SteeredFrom != "" {
		t.Errorf("Commit 1: want UNAVAILABLE on E1:%s", describe(commits))
	}
	if a := commits[1]; a.Endpoint != e2.Addr() || a.SteeredFrom != e1.Addr() || a.Steered != "retry elsewhere" || a.Err != nil {
		t.Errorf("Commit 2: want steered from E1 to E2 for retry elsewhere, ended well:%s", describe(commits))
	}
	t.Logf("record (E1 = %s, E2 = %s):%s", e1.Addr(), e2.Addr(), describe(info.Attempts()))
}

// A nil *CallInfo leaves the context as it is; a record kept across two operations keeps both.
func TestCallInfo_Context(t *testing.T) {
	ctx := context.Background()
	if WithCallInfo(ctx, nil) != ctx {
		t.Fatal("WithCallInfo(ctx, nil) is not ctx")
	}
	var info CallInfo
	if as := info.Attempts(); len(as) != 0 {
		t.Fatalf("a new CallInfo has %d attempts", len(as))
	}
}
