package pool

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// A pool that lost its connections holds picks while it reconnects (grpc_gcp's CONNECTING),
// as before; once an attempt failed, it fails them with the attempt's error, which gRPC turns
// into UNAVAILABLE for a call that does not wait for ready (gRFC A62's sticky
// TRANSIENT_FAILURE), while its state stays CONNECTING; a READY channel ends that, and a
// failed attempt beside a READY channel fails no pick.
func TestPicksFailFastAfterAFailedAttempt(t *testing.T) {
	r := newRotationRigN(t, 2)
	sc1, sc2 := r.sub(1), r.sub(2)
	pick := func() (balancer.SubConn, error) {
		p, _ := r.cc.lastPicker()
		res, err := p.Pick(balancer.PickInfo{FullMethodName: "/google.spanner.v1.Spanner/ExecuteSql", Ctx: context.Background()})
		if err == nil && res.Done != nil {
			res.Done(balancer.DoneInfo{})
		}
		return res.SubConn, err
	}
	attemptFailed := func(sc *fakeSubConn, err error) {
		//lint:ignore SA1019 the way grpc_gcp's SubConns report their state
		r.b.UpdateSubConnState(sc, balancer.SubConnState{ConnectivityState: connectivity.TransientFailure, ConnectionError: err})
	}

	r.state(sc2, connectivity.Connecting)
	r.ready(sc1)
	if got, err := pick(); err != nil || got != sc1 {
		t.Fatalf("pick on a READY pool: %v, %v; want sc1", got, err)
	}
	r.clk.Advance(youngLife) // it lived: its end is no young death
	r.state(sc1, connectivity.Idle)
	r.state(sc1, connectivity.Connecting)
	if _, err := pick(); err != balancer.ErrNoSubConnAvailable {
		t.Fatalf("pick while the pool reconnects, before any attempt failed: %v, want it held (ErrNoSubConnAvailable)", err)
	}

	refused := errors.New("connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: i/o timeout\"")
	attemptFailed(sc1, refused)
	_, err := pick()
	if err != refused {
		t.Fatalf("pick after an attempt failed: %v, want the attempt's error", err)
	}
	if _, ok := status.FromError(err); ok {
		t.Fatal("the pick's error is a status error: gRPC would end calls that wait for ready with it")
	}
	if s := r.childState(); s != connectivity.Connecting {
		t.Fatalf("pool state %v after one attempt failed beside a connecting channel, want CONNECTING", s)
	}

	r.state(sc2, connectivity.Ready)
	if got, err := pick(); err != nil || got != sc2 {
		t.Fatalf("pick once a channel is READY again: %v, %v; want sc2", got, err)
	}
	r.state(sc1, connectivity.Idle) // gRPC's backoff over
	r.state(sc1, connectivity.Connecting)
	attemptFailed(sc1, refused)
	if got, err := pick(); err != nil || got != sc2 {
		t.Fatalf("pick after an attempt failed beside a READY channel: %v, %v; want sc2", got, err)
	}

	// Lost again: held until an attempt fails, as the first time.
	r.clk.Advance(time.Second)
	r.state(sc2, connectivity.Idle)
	r.state(sc2, connectivity.Connecting)
	if _, err := pick(); err != balancer.ErrNoSubConnAvailable {
		t.Fatalf("pick after the pool was READY and lost again: %v, want it held", err)
	}
}
