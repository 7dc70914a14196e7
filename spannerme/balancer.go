package spannerme

import (
	"errors"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// errNoAddresses is what calls get while an endpoint's name resolves to no address.
var errNoAddresses = errors.New("spannerme: the name resolved to no address")

// nonEmptyBuilder builds grpcgcp's balancer (registered by grpcgcp's init as grpcgcp.Name)
// behind nonEmptyBalancer: the child of every pool's spannerme_pool policy (connwatch.go).
//
// Why a balancer and not a resolver: gRPC's DNS resolver reports a name that does not exist
// (NXDOMAIN) as an empty address list, and grpcgcp v1.6.0's balancer, asked to keep MinSize
// channels, then retries creating them in a loop that holds its lock: a CPU spins, the log
// floods, and closing the pool never returns. Guarding the balancer leaves every resolver to
// the caller (a resolver given with grpc.WithResolvers, for the dns scheme too, is used as
// given: grpc/grpc-go#3320), and guards whichever resolver is used.
type nonEmptyBuilder struct{}

func (nonEmptyBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return &nonEmptyBalancer{Balancer: balancer.Get(grpcgcp.Name).Build(cc, opts), cc: cc}
}

// nonEmptyBalancer passes everything to grpcgcp's balancer except a resolver state without
// addresses, which it refuses with balancer.ErrBadResolverState (gRPC then re-resolves with
// backoff). Until the first addresses arrive, the pool is in TRANSIENT_FAILURE and calls
// fail with UNAVAILABLE; later, the last good addresses stay in use. A state that lists
// endpoints only has their addresses passed on (grpcgcp reads Addresses). gRPC serializes
// the calls to a balancer, so started needs no lock.
type nonEmptyBalancer struct {
	balancer.Balancer
	cc      balancer.ClientConn
	started bool // grpcgcp's balancer has been given addresses
}

func (b *nonEmptyBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	s.ResolverState.Addresses = resolvedAddresses(s.ResolverState)
	if len(s.ResolverState.Addresses) == 0 {
		if !b.started {
			b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure,
				Picker: base.NewErrPicker(status.Error(codes.Unavailable, errNoAddresses.Error()))})
		}
		return balancer.ErrBadResolverState
	}
	b.started = true
	return b.Balancer.UpdateClientConnState(s)
}

// resolvedAddresses returns the addresses of a resolver state: its Addresses, else those of
// its Endpoints. None means the name resolved to no address.
func resolvedAddresses(s resolver.State) []resolver.Address {
	if len(s.Addresses) != 0 {
		return s.Addresses
	}
	var addrs []resolver.Address
	for _, e := range s.Endpoints {
		addrs = append(addrs, e.Addresses...)
	}
	return addrs
}
