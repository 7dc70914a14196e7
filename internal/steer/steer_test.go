package steer

import (
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client's protos, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// Which failures of a stream before its first response are resent at once: what the Spanner
// client retries and what says something of the endpoint; not RESOURCE_EXHAUSTED without a
// RetryInfo delay (the client surfaces it), not a lost connection (the group's pick decides
// as the pool reconnects), not a final status.
func TestResendOnError(t *testing.T) {
	exhausted := func(delay time.Duration) error {
		st := status.New(codes.ResourceExhausted, "too many requests")
		if delay > 0 {
			var err error
			if st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err != nil {
				t.Fatal(err)
			}
		}
		return st.Err()
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"UNAVAILABLE from the server", status.Error(codes.Unavailable, "backend unavailable"), true},
		{"RESOURCE_EXHAUSTED with a RetryInfo delay", exhausted(300 * time.Millisecond), true},
		{"RESOURCE_EXHAUSTED without RetryInfo", exhausted(0), false},
		{"a lost connection", status.Error(codes.Unavailable, "error reading from server: EOF"), false},
		{"NOT_FOUND", status.Error(codes.NotFound, "session not found"), false},
		{"the caller's deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resendOnError(tc.err); got != tc.want {
				t.Fatalf("resendOnError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
