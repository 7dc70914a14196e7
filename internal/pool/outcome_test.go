package pool

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// noConnectionPickError returns the error gRPC gives a call that does not wait for ready on
// a grpcgcp pool whose every connection attempt is refused (a closed loopback port): the
// pick's, before anything leaves the client.
func noConnectionPickError(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+grpcgcp.Name+`":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	for s := cc.GetState(); s != connectivity.TransientFailure; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("the pool never went to TRANSIENT_FAILURE (last %v)", s)
		}
	}
	_, err = testpb.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{})
	if err == nil {
		t.Fatal("a call on a pool with no connection succeeded")
	}
	return err
}

// TestObserveLeavesPickFailuresForWantOfAConnectionToConnectivity: a call failed at the pick
// because no connection was up says nothing of the endpoint's answers, even when the pool is
// READY by the time the call ends (it reconnected meanwhile): 30 of them in a row on a READY
// pool eject nothing, whether gRPC's (grpcgcp's picker in TRANSIENT_FAILURE, as a real pool
// gives it) or the pool's own (errNoConnection, errNoAddresses). 30 UNAVAILABLE answers of a
// server eject it.
func TestObserveLeavesPickFailuresForWantOfAConnectionToConnectivity(t *testing.T) {
	picked := noConnectionPickError(t)
	t.Logf("the pick's error: %v", picked)
	for _, tc := range []struct {
		name  string
		err   error
		eject bool
	}{
		{"grpcgcp's picker, no channel connected", picked, false},
		{"the pool's fail-fast picker", status.Error(codes.Unavailable, errNoConnection.Error()), false},
		{"no address", status.Error(codes.Unavailable, errNoAddresses.Error()), false},
		{"the server's UNAVAILABLE", status.Error(codes.Unavailable, "region down"), true},
		{"a relayed pick error with more text", status.Error(codes.Unavailable, "upstream: "+picked.Error()), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := health.New(health.Options{})
			defer d.Close()
			p := &Pool{health: d}
			p.state.Store(int32(connectivity.Ready))
			for range 30 {
				p.Observe(health.Reads, "/google.spanner.v1.Spanner/StreamingRead", tc.err, false)
			}
			if d.Ejected() != tc.eject {
				t.Fatalf("ejected %v after 30 calls failed with %v, want %v", d.Ejected(), tc.err, tc.eject)
			}
		})
	}
}
