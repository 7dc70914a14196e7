package spannerme

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver/manual"
)

// With RecoveryTimeout 0 (the zero value), a primary that connects a little later than its
// fallback still takes the traffic from the start: no fallback at startup, no event.
func TestStartupWithZeroRecoveryTimeoutKeepsThePrimary(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	e1.Slow(100*time.Millisecond, 0) // its handshake takes a few round trips of 100ms
	var mu sync.Mutex
	var events []SwitchEvent
	s := fastSettings(nil)
	s.OnSwitch = func(ev SwitchEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() }
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, time.Second, e1.Addr(), e2.Addr())}), s)
	got, err := call(context.Background(), gme)
	if err != nil || got != "E1" {
		t.Fatalf("first call served by %q, %v; want E1", got, err)
	}
	eventually(t, 5*time.Second, "both Available", func() bool {
		g := groupOf(gme, "g")
		return g.Endpoints[0].State == Available && g.Endpoints[1].State == Available
	})
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 0 {
		t.Errorf("switch events at startup: %v", events)
	}
}

// With RecoveryTimeout 0, a primary whose first connection attempt fails hands over to the
// fallback as soon as that attempt has failed.
func TestStartupWithZeroRecoveryTimeoutPrimaryDown(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	e1.Down()
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, time.Second, e1.Addr(), e2.Addr())}), fastSettings(nil))
	took, _ := waitServedBy(t, context.Background(), gme, "E2", 5*time.Second)
	t.Logf("served by the fallback %v after creation", took)
}

// With RecoveryTimeout 0, a primary whose first connection attempt never ends (here a
// resolver that never answers) holds the group for MinConnectTimeout at most, then the
// fallback takes over.
func TestStartupWithZeroRecoveryTimeoutPrimaryNeverConnects(t *testing.T) {
	e2 := startEndpoint(t, "E2")
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "stuck:1", e2.Addr())})
	o.DialFunc = func(_ context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		if target == "stuck:1" {
			return grpc.NewClient("stuck:///x", append(opts, grpc.WithResolvers(manual.NewBuilderWithScheme("stuck")))...)
		}
		return grpc.NewClient(target, opts...)
	}
	s := fastSettings(nil) // MinConnectTimeout 1s
	gme := newGME(t, o, s)
	took, _ := waitServedBy(t, context.Background(), gme, "E2", s.MinConnectTimeout+5*time.Second)
	t.Logf("served by the fallback %v after creation (MinConnectTimeout %v)", took, s.MinConnectTimeout)
}
