package statuspage

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// readyStatus is a Status with group "default" on endpoint a:1 in state s, its pool's last
// connection error "refused", and group "west" with b:2 Available.
func readyStatus(s spannerme.EndpointState) spannerme.Status {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return spannerme.Status{At: at, Default: "default",
		Groups: []spannerme.GroupStatus{
			{Name: "default", Current: "a:1", Endpoints: []spannerme.EndpointStatus{{Endpoint: "a:1", State: s}}},
			{Name: "west", Current: "b:2", Endpoints: []spannerme.EndpointStatus{{Endpoint: "b:2", State: spannerme.Available}}},
		},
		Pools: []spannerme.PoolStatus{
			{Endpoint: "a:1", Connectivity: "TRANSIENT_FAILURE", LastError: &spannerme.ConnError{Kind: spannerme.ConnRefused, Message: "connect: connection refused", At: at.Add(-time.Second)}},
			{Endpoint: "b:2", Connectivity: "READY"},
		}}
}

// The readiness handler's answers: 200 "ready" while every group (or each group named) has
// an available endpoint; 503 naming the group, the endpoint and the cause when one has
// none, or naming a group that is not configured; 503 "closed" after Close; HEAD without a
// body; 405 for other methods.
func TestReadySemantics(t *testing.T) {
	closed := readyStatus(spannerme.Available)
	closed.Closed = true
	for _, tc := range []struct {
		name   string
		h      http.Handler
		method string
		code   int
		body   []string // substrings of the body
	}{
		{"ready", Ready(cannedSource(readyStatus(spannerme.Available))), http.MethodGet, 200, []string{"ready\n"}},
		{"recovering is not available", Ready(cannedSource(readyStatus(spannerme.Recovering))), http.MethodGet, 503,
			[]string{`not ready: group "default" has no available endpoint: endpoint a:1 (priority 0): Recovering, pool TRANSIENT_FAILURE, last connection error 1s ago: refused: connect: connection refused`}},
		{"not ready", Ready(cannedSource(readyStatus(spannerme.Unavailable))), http.MethodGet, 503, []string{`group "default"`, "refused"}},
		{"only west asked", Ready(cannedSource(readyStatus(spannerme.Unavailable)), "west"), http.MethodGet, 200, []string{"ready\n"}},
		{"unknown group", Ready(cannedSource(readyStatus(spannerme.Available)), "east"), http.MethodGet, 503, []string{`group "east" is not configured`}},
		{"closed", Ready(cannedSource(closed)), http.MethodGet, 503, []string{"closed\n"}},
		{"nil source", Ready(nil), http.MethodGet, 503, []string{"closed\n"}},
		{"HEAD", Ready(cannedSource(readyStatus(spannerme.Unavailable))), http.MethodHead, 503, nil},
		{"POST", Ready(cannedSource(readyStatus(spannerme.Available))), http.MethodPost, 405, []string{"method not allowed"}},
	} {
		res, body := get(t, tc.h, tc.method, "/ready", "")
		if res.StatusCode != tc.code {
			t.Errorf("%s: status %d, want %d (body %q)", tc.name, res.StatusCode, tc.code, body)
		}
		for _, want := range tc.body {
			if !strings.Contains(body, want) {
				t.Errorf("%s: body %q lacks %q", tc.name, body, want)
			}
		}
		if tc.method == http.MethodHead && body != "" {
			t.Errorf("%s: HEAD has a body %q", tc.name, body)
		}
		if tc.code != 405 && (res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("X-Content-Type-Options") != "nosniff") {
			t.Errorf("%s: Cache-Control %q, X-Content-Type-Options %q; want no-store, nosniff", tc.name,
				res.Header.Get("Cache-Control"), res.Header.Get("X-Content-Type-Options"))
		}
	}
}

// On a real GCPMultiEndpoint: ready once its endpoint connects, not ready naming the cause
// when the endpoint refuses connections, ready again once it is back, closed after Close.
func TestReadyFollowsGCPMultiEndpoint(t *testing.T) {
	e1 := startEndpoint(t, "E1")
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(100*time.Millisecond, 0, e1.Addr()),
	}), fastSettings())
	h := Ready(gme)
	waitCode := func(want int, what string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			res, body := get(t, h, http.MethodGet, "/ready", "")
			if res.StatusCode == want {
				return body
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: still %d %q after 10s, want %d", what, res.StatusCode, body, want)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitCode(200, "connected")
	e1.Down()
	// The cause is the connection's end ("closed"; a young connection's, internal/pool
	// young.go: "... before it carried a call") until a reconnection is refused.
	if body := waitCode(503, "endpoint down"); !strings.Contains(body, "endpoint "+e1.Addr()) ||
		!(strings.Contains(body, "refused") || strings.Contains(body, "closed: a ready connection was closed") ||
			strings.Contains(body, "before it carried a call")) {
		t.Errorf("not ready body %q lacks the endpoint and its cause", body)
	}
	if err := e1.Up(); err != nil {
		t.Fatal(err)
	}
	waitCode(200, "endpoint back")
	gme.Close()
	if body := waitCode(503, "closed"); body != "closed\n" {
		t.Errorf("after Close: body %q, want closed", body)
	}
}
