package spannerme

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// wantRefusedExplained checks that Explain(err) names group g, endpoint addr and "connection
// refused", and keeps err's code.
func wantRefusedExplained(t *testing.T, what string, err error, st Status, g, addr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	why := Explain(err, st)
	if why == nil {
		t.Fatalf("%s: Explain(%v) = nil; status %+v", what, err, st.Groups)
	}
	t.Logf("%s: %v", what, why)
	msg := why.Error()
	for _, want := range []string{`group "` + g + `"`, "endpoint " + addr, "refused: ", "connection refused", err.Error()} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: Explain's text lacks %q: %s", what, want, msg)
		}
	}
	if spanner.ErrCode(why) != spanner.ErrCode(err) || !errors.Is(why, err) {
		t.Errorf("%s: Explain changed the code (%v, want %v) or does not wrap the error", what, spanner.ErrCode(why), spanner.ErrCode(err))
	}
	if len(why.Groups) != 1 || why.Groups[0].Group != g || len(why.Groups[0].Endpoints) != 1 ||
		why.Groups[0].Endpoints[0].LastError == nil || why.Groups[0].Endpoints[0].LastError.Kind != ConnRefused {
		t.Errorf("%s: Explain's groups %+v, want %q with %s refused", what, why.Groups, g, addr)
	}
}

// A client whose only group's endpoint refuses connections: its first read waits for the
// Spanner client's multiplexed session and ends at its deadline with the client's own
// generic error, which Explain turns into one naming the group, the endpoint and
// "connection refused".
func TestExplainFirstReadOnRefusedEndpoint(t *testing.T) {
	b := startSpannerBackend(t, 1)
	addr := closedAddr(t)
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(200*time.Millisecond, 0, addr)})
	client, gme, err := NewMultiEndpointClientWithSettings(context.Background(), b.database, fixture.ClientConfig(), o, fastSettings(nil), clientOptions()...)
	if err != nil {
		t.Fatalf("NewMultiEndpointClientWithSettings: %v", err)
	}
	t.Cleanup(func() { client.Close() })

	const deadline = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err = countAccounts(ctx, client)
	took := time.Since(start)
	if took > deadline+time.Second {
		t.Errorf("first read returned after %v, want within its deadline %v", took, deadline)
	}
	wantRefusedExplained(t, "first read", err, gme.Status(), "g", addr)
}

// A client whose endpoint starts refusing after its session exists: the read's calls reach
// spannerme and fail fast (UNAVAILABLE, retried by the Spanner client) until its deadline;
// the client returns the context's error, which Explain explains.
func TestExplainReadAfterEndpointWentDown(t *testing.T) {
	b := startSpannerBackend(t, 1)
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(200*time.Millisecond, 0, b.eps[0].Addr())})
	client, gme := newSpannerClient(t, b, o, fastSettings(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := countAccounts(ctx, client); err != nil {
		t.Fatalf("first query: %v", err)
	}
	b.eps[0].Down()
	eventually(t, 10*time.Second, "the endpoint's refusal recorded", func() bool {
		st := gme.Status()
		return len(st.Pools) == 1 && st.Pools[0].LastError != nil && st.Pools[0].LastError.Kind == ConnRefused
	})
	readCtx, cancelRead := context.WithTimeout(ctx, time.Second)
	defer cancelRead()
	_, err := countAccounts(readCtx, client)
	wantRefusedExplained(t, "read", err, gme.Status(), "g", b.eps[0].Addr())
}

// Explain explains only errors that unreachable endpoints explain, and only while a group's
// current endpoint is not available.
func TestExplainReturnsNilWhenNothingExplains(t *testing.T) {
	at := time.Now()
	down := Status{At: at, Default: "g", Groups: []GroupStatus{{Name: "g", Current: "a:1",
		Endpoints: []EndpointStatus{{Endpoint: "a:1", State: Recovering}}}},
		Pools: []PoolStatus{{Endpoint: "a:1", Connectivity: "TRANSIENT_FAILURE",
			LastError: &ConnError{Kind: ConnDNS, Message: "no such host", At: at.Add(-1500 * time.Millisecond)}}}}
	up := Status{Default: "g", Groups: []GroupStatus{{Name: "g", Current: "a:1",
		Endpoints: []EndpointStatus{{Endpoint: "a:1", State: Available}}}}}
	closed := down
	closed.Closed = true
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	for _, tc := range []struct {
		name string
		err  error
		st   Status
		want bool
	}{
		{"nil error", nil, down, false},
		{"NOT_FOUND", status.Error(codes.NotFound, "no row"), down, false},
		{"everything available", deadline, up, false},
		{"closed", deadline, closed, false},
		{"zero Status", deadline, Status{}, false},
		{"DEADLINE_EXCEEDED", deadline, down, true},
		{"context error", context.DeadlineExceeded, down, true},
		{"UNAVAILABLE", status.Error(codes.Unavailable, "x"), down, true},
		{"spanner error", spanner.ToSpannerError(status.Error(codes.Canceled, "x")), down, true},
	} {
		got := Explain(tc.err, tc.st)
		if (got != nil) != tc.want {
			t.Errorf("%s: Explain = %v, want an explanation: %v", tc.name, got, tc.want)
		}
		if got != nil && !strings.Contains(got.Error(), `endpoint a:1 (priority 0): Recovering, pool TRANSIENT_FAILURE, last connection error 1.5s ago: dns: no such host`) {
			t.Errorf("%s: Explain = %q", tc.name, got)
		}
	}
}
