// Package front is how a Spanner client reaches a GCPMultiEndpoint. The client is not given a
// connection: it is given client options (Front.Options) with which it dials its own connection
// pool, as a plain client does, so that its own dial options apply, its built-in metrics
// interceptors among them (docs/transport.md, "What differs from a plain client"). That pool is
// one connection, the front, which never connects: its target's scheme has a resolver of ours
// (resolver) that reports no address, and its last interceptor, ours, sends every call into the
// GCPMultiEndpoint instead of down the connection. Three facts make this robust:
//
//   - gRPC runs a ClientConn's interceptors before it looks at the connection's state
//     (grpc-go v1.85, call.go Invoke and stream.go NewStream), so calls are never held by the
//     front's own state;
//   - gtransport dials with grpc.DialContext, which builds the resolver at once, and the
//     front's idleness is off, so its resolver is built once and closed only when its
//     connection is closed: grpc-go's ClientConn.Close runs the resolver's Close before it
//     returns (clientconn.go, resolver_wrapper.go). resolver.Close is therefore the
//     moment the client closes its pool, which the Spanner client does in Client.Close
//     (sessionClient.close), and where the owner's front closes the GCPMultiEndpoint;
//   - the client's other closers of connections it believes it owns, the dynamic channel
//     pool and the location-aware endpoint clients (google-cloud-go#14611), are turned off or
//     refused (spannerme's transport.go).
//
// The Spanner client's request-ID interceptor is added after every client option, so it
// would run after ours, which ends the chain: what it does (the header, the span attribute,
// the request ID and commit marker on errors) is done here (spannerreq.FromCallOptions, spannerreq.WithError).
//
// The package knows nothing of the GCPMultiEndpoint: a Front sends its calls into a Conn.
package front

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// scheme is the scheme of the front connection's target. Its resolver is given to the
// front's dial only (grpc.WithResolvers), never registered globally.
const scheme = "spannerme-front"

// Front is what one Spanner client over a GCPMultiEndpoint is given (every client of one
// Configurator function shares one): the client options of its connection, and what the
// closing of that connection means, by kind. Safe for concurrent use.
type Front struct {
	gme  Conn
	kind Kind
	// export, if not nil, takes the calls of the client's native metrics exporter (below).
	export Export
	// opts make the Spanner client dial its front connection (see above).
	opts []option.ClientOption
	// released makes release run once.
	released sync.Once
}

// Conn is what a Front's calls go into: the GCPMultiEndpoint's call path (InvokeID and
// NewStreamID carry the Spanner client's request ID id), its count of fronts, and its Close.
type Conn interface {
	InvokeID(ctx context.Context, method string, args, reply any, id string, opts []grpc.CallOption) error
	NewStreamID(ctx context.Context, desc *grpc.StreamDesc, method, id string, opts []grpc.CallOption) (grpc.ClientStream, error)
	// Add counts f; false, counting nothing, once the GCPMultiEndpoint is closed.
	Add(f *Front) bool
	// Drop forgets f.
	Drop(f *Front)
	Close() error
}

// Export is where an owner's front sends the Cloud Monitoring calls of its client's native
// metrics exporter (internal/export.Conn): the Spanner client dials its exporter with its own
// options, the front's, so the exporter's connection runs the front's interceptors, which
// hand the calls the Export Takes (Cloud Monitoring's) to it; the front's dialer keeps that
// connection off the network. Release closes it.
type Export interface {
	Takes(method string) bool
	Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error
	Close() error
}

// Kind says whose a front is, and so what the closing of its connection does.
type Kind int

const (
	// Owner: the client of NewMultiEndpointClient*, which built the GCPMultiEndpoint;
	// its Close closes the GCPMultiEndpoint.
	Owner Kind = iota
	// Client: a client of NewClient; its Close releases the front alone.
	Client
	// Configurator: the front of one Configurator function, shared by every client it
	// configures (go-sql-spanner reuses the options it configured for each Spanner client
	// and admin client of a connector); the closing of their connections does nothing, and
	// the front counts until gme.Close.
	Configurator
)

// New returns the front of one Spanner client (of every client of one Configurator
// function) over gme: calls made on its connection carry the Spanner client's request-ID
// header (see spannerreq.FromCallOptions) and go into gme; with export (nil: none), the
// calls of the client's native metrics exporter go to export. The front counts in Status
// (Clients or Configurators) until it is released. False, with no front, once gme is closed.
func New(gme Conn, kind Kind, export Export) (*Front, bool) {
	f := &Front{gme: gme, kind: kind, export: export}
	f.opts = []option.ClientOption{
		option.WithEndpoint(scheme + ":///spannerme-multiendpoint"),
		option.WithGRPCConnectionPool(1),
		option.WithoutAuthentication(), // the endpoints' pools carry the credentials
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithResolvers(frontResolver{f})),
		option.WithGRPCDialOption(grpc.WithIdleTimeout(0)), // idleness would close the resolver
		// Nothing dialed with these options connects: the front has no address, and the
		// exporter's connection (Export), which has one, gets errNoNetwork.
		option.WithGRPCDialOption(grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return nil, errNoNetwork })),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if export != nil && export.Takes(method) {
					return export.Invoke(ctx, method, req, reply, opts...)
				}
				id, ok := spannerreq.FromCallOptions(opts)
				if !ok {
					return gme.InvokeID(ctx, method, req, reply, "", opts)
				}
				err := gme.InvokeID(spannerreq.WithHeader(ctx, id), method, req, reply, id, opts)
				return spannerreq.WithError(err, id)
			})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, _ *grpc.ClientConn, method string, _ grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				id, ok := spannerreq.FromCallOptions(opts)
				if ok {
					ctx = spannerreq.WithHeader(ctx, id)
				}
				return gme.NewStreamID(ctx, desc, method, id, opts)
			})),
	}
	if !gme.Add(f) {
		return nil, false
	}
	return f, true
}

// Options are the client options with which the Spanner client dials its front connection.
func (f *Front) Options() []option.ClientOption { return f.opts }

// Kind says whose f is.
func (f *Front) Kind() Kind { return f.kind }

// Release is what the closing of a connection dialed with f.opts does, by f's kind: the
// owner's closes the GCPMultiEndpoint, a NewClient client's stops counting f, a
// Configurator's does nothing. It is also called when the Spanner client could not be
// created. The owner's runs gme.Close each time (it is idempotent); the others' run once.
func (f *Front) Release() {
	switch f.kind {
	case Owner:
		if f.export != nil {
			f.export.Close()
		}
		f.gme.Close()
	case Client:
		f.released.Do(func() { f.gme.Drop(f) })
	}
}

// errNoNetwork is the dial error of every connection dialed with a front's options.
var errNoNetwork = errors.New("spannerme: a front's connection does not connect")

// frontResolver is the front connection's resolver: it reports no address (the front never
// connects), and its Close, which gRPC runs when the connection is closed, releases the front.
type frontResolver struct{ f *Front }

func (r frontResolver) Build(resolver.Target, resolver.ClientConn, resolver.BuildOptions) (resolver.Resolver, error) {
	return r, nil
}
func (frontResolver) Scheme() string                        { return scheme }
func (frontResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (r frontResolver) Close()                              { r.f.Release() }

// Refused is the gtransport.ConnPool Configurator hands to the Spanner clients it cannot
// configure (a refused setting, a closed GCPMultiEndpoint): every call fails at once with
// err, a gRPC status. Its connection is closed from the start (interceptors run before gRPC
// looks at the state, see above), so nothing is left to release. Safe for concurrent use.
type Refused struct{ conn *grpc.ClientConn }

var _ gtransport.ConnPool = Refused{}

// NewRefused returns a Refused pool failing every call with err (a gRPC status error).
func NewRefused(err error) (Refused, error) {
	conn, cerr := grpc.NewClient("passthrough:///spannerme-refused",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
			return err
		}),
		grpc.WithStreamInterceptor(func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, grpc.Streamer, ...grpc.CallOption) (grpc.ClientStream, error) {
			return nil, err
		}))
	if cerr != nil {
		return Refused{}, fmt.Errorf("spannerme: refusing connection: %w", cerr)
	}
	conn.Close()
	return Refused{conn: conn}, nil
}

func (p Refused) Conn() *grpc.ClientConn { return p.conn }
func (p Refused) Num() int               { return 1 }
func (p Refused) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return p.conn.Invoke(ctx, method, args, reply, opts...)
}
func (p Refused) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return p.conn.NewStream(ctx, desc, method, opts...)
}

// Close does nothing: the connection is closed already, and the driver may give the pool to
// its next client.
func (p Refused) Close() error { return nil }
