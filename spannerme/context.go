package spannerme

import (
	"context"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
)

// NewMEContext returns a copy of ctx that routes calls made with it to the MultiEndpoint
// (group) called name. It uses grpcgcp's context key, so a context made by
// grpcgcp.NewMEContext routes the same way. The name "" routes to the default group, as a
// context without a name does. A name that is not configured routes to the default group
// too, and is counted and logged once (see GCPMultiEndpoint.Status).
func NewMEContext(ctx context.Context, name string) context.Context {
	return grpcgcp.NewMEContext(ctx, name)
}

// FromMEContext returns the MultiEndpoint name carried by ctx, if any (from NewMEContext or
// grpcgcp.NewMEContext).
func FromMEContext(ctx context.Context) (string, bool) {
	return grpcgcp.FromMEContext(ctx)
}
