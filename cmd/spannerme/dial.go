package main

import (
	"context"

	vkit "cloud.google.com/go/spanner/apiv1"
	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// clientOptions are the client options the flags ask for: Application Default Credentials
// and TLS unless --no-auth and --plaintext.
func (c *common) clientOptions() []option.ClientOption {
	var opts []option.ClientOption
	if c.noAuth {
		opts = append(opts, option.WithoutAuthentication())
	}
	if c.plaintext {
		opts = append(opts, option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	}
	return opts
}

// dialEndpoint dials one endpoint as spannerme dials an endpoint's pool: the Spanner API's
// client defaults, the flags' options, and the endpoint's authority; one connection.
func dialEndpoint(ctx context.Context, c *common, endpoint, authority string) (*grpc.ClientConn, error) {
	all := append(vkit.DefaultClientOptions(), c.clientOptions()...)
	if authority != "" {
		all = append(all, option.WithGRPCDialOption(grpc.WithAuthority(authority)))
	}
	all = append(all, option.WithEndpoint(endpoint), option.WithGRPCConnectionPool(1))
	return gtransport.Dial(ctx, all...)
}
