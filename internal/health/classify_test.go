package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestClassify(t *testing.T) {
	st := func(c codes.Code, msg string) error { return status.Error(c, msg) }
	for _, tc := range []struct {
		err      error
		answered bool
		overload bool
		want     Outcome
	}{
		{nil, false, false, Success},
		{st(codes.Unavailable, "connection refused"), false, false, Failure},
		{st(codes.Unavailable, "from the backend"), true, false, Failure},
		{fmt.Errorf("wrapped: %w", st(codes.Unavailable, "x")), false, false, Failure},
		{st(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"), false, false, Failure},
		{st(codes.Internal, "backend bug"), false, false, Success},
		{st(codes.DeadlineExceeded, "context deadline exceeded"), false, false, Timeout},
		{st(codes.DeadlineExceeded, "context deadline exceeded"), true, false, Success},
		{context.DeadlineExceeded, false, false, Timeout},
		{st(codes.Canceled, "context canceled"), false, false, Ignore},
		{context.Canceled, false, false, Ignore},
		{io.EOF, false, false, Ignore},
		{errors.New("not a gRPC error"), false, false, Ignore},
		{st(codes.ResourceExhausted, "overloaded"), false, false, Success},
		{st(codes.ResourceExhausted, "overloaded"), false, true, Failure},
		{st(codes.NotFound, "session not found"), false, false, Success},
		{st(codes.InvalidArgument, "bad SQL"), false, false, Success},
		{st(codes.Aborted, "transaction aborted"), false, false, Success},
		{st(codes.AlreadyExists, "row exists"), false, false, Success},
		{st(codes.FailedPrecondition, "x"), false, false, Success},
		{st(codes.PermissionDenied, "x"), false, false, Success},
		{st(codes.Unauthenticated, "x"), false, false, Success},
		{st(codes.Unimplemented, "x"), false, false, Success},
		{st(codes.Unknown, "x"), false, false, Success},
		{st(codes.OK, ""), false, false, Success},
	} {
		if got := Classify(tc.err, tc.answered, tc.overload); got != tc.want {
			t.Errorf("Classify(%v, answered=%v, overload=%v) = %v, want %v", tc.err, tc.answered, tc.overload, got, tc.want)
		}
	}
}

// A call whose connection went away is connectivity's business: the messages grpc-go's client
// transport gives such calls are ConnectionLost, while a server's own UNAVAILABLE, with any
// other message, stays a Failure.
func TestClassify_LostConnectionIsNotAFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"transport closing", status.Error(codes.Unavailable, "transport is closing"), ConnectionLost},
		{"reset by peer", status.Error(codes.Unavailable, `connection error: desc = "error reading from server: read tcp 127.0.0.1:5000->127.0.0.1:6000: read: connection reset by peer"`), ConnectionLost},
		{"EOF", status.Error(codes.Unavailable, `connection error: desc = "error reading from server: EOF"`), ConnectionLost},
		{"reader desc alone", status.Error(codes.Unavailable, "error reading from server: EOF"), ConnectionLost},
		{"keepalive", status.Error(codes.Unavailable, `connection error: desc = "keepalive ping failed to receive ACK within timeout"`), ConnectionLost},
		{"server not reading", status.Error(codes.Unavailable, "closing connection since the server is not reading: x"), ConnectionLost},
		{"draining", status.Error(codes.Unavailable, "the connection is draining"), ConnectionLost},
		{"GOAWAY unprocessed", status.Error(codes.Unavailable, "the stream is rejected because server is draining the connection"), ConnectionLost},
		{"GOAWAY debug data", status.Error(codes.Unavailable, "closing transport due to: connection error: desc = \"error reading from server: EOF\", received prior goaway: code: NO_ERROR"), ConnectionLost},
		{"wrapped", fmt.Errorf("spanner: %w", status.Error(codes.Unavailable, "transport is closing")), ConnectionLost},
		{"server's UNAVAILABLE", status.Error(codes.Unavailable, "region down"), Failure},
		{"server's UNAVAILABLE naming a reset", status.Error(codes.Unavailable, "backend: upstream connect error or disconnect/reset before headers"), Failure},
		{"refused stream", status.Error(codes.Unavailable, "stream terminated by RST_STREAM with error code: REFUSED_STREAM"), Failure},
		{"proxy 503", status.Error(codes.Unavailable, "unexpected HTTP status code received from server: 503 (Service Unavailable)"), Failure},
		{"other code, transport message", status.Error(codes.Internal, "transport is closing"), Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err, false, false); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Success.String(), "success"}, {Failure.String(), "failure"}, {Timeout.String(), "timeout"}, {Ignore.String(), "ignore"},
		{ConnectionLost.String(), "connection lost"},
		{ConsecutiveFailures.String(), "consecutive failures"}, {FailurePercentage.String(), "failure percentage"},
		{Timeouts.String(), "timeouts"}, {ProbeFailed.String(), "probe failed"}, {Reason(9).String(), "Reason(9)"},
		{Ejected.String(), "ejected"}, {Readmitted.String(), "readmitted"}, {EventKind(0).String(), "EventKind(0)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
