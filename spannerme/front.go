package spannerme

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// How a Spanner client reaches the GCPMultiEndpoint. The client is not given a connection:
// it is given client options (front.opts) with which it dials its own connection pool, as a
// plain client does, so that its own dial options apply, its built-in metrics interceptors
// among them (docs/transport.md, "What differs from a plain client"). That pool is one
// connection, the front, which never connects: its target's scheme has a resolver of ours
// (frontResolver) that reports no address, and its last interceptor, ours, sends every call
// into the GCPMultiEndpoint instead of down the connection. Three facts make this robust:
//
//   - gRPC runs a ClientConn's interceptors before it looks at the connection's state
//     (grpc-go v1.85, call.go Invoke and stream.go NewStream), so calls are never held by the
//     front's own state;
//   - gtransport dials with grpc.DialContext, which builds the resolver at once, and the
//     front's idleness is off, so its resolver is built once and closed only when its
//     connection is closed: grpc-go's ClientConn.Close runs the resolver's Close before it
//     returns (clientconn.go, resolver_wrapper.go). frontResolver.Close is therefore the
//     moment the client closes its pool, which the Spanner client does in Client.Close
//     (sessionClient.close), and where the owner's front closes the GCPMultiEndpoint;
//   - the client's other closers of connections it believes it owns, the dynamic channel
//     pool and the location-aware endpoint clients (google-cloud-go#14611), are turned off or
//     refused (transport.go).
//
// The Spanner client's request-ID interceptor is added after every client option, so it
// would run after ours, which ends the chain: what it does (the header, the span attribute,
// the request ID and commit marker on errors) is done here (spannerreq.FromCallOptions, spannerreq.WithError).

// frontScheme is the scheme of the front connection's target. Its resolver is given to the
// front's dial only (grpc.WithResolvers), never registered globally.
const frontScheme = "spannerme-front"

// front is what one Spanner client over a GCPMultiEndpoint is given (every client of one
// Configurator function shares one): the client options of its connection, and what the
// closing of that connection means, by kind. Safe for concurrent use.
type front struct {
	gme  *GCPMultiEndpoint
	kind frontKind
	// opts make the Spanner client dial its front connection (see above).
	opts []option.ClientOption
	// released makes release run once.
	released sync.Once
}

// frontKind says whose a front is, and so what the closing of its connection does.
type frontKind int

const (
	// ownerFront: the client of NewMultiEndpointClient*, which built the GCPMultiEndpoint;
	// its Close closes the GCPMultiEndpoint.
	ownerFront frontKind = iota
	// clientFront: a client of NewClient; its Close releases the front alone.
	clientFront
	// configuratorFront: the front of one Configurator function, shared by every client it
	// configures (go-sql-spanner reuses the options it configured for each Spanner client
	// and admin client of a connector); the closing of their connections does nothing, and
	// the front counts until gme.Close.
	configuratorFront
)

// newFront returns the front of one Spanner client (of every client of one Configurator
// function) over gme: calls made on its connection carry the Spanner client's request-ID
// header (see spannerreq.FromCallOptions) and go into gme. The front counts in Status (Clients or
// Configurators) until it is released. Errors: ErrClosed after gme.Close (and on a zero
// value).
func newFront(gme *GCPMultiEndpoint, kind frontKind) (*front, error) {
	f := &front{gme: gme, kind: kind}
	f.opts = []option.ClientOption{
		option.WithEndpoint(frontScheme + ":///spannerme-multiendpoint"),
		option.WithGRPCConnectionPool(1),
		option.WithoutAuthentication(), // the endpoints' pools carry the credentials
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithResolvers(frontResolver{f})),
		option.WithGRPCDialOption(grpc.WithIdleTimeout(0)), // idleness would close the resolver
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				id, ok := spannerreq.FromCallOptions(opts)
				if !ok {
					return gme.Invoke(ctx, method, req, reply, opts...)
				}
				err := gme.invoke(spannerreq.WithHeader(ctx, id), method, req, reply, id, opts)
				return spannerreq.WithError(err, id)
			})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, _ *grpc.ClientConn, method string, _ grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				id, ok := spannerreq.FromCallOptions(opts)
				if ok {
					ctx = spannerreq.WithHeader(ctx, id)
				}
				return gme.newStream(ctx, desc, method, id, opts)
			})),
	}
	if !gme.addFront(f) {
		return nil, ErrClosed
	}
	return f, nil
}

// release is what the closing of a connection dialed with f.opts does, by f's kind: the
// owner's closes the GCPMultiEndpoint, a NewClient client's stops counting f, a
// Configurator's does nothing. It is also called when the Spanner client could not be
// created. The owner's runs gme.Close each time (it is idempotent); the others' run once.
func (f *front) release() {
	switch f.kind {
	case ownerFront:
		f.gme.Close()
	case clientFront:
		f.released.Do(func() { f.gme.dropFront(f) })
	}
}

// frontResolver is the front connection's resolver: it reports no address (the front never
// connects), and its Close, which gRPC runs when the connection is closed, releases the front.
type frontResolver struct{ f *front }

func (r frontResolver) Build(resolver.Target, resolver.ClientConn, resolver.BuildOptions) (resolver.Resolver, error) {
	return r, nil
}
func (frontResolver) Scheme() string                        { return frontScheme }
func (frontResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (r frontResolver) Close()                              { r.f.release() }

// refusedPool is the gtransport.ConnPool Configurator hands to the Spanner clients it cannot
// configure (a refused setting, a closed GCPMultiEndpoint): every call fails at once with
// err, a gRPC status. Its connection is closed from the start (interceptors run before gRPC
// looks at the state, see above), so nothing is left to release. Safe for concurrent use.
type refusedPool struct{ conn *grpc.ClientConn }

var _ gtransport.ConnPool = refusedPool{}

// newRefusedPool returns a refusedPool failing every call with err (a gRPC status error).
func newRefusedPool(err error) (refusedPool, error) {
	conn, cerr := grpc.NewClient("passthrough:///spannerme-refused",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
			return err
		}),
		grpc.WithStreamInterceptor(func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, grpc.Streamer, ...grpc.CallOption) (grpc.ClientStream, error) {
			return nil, err
		}))
	if cerr != nil {
		return refusedPool{}, fmt.Errorf("spannerme: refusing connection: %w", cerr)
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
