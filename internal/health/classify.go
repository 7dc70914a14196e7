package health

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Outcome is what one call says about the path to an endpoint's backend.
type Outcome int

const (
	// Ignore: the call says nothing about the endpoint (the caller cancelled it, or the error
	// is not a gRPC status).
	Ignore Outcome = iota
	// Success: the backend answered, whatever it answered (application errors included).
	Success
	// Failure: the path to the backend failed (UNAVAILABLE, a transport reset).
	Failure
	// Timeout: the call's deadline passed before any response header arrived. It makes the
	// endpoint suspect; only a failed probe ejects it.
	Timeout
)

// String returns "ignore", "success", "failure" or "timeout".
func (o Outcome) String() string {
	switch o {
	case Ignore:
		return "ignore"
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Timeout:
		return "timeout"
	}
	return "Outcome(?)"
}

// Classify returns the Outcome of a call that ended with err. answered reports that a
// response header (or message) had arrived before the call ended; it matters only for
// DEADLINE_EXCEEDED. overloadIsFailure makes RESOURCE_EXHAUSTED a Failure; otherwise it is a
// Success (the backend answered).
//
// The classes (DESIGN.md § "Endpoint health from call outcomes"):
//
//   - nil: Success.
//   - UNAVAILABLE: Failure. gRPC returns it for transport failures too (connection closed,
//     stream refused, HTTP 502/503/504 and 429 from a proxy: grpc-go internal/transport,
//     HTTPStatusConvTab).
//   - INTERNAL whose message says the stream was reset ("stream terminated by RST_STREAM"):
//     Failure, a transport reset. This is the message the Spanner client itself treats as
//     retryable (cloud.google.com/go/spanner v1.96.1, retry.go); any other INTERNAL is the
//     backend's answer.
//   - DEADLINE_EXCEEDED: Timeout if nothing had been answered, else Success.
//   - CANCELED: Ignore (the caller gave up, or the connection is being closed by us).
//   - RESOURCE_EXHAUSTED: Failure if overloadIsFailure, else Success.
//   - every other code (NOT_FOUND, INVALID_ARGUMENT, ABORTED, ALREADY_EXISTS,
//     FAILED_PRECONDITION, PERMISSION_DENIED, UNAUTHENTICATED, UNIMPLEMENTED, ...): Success.
//   - context.Canceled: Ignore; context.DeadlineExceeded: as DEADLINE_EXCEEDED; any other
//     error that carries no gRPC status: Ignore.
//
// Classify allocates only for a non-nil err.
func Classify(err error, answered, overloadIsFailure bool) Outcome {
	if err == nil {
		return Success
	}
	s, ok := status.FromError(err)
	if !ok {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return deadline(answered)
		default: // context.Canceled, or not a gRPC error at all: no evidence
			return Ignore
		}
	}
	switch s.Code() {
	case codes.OK:
		return Success
	case codes.Canceled:
		return Ignore
	case codes.DeadlineExceeded:
		return deadline(answered)
	case codes.Unavailable:
		return Failure
	case codes.ResourceExhausted:
		if overloadIsFailure {
			return Failure
		}
		return Success
	case codes.Internal:
		if strings.Contains(s.Message(), "stream terminated by RST_STREAM") {
			return Failure
		}
		return Success
	}
	return Success
}

func deadline(answered bool) Outcome {
	if answered {
		return Success
	}
	return Timeout
}
