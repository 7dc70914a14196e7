package spannerme

import (
	"context"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// A name that resolves to no address (gRPC's DNS resolver reports NXDOMAIN so) must not make
// grpcgcp's balancer spin: the group fails over and Close returns. The resolver here is a
// manual one that resolves to nothing; no DNS query is made. The pool's balancer refuses the
// empty state (balancer.go), whatever the resolver.
func TestNameWithoutAddressesDoesNotHang(t *testing.T) {
	e2 := startEndpoint(t, "E2")
	empty := manual.NewBuilderWithScheme("empty")
	empty.InitialState(resolver.State{}) // resolves to nothing
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(300*time.Millisecond, 0, "nxdomain:1", e2.Addr())})
	o.DialFunc = func(_ context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		if target == "nxdomain:1" {
			return grpc.NewClient("empty:///nxdomain", append(opts, grpc.WithResolvers(empty))...)
		}
		return grpc.NewClient(target, opts...)
	}
	gme, err := NewGCPMultiEndpointWithSettings(o, fastSettings(nil), insecureDial)
	if err != nil {
		t.Fatal(err)
	}
	waitServedBy(t, context.Background(), gme, "E2", 5*time.Second)
	done := make(chan struct{})
	go func() { gme.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}
