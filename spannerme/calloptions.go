package spannerme

import (
	"context"
	"net"
	"time"

	vkit "cloud.google.com/go/spanner/apiv1"
	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"

	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// clientDefaultCallOptions returns the default call options that the dial options among
// the client options opts (option.WithGRPCDialOption) give a pool dialed by gtransport, in
// order; nil if there are none or they cannot be read. It is pool.DefaultCallOptions for the
// Spanner client constructors, whose callers give dial options only as client options:
// gtransport dials a client that never connects (its every connection attempt fails at once,
// without the network) with opts and the recording interceptor last, and one call is made
// through it. Credentials are looked up as for a pool; if that fails, so will the pools'
// dials. With grpc.WithBlock among opts the dial fails at once and nothing is read.
func clientDefaultCallOptions(opts []option.ClientOption) []grpc.CallOption {
	got, record := pool.CallOptionsRecorder()
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
	return pool.ReadCallOptions(cc, got)
}

// errNoNetwork fails every connection attempt of the client clientDefaultCallOptions dials.
var errNoNetwork = noNetworkError{}

type noNetworkError struct{}

func (noNetworkError) Error() string   { return "spannerme: reading default call options; no connection" }
func (noNetworkError) Temporary() bool { return false }
