package spannerreq

import (
	"context"
	"errors"
	"io"

	"cloud.google.com/go/spanner"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Header is the Spanner client's request-ID header (cloud.google.com/go/spanner
// v1.96.1, request_id_header.go).
const Header = "x-goog-spanner-request-id"

// FromCallOptions finds the request ID the Spanner client passes to its own interceptor: a
// grpc.Header call option whose metadata holds Header. It must be read before the
// call: gRPC writes the response headers into that metadata. This is what the Spanner
// client's requestIDHeaderInjector interceptor reads; on a spannerme front connection that
// interceptor runs after spannerme's, which ends the chain, so never.
func FromCallOptions(opts []grpc.CallOption) (string, bool) {
	for _, o := range opts {
		h, ok := o.(grpc.HeaderCallOption)
		if !ok || h.HeaderAddr == nil {
			continue
		}
		if ids := h.HeaderAddr.Get(Header); len(ids) != 0 && ids[0] != "" {
			return ids[0], true
		}
	}
	return "", false
}

// WithHeader returns ctx with the request-ID header added to its outgoing metadata,
// and the ID set on the current span as the Spanner client does.
func WithHeader(ctx context.Context, id string) context.Context {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("x_goog_spanner_request_id", id))
	}
	return metadata.AppendToOutgoingContext(ctx, Header, id)
}

// outcomeUnknownText is what the Spanner client appends to the description of an error
// that may have ended a Commit, and the text of *spanner.TransactionOutcomeUnknownError.
var outcomeUnknownText = new(spanner.TransactionOutcomeUnknownError).Error()

// WithError returns err as the Spanner client's request-ID interceptor returns it
// (cloud.google.com/go/spanner v1.96.1, request_id_header.go augmentErrorWithRequestID):
// nil, io.EOF and context.Canceled unchanged (and every error when id is empty); any other
// error as a *spanner.Error carrying id; and a DEADLINE_EXCEEDED one, the caller's own
// deadline included, on every method, marked as a potential commit, as the interceptor marks
// it: its description ends with "transaction outcome unknown" and errors.As finds a
// *spanner.TransactionOutcomeUnknownError in it. The client's commit paths return such an
// error as they get it (errors.go toSpannerErrorWithCommitInfo), so a Commit that timed out
// says its outcome is unknown, as through a plain client.
func WithError(err error, id string) error {
	if id == "" || err == nil || err == io.EOF || err == context.Canceled {
		return err
	}
	//lint:ignore SA1019 the request ID lives in spanner.Error, which the Spanner client's own interceptor returns too
	var se *spanner.Error
	if errors.As(err, &se) {
		se.RequestID = id
		return se
	}
	if err == context.DeadlineExceeded {
		err = status.FromContextError(err).Err()
	}
	// The interceptor marks every error it sees as DEADLINE_EXCEEDED; the conversion then
	// marks those whose status says so (an error of code Unknown is not marked).
	if status.Code(err) != codes.DeadlineExceeded {
		if errors.As(spanner.ToSpannerError(err), &se) {
			se.RequestID = id
			return se
		}
		return err
	}
	if errors.As(spanner.ToSpannerError(outcomeUnknown{cause: err}), &se) {
		se.Desc += ", " + outcomeUnknownText
		se.RequestID = id
		return se
	}
	return err
}

// outcomeUnknown is a DEADLINE_EXCEEDED error marked as a potential commit, shaped so that
// spanner.ToSpannerError wraps it as the Spanner client wraps its own
// TransactionOutcomeUnknownError: the same status and text, and errors.As finds a
// *spanner.TransactionOutcomeUnknownError and the cause. One difference, listed in
// docs/transport.md: that TransactionOutcomeUnknownError's own Unwrap returns nil (its
// field is unexported), where the client's returns the cause.
type outcomeUnknown struct{ cause error }

func (e outcomeUnknown) Error() string              { return outcomeUnknownText }
func (e outcomeUnknown) GRPCStatus() *status.Status { return status.Convert(e.cause) }
func (e outcomeUnknown) Unwrap() []error {
	return []error{new(spanner.TransactionOutcomeUnknownError), e.cause}
}
