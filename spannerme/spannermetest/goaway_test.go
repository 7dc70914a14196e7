package spannermetest

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A gRPC client's connection to a DieYoung endpoint is established and goes IDLE before it
// carries a call, never through TRANSIENT_FAILURE (grpc-go v1.85.0 clientconn.go,
// createTransport: a transport closed by GOAWAY once established is "a success", and the
// channel goes IDLE, READY or not in between), and the endpoint closes it; Pass serves new connections again, and a
// connection made before DieYoung keeps serving.
func TestDieYoungConnectionsGoReadyThenIdle(t *testing.T) {
	backend := startHealthServer(t)
	e := NewEndpointTB(t, backend)
	old := healthClient(t, e.Addr())
	if err := check(old, waitTimeout, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("before DieYoung: %v", err)
	}
	e.DieYoung()
	if m := e.Mode(); m != DieYoung {
		t.Fatalf("Mode() = %v, want die-young", m)
	}
	before := e.Stats()

	cc, err := grpc.NewClient("passthrough:///"+e.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cc.Connect()
	var seen []connectivity.State
	for s := cc.GetState(); ; s = cc.GetState() {
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if s == connectivity.Idle && len(seen) > 1 {
			break
		}
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("states %v: no IDLE after READY before the deadline", seen)
		}
	}
	for _, s := range seen {
		if s == connectivity.TransientFailure {
			t.Errorf("states %v: a DieYoung connection is no failure to gRPC", seen)
		}
	}
	after := e.Stats()
	if after.Accepted-before.Accepted != 1 {
		t.Errorf("accepted %d connections for one Connect, want 1", after.Accepted-before.Accepted)
	}
	// The endpoint closed its side: only the old connection stays.
	waitFor(t, "the DieYoung connection closed", func() bool { return e.Stats().Active == before.Active })
	// The connection made before DieYoung still serves.
	if err := check(old, waitTimeout); err != nil {
		t.Fatalf("old connection during DieYoung: %v", err)
	}

	e.Pass()
	if err := check(healthpb.NewHealthClient(cc), waitTimeout, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("after Pass: %v", err)
	}
}
