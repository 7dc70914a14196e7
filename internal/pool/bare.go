package pool

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A pool's probes (health and latency) are this package's own calls, not the application's:
// they go on the pool's connection, so that they prove the path the calls take, but not
// through the interceptors of its dial options, among which are the caller's
// (option.WithGRPCDialOption): an application interceptor counting Commit failures must not
// see the probe's Commit in a session that does not exist (docs/transport.md, "Interceptors
// and stats handlers"). Stats handlers are part of the connection's transport and see them.
//
// gRPC runs a ClientConn's interceptors in NewStream and hands the last one the Streamer
// that opens the stream on the ClientConn it is given (grpc.Streamer's signature takes the
// connection; grpc-go v1.85, stream.go, ClientConn.NewStream). bareConn calls that Streamer
// itself, which it obtains once from a ClientConn of its own whose only interceptor returns
// it. The connection's default call options, which ClientConn.NewStream adds before its
// interceptors, are not added: a probe needs none of them.

// bareConn opens streams on cc without its interceptors. Safe for concurrent use.
type bareConn struct{ cc *grpc.ClientConn }

// Invoke runs a unary call as a stream, as grpc-go's own Invoke does.
func (b bareConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return invokeAsStream(ctx, b, method, args, reply, opts...)
}

// NewStream opens a stream on b.cc without its interceptors; with them, if the Streamer could
// not be obtained (never seen: grpc.NewClient of a passthrough target does not fail).
func (b bareConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if open := connStreamer(); open != nil {
		return open(ctx, desc, b.cc, method, opts...)
	}
	return b.cc.NewStream(ctx, desc, method, opts...)
}

// errStreamerTaken ends the call connStreamer makes to obtain gRPC's Streamer.
var errStreamerTaken = errors.New("pool: streamer obtained")

// connStreamer returns the grpc.Streamer that gRPC hands to a ClientConn's last stream
// interceptor, obtained once; nil if it could not be.
var connStreamer = sync.OnceValue(func() grpc.Streamer {
	var got grpc.Streamer
	cc, err := grpc.NewClient("passthrough:///spannerme-streamer", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(func(_ context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, s grpc.Streamer, _ ...grpc.CallOption) (grpc.ClientStream, error) {
			got = s
			return nil, errStreamerTaken
		}))
	if err != nil {
		return nil
	}
	defer cc.Close()
	_, _ = cc.NewStream(context.Background(), &grpc.StreamDesc{}, "/spannerme.pool/Streamer")
	return got
})
