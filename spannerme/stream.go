package spannerme

import (
	"context"

	"google.golang.org/grpc"

	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// NewStream starts a streaming call on the current endpoint of the call's group, picked as
// for Invoke, with the same errors (an error that gRPC gives only at the stream's first
// SendMsg or RecvMsg, where grpcgcp creates the stream there, is gRPC's own). The call
// counts as in flight on that endpoint until the stream ends (RecvMsg returns an error or io.EOF, SendMsg returns an error other than io.EOF,
// a call without server streaming has its response, or ctx is done), so removing the
// endpoint does not cut it. As with any gRPC stream, a caller that stops reading early must
// cancel ctx. gRPC reports that cancellation through a grpc.OnFinish call option: a stream
// interceptor among the caller's dial options that does not pass the call options on to gRPC
// hides it, and a stream abandoned that way then counts as in flight until its endpoint's
// pool is closed (Settings.DrainTimeout after the endpoint is removed). The request of a
// read-only streaming query or read routed through a group with a policy
// (Settings.DirectedReads) is sent with the group's DirectedReadOptions when it has none of
// its own, as for Invoke.
func (gme *GCPMultiEndpoint) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return gme.newStream(ctx, desc, method, "", opts)
}

// newStream is NewStream for a call that carries the Spanner client's request ID id ("" for
// none; the header is already in ctx), which is added to the stream's errors.
func (gme *GCPMultiEndpoint) newStream(ctx context.Context, desc *grpc.StreamDesc, method, id string, opts []grpc.CallOption) (grpc.ClientStream, error) {
	class := spannerreq.Class(method, nil)
	p, me, err := gme.pickConnected(ctx, class, opts)
	if err != nil {
		return nil, spannerreq.WithError(err, id)
	}
	start := gme.obs.callBegin(ctx, p.Endpoint(), poolName(p), me.Name())
	tc := gme.tiers.begin(me, p)
	cs, err := p.NewStream(ctx, desc, method, opts, pool.CallInfo{Group: me.Name(), Tag: id, Start: start, Class: class, First: tc.first()})
	if err != nil {
		return nil, spannerreq.WithError(notConnectedError(err, me, p), id)
	}
	return gme.roTxns.WithDirectedStream(cs, method, gme.snap.Load().directedReads()[me.Name()]), nil
}
