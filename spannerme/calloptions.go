package spannerme

import (
	"context"
	"slices"

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
	var got []grpc.CallOption
	record := grpc.WithUnaryInterceptor(func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn,
		_ grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		got = slices.Clone(callOpts)
		return nil
	})
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
	_ = cc.Invoke(context.Background(), "/spannerme.internal/DefaultCallOptions", nil, nil)
	return got
}
