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

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Success.String(), "success"}, {Failure.String(), "failure"}, {Timeout.String(), "timeout"}, {Ignore.String(), "ignore"},
		{ConsecutiveFailures.String(), "consecutive failures"}, {FailurePercentage.String(), "failure percentage"},
		{Timeouts.String(), "timeouts"}, {ProbeFailed.String(), "probe failed"}, {Reason(9).String(), "Reason(9)"},
		{Ejected.String(), "ejected"}, {Readmitted.String(), "readmitted"}, {EventKind(0).String(), "EventKind(0)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
