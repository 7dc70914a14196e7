package spannerme

import (
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/resolver"
)

// errNoAddresses is reported instead of an empty address list.
var errNoAddresses = errors.New("spannerme: the name resolved to no address")

// nonEmptyBuilder wraps a resolver builder so that a resolution with no address becomes a
// resolver error. gRPC's DNS resolver reports a name that does not exist (NXDOMAIN) as an
// empty address list, and grpcgcp v1.6.0's balancer, asked to keep MinSize channels, then
// retries creating them in a loop that holds its lock: a CPU spins, the log floods, and
// closing the pool never returns. With an error instead, the pool stays connecting, the
// group fails over, and Close works.
//
// It also records every resolution error in the pool's watch (nil: none): gRPC gives them to
// no one else before the first successful resolution (no balancer exists yet).
type nonEmptyBuilder struct {
	resolver.Builder
	watch *connWatch
}

func (b nonEmptyBuilder) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	return b.Builder.Build(t, nonEmptyClientConn{cc, b.watch}, o)
}

type nonEmptyClientConn struct {
	resolver.ClientConn
	watch *connWatch
}

func (c nonEmptyClientConn) UpdateState(s resolver.State) error {
	if len(s.Addresses) == 0 && len(s.Endpoints) == 0 {
		c.ReportError(errNoAddresses)
		return balancer.ErrBadResolverState
	}
	return c.ClientConn.UpdateState(s)
}

// ReportError records err, then passes it on.
func (c nonEmptyClientConn) ReportError(err error) {
	c.watch.record(ConnDNS, err)
	c.ClientConn.ReportError(err)
}

// safeDNS is the dial option that puts nonEmptyBuilder, reporting to w, in front of gRPC's
// DNS resolver (or of dns, if not nil: tests give a resolver for the "dns" scheme).
func safeDNS(w *connWatch, dns resolver.Builder) []grpc.DialOption {
	if dns == nil {
		dns = resolver.Get("dns")
	}
	if dns != nil {
		return []grpc.DialOption{grpc.WithResolvers(nonEmptyBuilder{Builder: dns, watch: w})}
	}
	return nil
}
