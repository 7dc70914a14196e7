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
	// ConnectionLost: the call failed because its connection went away (reset, GOAWAY,
	// transport closing). It counts for nothing in health: one lost connection is one
	// connectivity event however many calls it carried, and the connectivity monitor (and
	// RecoveryTimeout) handles an endpoint whose connections keep failing.
	ConnectionLost
)

// String returns "ignore", "success", "failure", "timeout" or "connection lost".
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
	case ConnectionLost:
		return "connection lost"
	}
	return "Outcome(?)"
}

// Classify returns the Outcome of a call that ended with err. answered reports that a
// response header (or message) had arrived before the call ended; it matters only for
// DEADLINE_EXCEEDED. overloadIsFailure makes RESOURCE_EXHAUSTED a Failure; otherwise it is a
// Success (the backend answered).
//
// The classes of outcomes (docs/health.md tells what each does to an endpoint):
//
//   - nil: Success.
//   - UNAVAILABLE that gRPC's transport made because the call's connection went away
//     (isConnectionLost): ConnectionLost.
//   - any other UNAVAILABLE: Failure: the backend's (or a frontend's) own answer on a live
//     connection, a stream refused, HTTP 502/503/504 and 429 from a proxy (grpc-go
//     internal/transport, HTTPStatusConvTab).
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
		if isConnectionLost(transportMessage(err, s)) {
			return ConnectionLost
		}
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

// connectionLostPrefixes start the messages of the UNAVAILABLE statuses grpc-go's client
// transport gives the calls of a connection that went away (google.golang.org/grpc v1.85.0).
// When a connection ends, http2Client.Close(err) (internal/transport/http2_client.go:1042)
// ends each of its streams with err, a transport.ConnectionError, which the call returns as
// toRPCErr makes it: UNAVAILABLE with the error's Desc (rpc_util.go:1145); the stream's
// status carries the ConnectionError's Error() instead (http2_client.go:1101, transport.go:802):
//
//   - "error reading from server": the reader's Desc for a reset, EOF or any read error,
//     the writer's errors included (http2_client.go:1784; "error reading from server:
//     connection reset by peer" as TestClassify_RealTransportErrors sees it).
//   - "connection error: desc = ": the same as a ConnectionError's Error() (transport.go:802).
//   - "closing transport due to: ": after a GOAWAY with debug data, Close replaces err with
//     this status (http2_client.go:1098), e.g. MaxConnectionAge's GOAWAY then the close after
//     its grace time.
//   - "transport is closing": transport.ErrConnClosing (transport.go:828), a stream started
//     on a transport already closing (http2_client.go:852, 950).
//   - "closing connection since the server is not reading" (http2_client.go:1754),
//     "keepalive ping failed" (1843): the other ConnectionErrors of a live connection.
//   - "the connection is draining": errStreamDrain (transport.go:832), a stream started on a
//     connection that got a GOAWAY (http2_client.go:948).
//   - "the stream is rejected because server is draining the connection": statusGoAway
//     (transport.go:838), a stream the server's GOAWAY left unprocessed (http2_client.go:1471).
//
// A server's own UNAVAILABLE comes in its trailers with whatever message it chose ("region
// down"), none of these.
var connectionLostPrefixes = [...]string{
	"transport is closing",
	"connection error: desc = ",
	"closing transport due to: ",
	"error reading from server",
	"closing connection since the server is not reading",
	"keepalive ping failed",
	"the connection is draining",
	"the stream is rejected because server is draining the connection",
}

// transportMessage returns the message of the status err carries, s: for an err that wraps
// a status error, the wrapped status's own message (status.FromError gives the whole
// err.Error() then).
func transportMessage(err error, s *status.Status) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		if inner := se.GRPCStatus(); inner != nil {
			return inner.Message()
		}
	}
	return s.Message()
}

// isConnectionLost reports whether msg, the message of an UNAVAILABLE status, is one that
// gRPC's client transport gives the calls of a connection that went away
// (connectionLostPrefixes).
func isConnectionLost(msg string) bool {
	for _, p := range connectionLostPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
