package spannerme

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"cloud.google.com/go/spanner"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// The Spanner client is given the GCPMultiEndpoint as a gtransport.ConnPool (frontPool)
// whose one connection (the front) never connects: its interceptors send every call into the
// GCPMultiEndpoint. Two facts make this robust (google-cloud-go#14611 is what happens
// otherwise):
//
//   - gRPC runs a ClientConn's interceptors before it looks at the connection's state
//     (grpc-go v1.85, call.go Invoke and stream.go NewStream), so the front keeps working
//     after anything closes it; closing it releases nothing of ours;
//   - the GCPMultiEndpoint closes only when its owner's pool is closed, which the Spanner
//     client does in Client.Close (sessionClient.close), or when gme.Close is called; the
//     pools of NewClient and Configurator never close it. The client's other
//     closers of pools it believes it owns, the dynamic channel pool and the location-aware
//     endpoint clients, are turned off or refused (transport.go).

// errFrontDial is what the front connection's dialer returns: it never connects.
var errFrontDial = errors.New("spannerme: the front connection never dials; calls go through the GCPMultiEndpoint")

// frontPool is the gtransport.ConnPool given to Spanner clients: one connection, the front.
// What its Close does depends on its kind. Safe for concurrent use.
type frontPool struct {
	conn *grpc.ClientConn
	gme  *GCPMultiEndpoint
	kind frontKind
}

// frontKind says whose a front pool is, and so what its Close does.
type frontKind int

const (
	// ownerFront: the client of NewMultiEndpointClient*, which built the GCPMultiEndpoint;
	// its Close closes the GCPMultiEndpoint.
	ownerFront frontKind = iota
	// clientFront: a client of NewClient; its Close releases the front alone.
	clientFront
	// configuratorFront: the front of one Configurator function, shared by every client it
	// configures (go-sql-spanner reuses the options it configured for each Spanner client
	// and admin client of a connector); its Close does nothing, and gme.Close closes it.
	configuratorFront
)

var _ gtransport.ConnPool = (*frontPool)(nil)

// Conn returns the front connection. The Spanner client builds its per-channel RPC clients on
// it (sessionClient.nextClient).
func (p *frontPool) Conn() *grpc.ClientConn { return p.conn }

// Num is 1: the client sees one connection; the channels are in each endpoint's pool.
func (p *frontPool) Num() int { return 1 }

// Invoke sends a unary call through the front (and so into the GCPMultiEndpoint).
func (p *frontPool) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return p.conn.Invoke(ctx, method, args, reply, opts...)
}

// NewStream starts a stream through the front (and so in the GCPMultiEndpoint).
func (p *frontPool) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return p.conn.NewStream(ctx, desc, method, opts...)
}

// Close is what spanner.Client.Close calls. The owner's closes the GCPMultiEndpoint, its
// pools and every front; a NewClient client's closes its front only and leaves the
// GCPMultiEndpoint serving its other clients; a Configurator's does nothing, since the
// driver gives the same pool to its next client. Idempotent.
func (p *frontPool) Close() error {
	switch p.kind {
	case ownerFront:
		return p.gme.Close()
	case configuratorFront:
		return nil
	}
	p.gme.dropFront(p)
	return p.conn.Close() // a second Close returns ErrClientConnClosing, ignored by the Spanner client
}

// newFrontPool returns a pool to hand to one Spanner client, whose front connection sends
// every call into gme and carries the Spanner client's request-ID header (see requestID).
// The pool counts in Status (Clients or Configurators) until it is released; gme.Close closes
// its front as well. Errors: ErrClosed after gme.Close (and on a zero value).
func newFrontPool(gme *GCPMultiEndpoint, kind frontKind) (*frontPool, error) {
	front, err := newFrontConn(
		func(ctx context.Context, method string, req, reply any, opts []grpc.CallOption) error {
			id, ok := requestID(opts)
			if !ok {
				return gme.Invoke(ctx, method, req, reply, opts...)
			}
			err := gme.Invoke(withRequestIDHeader(ctx, id), method, req, reply, opts...)
			return withRequestID(err, id)
		},
		func(ctx context.Context, desc *grpc.StreamDesc, method string, opts []grpc.CallOption) (grpc.ClientStream, error) {
			id, ok := requestID(opts)
			if ok {
				ctx = withRequestIDHeader(ctx, id)
			}
			return gme.newStream(ctx, desc, method, id, opts)
		})
	if err != nil {
		return nil, err
	}
	p := &frontPool{conn: front, gme: gme, kind: kind}
	if !gme.addFront(p) {
		front.Close()
		return nil, ErrClosed
	}
	return p, nil
}

// newFrontConn returns a connection that never connects and sends every unary call to
// invoke and every stream to stream.
func newFrontConn(invoke func(ctx context.Context, method string, req, reply any, opts []grpc.CallOption) error,
	stream func(ctx context.Context, desc *grpc.StreamDesc, method string, opts []grpc.CallOption) (grpc.ClientStream, error)) (*grpc.ClientConn, error) {
	front, err := grpc.NewClient("passthrough:///spannerme-multiendpoint",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return nil, errFrontDial }),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoke(ctx, method, req, reply, opts)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, _ *grpc.ClientConn, method string, _ grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return stream(ctx, desc, method, opts)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("spannerme: front connection: %w", err)
	}
	return front, nil
}

// refusedPool is the gtransport.ConnPool Configurator hands to the Spanner clients it cannot
// configure (a refused setting, a closed GCPMultiEndpoint): every call fails at once with
// err, a gRPC status. Its connection is closed from the start (interceptors run before gRPC
// looks at the state, see above), so nothing is left to release. Safe for concurrent use.
type refusedPool struct{ conn *grpc.ClientConn }

var _ gtransport.ConnPool = refusedPool{}

// newRefusedPool returns a refusedPool failing every call with err (a gRPC status error).
func newRefusedPool(err error) (refusedPool, error) {
	conn, cerr := newFrontConn(
		func(context.Context, string, any, any, []grpc.CallOption) error { return err },
		func(context.Context, *grpc.StreamDesc, string, []grpc.CallOption) (grpc.ClientStream, error) {
			return nil, err
		})
	if cerr != nil {
		return refusedPool{}, cerr
	}
	conn.Close()
	return refusedPool{conn: conn}, nil
}

func (p refusedPool) Conn() *grpc.ClientConn { return p.conn }
func (p refusedPool) Num() int               { return 1 }
func (p refusedPool) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return p.conn.Invoke(ctx, method, args, reply, opts...)
}
func (p refusedPool) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return p.conn.NewStream(ctx, desc, method, opts...)
}

// Close does nothing: the connection is closed already, and the driver may give the pool to
// its next client.
func (p refusedPool) Close() error { return nil }

// requestIDHeader is the Spanner client's request-ID header (cloud.google.com/go/spanner
// v1.96.1, request_id_header.go).
const requestIDHeader = "x-goog-spanner-request-id"

// requestID finds the request ID the Spanner client passes to its own interceptor: a
// grpc.Header call option whose metadata holds requestIDHeader. It must be read before the
// call: gRPC writes the response headers into that metadata. This mirrors the Spanner
// client's requestIDHeaderInjector, which is a dial option and so never reaches a connection
// it is given.
func requestID(opts []grpc.CallOption) (string, bool) {
	for _, o := range opts {
		h, ok := o.(grpc.HeaderCallOption)
		if !ok || h.HeaderAddr == nil {
			continue
		}
		if ids := h.HeaderAddr.Get(requestIDHeader); len(ids) != 0 && ids[0] != "" {
			return ids[0], true
		}
	}
	return "", false
}

// withRequestIDHeader returns ctx with the request-ID header added to its outgoing metadata,
// and the ID set on the current span as the Spanner client does.
func withRequestIDHeader(ctx context.Context, id string) context.Context {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("x_goog_spanner_request_id", id))
	}
	return metadata.AppendToOutgoingContext(ctx, requestIDHeader, id)
}

// withRequestID returns err as a *spanner.Error carrying the request ID id, as the Spanner
// client's interceptor does, except that with an empty id, and for nil, io.EOF and
// context.Canceled, err is returned unchanged, and that a DEADLINE_EXCEEDED error is not
// marked "transaction outcome unknown" here (the client marks a Commit's own errors so
// itself).
func withRequestID(err error, id string) error {
	if id == "" || err == nil || err == io.EOF || err == context.Canceled {
		return err
	}
	//lint:ignore SA1019 the request ID lives in spanner.Error, which the Spanner client's own interceptor returns too
	var se *spanner.Error
	if errors.As(spanner.ToSpannerError(err), &se) && se.RequestID == "" {
		se.RequestID = id
		return se
	}
	return err
}
