package spannerme

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
)

// dnsRecorder wraps the "dns" resolver of a pool this package dials itself, to record its
// resolution errors in the pool's watch: gRPC gives an error that comes before the first
// successful resolution to no balancer (none exists yet), so the pool's balancer cannot see
// it. It changes nothing else: an empty address list is guarded by the pool's balancer
// (balancer.go), whatever the resolver.
type dnsRecorder struct {
	resolver.Builder
	watch *connWatch
}

func (b dnsRecorder) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	return b.Builder.Build(t, dnsRecorderConn{cc, b.watch}, o)
}

type dnsRecorderConn struct {
	resolver.ClientConn
	watch *connWatch
}

// ReportError records err, then passes it on.
func (c dnsRecorderConn) ReportError(err error) {
	c.watch.record(ConnDNS, err)
	c.ClientConn.ReportError(err)
}

// recordDNS returns the dial option that puts dnsRecorder, reporting to w, in front of gRPC's
// DNS resolver (or of dns, if not nil: tests give a resolver for the "dns" scheme). It must
// come after the caller's dial options: gRPC uses the first resolver given for a scheme
// (grpc/grpc-go#3320), so a caller's own "dns" resolver keeps winning. It is therefore a
// trailingDialOption.
func recordDNS(w *connWatch, dns resolver.Builder) []grpc.DialOption {
	if dns == nil {
		dns = resolver.Get("dns")
	}
	if dns != nil {
		return []grpc.DialOption{trailingDialOption{grpc.WithResolvers(dnsRecorder{Builder: dns, watch: w})}}
	}
	return nil
}

// trailingDialOption marks a dial option that must come after the caller's: this package's
// own dialers (gtransportDialer) move it behind the caller's client options.
type trailingDialOption struct{ grpc.DialOption }
