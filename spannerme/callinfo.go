package spannerme

import (
	"context"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/callinfo"
)

// CallInfo records what a GCPMultiEndpoint did with the calls made with one context
// (WithCallInfo): each attempt's group and endpoint, whether it was steered, resent or hedged,
// and which stream of a hedged read won (like Cosmos DB's per-request diagnostics). One Spanner
// operation (a read, a query, a transaction) is several RPCs, each retry another attempt; RPCs
// that the Spanner client makes on contexts of its own (its session pool) are not recorded. The
// zero value is ready to use; safe for concurrent use. Calls whose context has none record
// nothing and allocate nothing more.
type CallInfo struct{ r callinfo.Record }

// WithCallInfo returns a copy of ctx whose calls through a GCPMultiEndpoint are recorded in
// info; ctx itself when info is nil.
func WithCallInfo(ctx context.Context, info *CallInfo) context.Context {
	if info == nil {
		return ctx
	}
	return callinfo.With(ctx, &info.r)
}

// Attempts returns a copy of the attempts recorded so far, in the order they were sent. A
// stream that is still running (a hedge that lost ends after the call returns) has a zero End.
func (c *CallInfo) Attempts() []CallAttempt {
	as := c.r.Attempts()
	out := make([]CallAttempt, len(as))
	for i, a := range as {
		out[i] = CallAttempt(a)
	}
	return out
}

// CallAttempt is one RPC that a GCPMultiEndpoint sent to an endpoint (CallInfo.Attempts).
type CallAttempt struct {
	// Group is the group that routed it; Method the gRPC method; Endpoint where it was sent.
	Group, Method, Endpoint string
	// SteeredFrom is the endpoint the group picked when the attempt went to another one ("" when
	// it went where picked); Steered says why: "retry elsewhere" (a retry of a request that
	// failed there) or "overload cooldown" (it was cooling down after RESOURCE_EXHAUSTED).
	SteeredFrom, Steered string
	// ResentFrom is, for a stream sent again at once after it failed there before any response
	// message, the endpoint where it failed ("" otherwise). See docs/health.md, "Retry
	// elsewhere".
	ResentFrom string
	// Hedge: the second stream of a hedged read, sent to Endpoint; Hedged: a stream for which
	// a hedge was sent; Won: of a hedged read's two streams, the one whose answer the caller read.
	Hedge, Hedged, Won bool
	// Start and End are when it was sent and when it ended (zero while it runs).
	Start, End time.Time
	// Err is how it ended: nil for a success (a stream that ended well), else its error.
	Err error
}
