package pool

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultCallOptions returns the call options that dialing with opts makes the default
// (grpc.WithDefaultCallOptions), in order; nil if there are none or they cannot be read.
//
// gRPC has no accessor for them, but hands every unary interceptor the connection's default
// call options followed by the call's own (grpc-go, ClientConn.Invoke). So a client that
// never connects is created with opts plus an interceptor that records them, and one call is
// made through it. That interceptor is given with grpc.WithUnaryInterceptor after opts: it
// replaces any such interceptor of opts on this client only and runs before every chained
// one, so no interceptor of the caller sees the call, and it never reaches the network.
func DefaultCallOptions(opts []grpc.DialOption) []grpc.CallOption {
	got, record := CallOptionsRecorder()
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
	return ReadCallOptions(cc, got)
}

// CallOptionsRecorder returns a unary interceptor, as a dial option, that records the call
// options of the call it intercepts into *got, without sending the call.
func CallOptionsRecorder() (got *[]grpc.CallOption, record grpc.DialOption) {
	got = new([]grpc.CallOption)
	record = grpc.WithUnaryInterceptor(func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn,
		_ grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		*got = slices.Clone(callOpts)
		return nil
	})
	return got, record
}

// ReadCallOptions makes one call through cc, whose dial options include the recorder that
// fills got (CallOptionsRecorder), and returns what it recorded.
func ReadCallOptions(cc *grpc.ClientConn, got *[]grpc.CallOption) []grpc.CallOption {
	_ = cc.Invoke(context.Background(), "/spannerme.internal/DefaultCallOptions", nil, nil)
	return *got
}

// WaitForReady reports whether a call with the call options opts asks gRPC to wait for a
// ready connection (grpc.WaitForReady(true)), given whether the dial options make it the
// default (def). As in gRPC, the call's own options come after the defaults, and the last
// one given wins.
func WaitForReady(def bool, opts []grpc.CallOption) bool {
	wait := def
	for _, o := range opts {
		if f, ok := o.(grpc.FailFastCallOption); ok {
			wait = !f.FailFast
		}
	}
	return wait
}
