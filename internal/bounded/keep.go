package bounded

import (
	"context"
	"errors"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Keep returns what to keep of err once the call that returned it is over: an error that
// refers to nothing of err, so that what is kept is bounded by n whatever a server put in
// err. Its text is err's cut by Text to n bytes; it keeps what decisions read of an error:
//
//   - a gRPC status (status.FromError, status.Code): its code, its message cut by Text to n
//     bytes, and those of its details that fit, first to last, in n bytes in all (encoded;
//     a RetryInfo takes a few dozen, a larger detail is skipped); an error that wraps a
//     status keeps the wrapped one, whose message is the transport's own (internal/health
//     reads it);
//   - errors.Is(err, context.Canceled) and errors.Is(err, context.DeadlineExceeded).
//
// errors.As for other types of err does not see through it (err is not kept). A nil err is
// returned as nil. The kept error holds about 3n bytes at most. Keep allocates; it reads
// err.Error() once.
func Keep(err error, n int) error {
	if err == nil {
		return nil
	}
	n = max(n, 0)
	k := &keptError{text: Text(err.Error(), n)}
	switch {
	case errors.Is(err, context.Canceled):
		k.ctx = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		k.ctx = context.DeadlineExceeded
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) || se.GRPCStatus() == nil {
		return &keptPlain{k}
	}
	s := se.GRPCStatus()
	p := s.Proto() // a copy
	p.Message = Text(p.Message, n)
	size, details := 0, p.Details
	p.Details = nil
	for _, d := range details {
		if ds := proto.Size(d); size+ds <= n {
			size += ds
			p.Details = append(p.Details, d)
		}
	}
	k.status = status.FromProto(p)
	return k
}

// keptError is Keep's error of a gRPC status.
type keptError struct {
	text   string
	status *status.Status
	ctx    error // context.Canceled or context.DeadlineExceeded, or nil
}

func (e *keptError) Error() string              { return e.text }
func (e *keptError) GRPCStatus() *status.Status { return e.status }
func (e *keptError) Unwrap() error              { return e.ctx }

// keptPlain is Keep's error of an error without a gRPC status (no GRPCStatus method, so
// status.FromError reports it as not a status, as it did err).
type keptPlain struct{ k *keptError }

func (e *keptPlain) Error() string { return e.k.text }
func (e *keptPlain) Unwrap() error { return e.k.ctx }
