package spannerme

import (
	"context"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
)

// NewMEContext returns a copy of ctx that routes calls made with it to the MultiEndpoint
// (group) called name. It uses grpcgcp's context key, so a context made by
// grpcgcp.NewMEContext routes the same way. A name that is not configured routes to the
// default group (see GCPMultiEndpoint.Status for how often that happened).
func NewMEContext(ctx context.Context, name string) context.Context {
	return grpcgcp.NewMEContext(ctx, name)
}

// FromMEContext returns the MultiEndpoint name carried by ctx, if any (from NewMEContext or
// grpcgcp.NewMEContext).
func FromMEContext(ctx context.Context) (string, bool) {
	return grpcgcp.FromMEContext(ctx)
}
