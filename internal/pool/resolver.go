package pool

import (
	"fmt"

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
	watch *Watch
}

func (b dnsRecorder) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	return b.Builder.Build(t, dnsRecorderConn{cc, b.watch}, o)
}

type dnsRecorderConn struct {
	resolver.ClientConn
	watch *Watch
}

// ReportError records err, then passes it on.
func (c dnsRecorderConn) ReportError(err error) {
	c.watch.record(KindDNS, err)
	c.ClientConn.ReportError(err)
}

// recordDNS returns the dial option that puts dnsRecorder, reporting to w, in front of gRPC's
// DNS resolver (or of dns, if not nil: tests give a resolver for the "dns" scheme). It must
// come after the caller's dial options: gRPC uses the first resolver given for a scheme
// (grpc/grpc-go#3320), so a caller's own "dns" resolver keeps winning. It is therefore a
// TrailingDialOption.
func recordDNS(w *Watch, dns resolver.Builder) []grpc.DialOption {
	if dns == nil {
		dns = resolver.Get("dns")
	}
	if dns != nil {
		return []grpc.DialOption{TrailingDialOption{grpc.WithResolvers(dnsRecorder{Builder: dns, watch: w})}}
	}
	return nil
}

// TrailingDialOption marks a dial option that must come after the caller's: a dialer that
// puts the caller's options last (spannerme's gtransport dialer) moves it behind them.
type TrailingDialOption struct{ grpc.DialOption }

// DialOptions returns the dial options of the pool w watches: its service config (the
// spannerme_pool policy naming w, around gcpJSON, the grpc_gcp configuration, with a
// connection of its own for latency probes when latencyConn is set: latencyconn.go), then base
// (the endpoint's other dial options, the caller's last), then, when recordResolution is set
// (the pool's owner dials it, so no caller's DialFunc adds options after these), the DNS
// resolver that records resolution errors in w: gRPC's, or dns if not nil. A caller's own
// "dns" resolver, earlier in base, wins over it.
func DialOptions(w *Watch, gcpJSON []byte, base []grpc.DialOption, recordResolution bool, dns resolver.Builder, latencyConn bool) []grpc.DialOption {
	sc := fmt.Sprintf(`{"loadBalancingConfig":[{%q:{"watch":"%d","latencyConn":%t,"child":%s}}]}`, poolBalancerName, w.id, latencyConn, gcpJSON)
	opts := append([]grpc.DialOption{grpc.WithDefaultServiceConfig(sc)}, base...)
	if recordResolution {
		opts = append(opts, recordDNS(w, dns)...)
	}
	return opts
}
