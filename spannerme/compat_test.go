package spannerme_test

// This file holds code written for upstream's spanner.NewMultiEndpointClient*, as in
// cloud.google.com/go/spanner's own tests (client_test.go, makeClient and
// makeClientWithConfig), with one change: the package that provides the constructors is
// spannerme instead of spanner. It must keep compiling unchanged otherwise.

import (
	"context"
	"testing"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"

	spannerpkg "github.com/spannerme/spanner-multiendpoint/spannerme" // was: spannerpkg "cloud.google.com/go/spanner"
)

func makeClient(ctx context.Context, database string, target string, opts ...option.ClientOption) (*spanner.Client, error) {
	c, _, err := spannerpkg.NewMultiEndpointClient(
		ctx,
		database,
		&grpcgcp.GCPMultiEndpointOptions{
			MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
				"default": {
					Endpoints: []string{target},
				},
			},
			Default: "default",
		},
		opts...,
	)
	return c, err
}

func makeClientWithConfig(ctx context.Context, database string, config spanner.ClientConfig, target string, opts ...option.ClientOption) (*spanner.Client, error) {
	c, _, err := spannerpkg.NewMultiEndpointClientWithConfig(
		ctx,
		database,
		config,
		&grpcgcp.GCPMultiEndpointOptions{
			MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
				"default": {
					Endpoints: []string{target},
				},
			},
			Default: "default",
		},
		opts...,
	)
	return c, err
}

// The upstream code runs, too.
func TestUpstreamCodeCompilesAndRuns(t *testing.T) {
	database, eps, opts, stop := fakeSpanner(1)
	defer stop()
	ctx := context.Background()
	c, err := makeClientWithConfig(ctx, database, offlineConfig, eps[0].Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := countAccounts(ctx, c); n == 0 {
		t.Fatal("no rows")
	}
	_ = makeClient // compiled; it uses the default config, which exports metrics (needs credentials)
}
