package spannerme

import (
	"context"
	"net"
	"slices"
	"time"

	vkit "cloud.google.com/go/spanner/apiv1"
	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// defaultCallOptions returns the call options that dialing with opts makes the default
// (grpc.WithDefaultCallOptions), in order; nil if there are none or they cannot be read.
//
// gRPC has no accessor for them, but hands every unary interceptor the connection's default
// call options followed by the call's own (grpc-go, ClientConn.Invoke). So a client that
// never connects is created with opts plus an interceptor that records them, and one call is
// made through it. That interceptor is given with grpc.WithUnaryInterceptor after opts: it
// replaces any such interceptor of opts on this client only and runs before every chained
// one, so no interceptor of the caller sees the call, and it never reaches the network.
func defaultCallOptions(opts []grpc.DialOption) []grpc.CallOption {
	got, record := callOptionsRecorder()
	probe := append(slices.Clip(opts), record)
	const target = "passthrough:///spannerme-default-call-options"
	cc, err := grpc.NewClient(target, probe...)
	if err != nil {
		// Most likely no transport credentials: a DialFunc may add them. They do not matter
		// to a client that never connects.
		cc, err = grpc.NewClient(target, append(probe, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return nil
		}
	}
	defer cc.Close()
	return readCallOptions(cc, got)
}

// clientDefaultCallOptions returns the default call options that the dial options among
// the client options opts (option.WithGRPCDialOption) give a pool dialed by gtransport, in
// order; nil if there are none or they cannot be read. It is defaultCallOptions for the
// Spanner client constructors, whose callers give dial options only as client options:
// gtransport dials a client that never connects (its every connection attempt fails at once,
// without the network) with opts and the recording interceptor last, and one call is made
// through it. Credentials are looked up as for a pool; if that fails, so will the pools'
// dials. With grpc.WithBlock among opts the dial fails at once and nothing is read.
func clientDefaultCallOptions(opts []option.ClientOption) []grpc.CallOption {
	got, record := callOptionsRecorder()
	noNetwork := grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
		return nil, errNoNetwork
	})
	// The Spanner API defaults first, as gtransportDialer gives them (scopes, audience).
	all := append(append(vkit.DefaultClientOptions(), opts...),
		option.WithEndpoint("passthrough:///spannerme-default-call-options"),
		option.WithGRPCConnectionPool(1), option.WithGRPCConn(nil),
		option.WithGRPCDialOption(noNetwork),
		// A caller's grpc.WithBlock would otherwise wait for a connection that never comes.
		option.WithGRPCDialOption(grpc.FailOnNonTempDialError(true)), //lint:ignore SA1019 only for grpc.WithBlock, which gtransport's grpc.DialContext honours
		option.WithGRPCDialOption(record))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := gtransport.Dial(ctx, all...)
	if err != nil {
		return nil
	}
	defer cc.Close()
	return readCallOptions(cc, got)
}

// callOptionsRecorder returns a unary interceptor, as a dial option, that records the call
// options of the call it intercepts into *got, without sending the call.
func callOptionsRecorder() (got *[]grpc.CallOption, record grpc.DialOption) {
	got = new([]grpc.CallOption)
	record = grpc.WithUnaryInterceptor(func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn,
		_ grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		*got = slices.Clone(callOpts)
		return nil
	})
	return got, record
}

// readCallOptions makes one call through cc, whose dial options include the recorder that
// fills got, and returns what it recorded.
func readCallOptions(cc *grpc.ClientConn, got *[]grpc.CallOption) []grpc.CallOption {
	_ = cc.Invoke(context.Background(), "/spannerme.internal/DefaultCallOptions", nil, nil)
	return *got
}

// errNoNetwork fails every connection attempt of the client clientDefaultCallOptions dials.
var errNoNetwork = noNetworkError{}

type noNetworkError struct{}

func (noNetworkError) Error() string   { return "spannerme: reading default call options; no connection" }
func (noNetworkError) Temporary() bool { return false }
