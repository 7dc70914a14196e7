package pool

import (
	"errors"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
)

// Picks on a pool that lost its connections and failed to connect again.
//
// grpc_gcp reports a pool CONNECTING while any of its channels is connecting (grpcgcp v1.6.0
// gcp_balancer.go, connectivityStateEvaluator), and its picker then holds every call until a
// channel is READY (balancer.ErrNoSubConnAvailable). A pool of several channels whose
// endpoint stopped answering has one channel or another connecting almost all the time, each
// attempt lasting up to MinConnectTimeout, so a call held there waits for its deadline even
// after its group moved to another endpoint. A single gRPC channel does not: pick_first stays
// in TRANSIENT_FAILURE from its first failed attempt until a connection is READY, and fails
// the calls that do not wait for ready at once with UNAVAILABLE (gRFC A62, "Sticky
// TRANSIENT_FAILURE"; grpc-go v1.85.0 picker_wrapper.go).
//
// spannerme keeps calls out of a connecting pool (spannerme's pickConnected waits instead), so
// the calls gRPC holds are those that raced the pool's loss of its last connection. So, once a
// channel failed (TRANSIENT_FAILURE as grpc_gcp sees it: an attempt that failed, or a
// connection that died young, young.go) while the pool was not READY, the pool hands gRPC a
// picker that fails each pick with the latest such error until grpc_gcp publishes READY
// again: gRPC fails a call that does not wait for ready with UNAVAILABLE before anything was
// sent (the Spanner client retries it, and its retry is routed anew), and keeps holding one
// that waits for ready. The pool's state stays grpc_gcp's (CONNECTING), so the state the
// monitor reports and the groups see does not change.

// errNoConnection is the pick's error for a failure that gave no connection error.
var errNoConnection = errors.New("spannerme: no connection of the pool is ready, and its last attempt failed")

// failFastPicker fails every pick with err, the text of the pool's latest failure: never a
// status error (attemptFailed copies the text), so gRPC fails the calls that do not wait for
// ready with UNAVAILABLE and holds the others.
type failFastPicker struct{ err error }

func (p failFastPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, p.err
}

// attemptFailed records that one of the pool's channels failed (s, its TRANSIENT_FAILURE as
// forwarded to grpc_gcp) and, if the pool is connecting, hands gRPC the failing picker with
// this latest error, as pick_first does at each failure. It runs on gRPC's serializer after
// grpc_gcp saw the change.
func (b *poolBalancer) attemptFailed(s balancer.SubConnState) {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	if b.fromChild.ConnectivityState == connectivity.Ready {
		return // another channel serves: grpc_gcp's picker picks it
	}
	// Its text only: a connection error that wraps a gRPC status (a credentials
	// handshake's) would make gRPC end even the calls that wait for ready.
	b.failed = errNoConnection
	if err := s.ConnectionError; err != nil {
		b.failed = errors.New(err.Error())
	}
	if b.fromChild.ConnectivityState == connectivity.Connecting {
		b.publishLocked()
	}
}

// publishLocked hands gRPC grpc_gcp's last state (fromChild), with the failing picker instead
// of grpc_gcp's while the pool is connecting after a failed attempt. b.pubMu must be held.
func (b *poolBalancer) publishLocked() {
	s := b.fromChild
	if s.ConnectivityState == connectivity.Connecting && b.failed != nil {
		s.Picker = failFastPicker{err: b.failed}
	}
	b.published = s
	b.cc.UpdateState(s)
}
