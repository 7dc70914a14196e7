package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

func TestAttemptsText(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	name := func(addr string) string {
		return map[string]string{"127.0.0.1:1": "e1", "127.0.0.1:2": "e2"}[addr]
	}
	const read = "/google.spanner.v1.Spanner/ExecuteStreamingSql"
	many := make([]spannerme.CallAttempt, 8)
	for i := range many {
		many[i] = spannerme.CallAttempt{Endpoint: "127.0.0.1:1", Method: read, Start: at(100 * i), End: at(100*i + 10), Err: status.Error(codes.Unavailable, "x")}
	}
	for _, tc := range []struct {
		name string
		as   []spannerme.CallAttempt
		want string
	}{
		{"none", nil, "no attempt"},
		{"one that timed out", []spannerme.CallAttempt{
			{Endpoint: "127.0.0.1:2", Method: read, Start: at(0), End: at(3001), Err: status.FromContextError(context.DeadlineExceeded).Err()},
		}, "e2 ExecuteStreamingSql +0.00s-3.00s DeadlineExceeded"},
		{"steered, then a hedged read whose hedge won and whose primary still runs", []spannerme.CallAttempt{
			{Endpoint: "127.0.0.1:2", Method: read, Start: at(0), End: at(20), Err: status.Error(codes.Unavailable, "reset")},
			{Endpoint: "127.0.0.1:1", Method: read, Start: at(250), Hedged: true, SteeredFrom: "127.0.0.1:2", Steered: "retry elsewhere"},
			{Endpoint: "127.0.0.1:2", Method: read, Start: at(300), End: at(320), Hedge: true, Won: true},
		}, "e2 ExecuteStreamingSql +0.00s-0.02s Unavailable, e1 ExecuteStreamingSql +0.25s running steered from e2 (retry elsewhere) hedged, e2 ExecuteStreamingSql +0.30s-0.32s OK hedge won"},
		{"resent; an error that is no status is Unknown", []spannerme.CallAttempt{
			{Endpoint: "127.0.0.1:1", Method: "/google.spanner.v1.Spanner/Commit", Start: at(0), End: at(7), Err: errors.New("eof"), ResentFrom: "127.0.0.1:2"},
		}, "e1 Commit +0.00s-0.01s Unknown resent from e2"},
		{"a context's error has its code", []spannerme.CallAttempt{
			{Endpoint: "127.0.0.1:1", Method: "/google.spanner.v1.Spanner/Commit", Start: at(0), End: at(3000), Err: context.DeadlineExceeded},
		}, "e1 Commit +0.00s-3.00s DeadlineExceeded"},
		{"only the last ones", many, "(2 earlier) e1 ExecuteStreamingSql +0.20s-0.21s Unavailable, e1 ExecuteStreamingSql +0.30s-0.31s Unavailable, e1 ExecuteStreamingSql +0.40s-0.41s Unavailable, e1 ExecuteStreamingSql +0.50s-0.51s Unavailable, e1 ExecuteStreamingSql +0.60s-0.61s Unavailable, e1 ExecuteStreamingSql +0.70s-0.71s Unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := attemptsText(tc.as, t0, name); got != tc.want {
				t.Errorf("attemptsText:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
