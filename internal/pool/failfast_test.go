package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
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
	if err == nil || err.Error() != refused.Error() {
		t.Fatalf("pick after an attempt failed: %v, want the attempt's error", err)
	}
	if _, ok := status.FromError(err); ok {
		t.Fatal("the pick's error is a status error: gRPC would end calls that wait for ready with it")
	}
	if s := r.childState(); s != connectivity.Connecting {
		t.Fatalf("pool state %v after one attempt failed beside a connecting channel, want CONNECTING", s)
	}

	// The next failure's error replaces it; a connection error that wraps a gRPC status
	// reaches gRPC as text only (a status error would end calls that wait for ready).
	wrapped := fmt.Errorf("credentials: %w", status.Error(codes.Unauthenticated, "handshake refused"))
	r.state(sc1, connectivity.Connecting) // gRPC's backoff over
	attemptFailed(sc1, wrapped)
	if _, err := pick(); err == nil || err.Error() != wrapped.Error() {
		t.Fatalf("pick after a second failure: %v, want its error", err)
	} else if _, ok := status.FromError(err); ok {
		t.Fatal("the pick's error carries the connection error's gRPC status")
	}

	r.state(sc2, connectivity.Ready)
	if got, err := pick(); err != nil || got != sc2 {
		t.Fatalf("pick once a channel is READY again: %v, %v; want sc2", got, err)
	}
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

// A pool whose last READY connection died young (shown to grpc_gcp as TRANSIENT_FAILURE,
// young.go) fails picks at once too: the endpoint ends connections before they serve.
func TestPicksFailFastAfterAYoungDeath(t *testing.T) {
	r := newRotationRigN(t, 2)
	sc1, sc2 := r.sub(1), r.sub(2)
	r.state(sc2, connectivity.Connecting)
	r.ready(sc1)
	r.clk.Advance(10 * time.Millisecond)
	r.state(sc1, connectivity.Idle) // GOAWAY 10 ms after READY, no call answered
	p, _ := r.cc.lastPicker()
	_, err := p.Pick(balancer.PickInfo{FullMethodName: "/google.spanner.v1.Spanner/ExecuteSql", Ctx: context.Background()})
	if err == nil || err == balancer.ErrNoSubConnAvailable || !strings.Contains(err.Error(), "before it carried a call") {
		t.Fatalf("pick after the last READY connection died young: %v, want the young death's error", err)
	}
	if s := r.childState(); s != connectivity.Connecting {
		t.Fatalf("pool state %v, want CONNECTING (sc2 still connecting)", s)
	}
}
