package spannerme

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// Where a pool's connection errors come from.
//
// gRPC reports why a connection attempt failed (refused, timeout, TLS, ...) only to the
// channel's load balancer, as SubConnState.ConnectionError, and a name resolution error only
// to the resolver's ClientConn: a call sees neither (grpcgcp's picker fails calls with a
// generic "all SubConns are in TransientFailure"), and a standby gets no calls anyway. So
// each pool is dialed with this package's load-balancing policy, spannerme_pool, a thin
// wrapper around grpcgcp's grpc_gcp that records every channel's connection errors and
// every ready connection that closes (and guards grpc_gcp against an empty address list,
// balancer.go), and, when this package dials the pool itself, with a DNS resolver wrapper
// that records resolution errors (resolver.go). Both feed the pool's connWatch. This works whatever the
// credentials (TLS errors included), dialer or DialFunc, as long as the dial options given to
// DialFunc are applied; a caller's dial option that replaces the default service config
// (grpc.WithDefaultServiceConfig) turns the recording off for that pool.

// poolBalancerName is the load-balancing policy of every pool.
const poolBalancerName = "spannerme_pool"

func init() { balancer.Register(poolBalancerBuilder{}) }

// connWatch records one pool's connection errors and connectivity changes, and keeps what the
// observer needs to log each transition of the endpoint once. The pool's load balancer and
// name resolver feed it on gRPC's goroutines; the pool's monitor feeds it too.
type connWatch struct {
	id       uint64
	endpoint string
	now      func() time.Time
	// report, if not nil, is called with each recorded error, on the recording goroutine,
	// with no lock held. It must not block (the observer queues its log lines).
	report func(*connWatch, *ConnError)

	last    atomic.Pointer[ConnError]
	changed atomic.Pointer[time.Time] // when the pool's connectivity state last changed

	mu sync.Mutex // guards the fields below: the endpoint's transitions as logged
	// up: the pool was last reported available.
	up bool
	// logged: the kinds of connection error already logged since the endpoint was last up,
	// so that retries failing the same ways (by turns, too) log nothing more. nil: none.
	logged map[ConnErrorKind]bool
	// upAt, downAt: when the pool last became available, and unavailable.
	upAt, downAt time.Time
}

// watches maps a connWatch's id to it, for the pools' load balancers: gRPC builds a
// balancer from a service config (JSON), which can carry only the id.
var (
	watches  sync.Map // uint64 -> *connWatch
	watchIDs atomic.Uint64
)

// newConnWatch registers a watch for endpoint's next pool. Release it when the pool is
// closed (or its dial failed).
func newConnWatch(endpoint string, now func() time.Time, report func(*connWatch, *ConnError)) *connWatch {
	w := &connWatch{id: watchIDs.Add(1), endpoint: endpoint, now: now, report: report}
	t := now()
	w.changed.Store(&t)
	watches.Store(w.id, w)
	return w
}

// release forgets the watch: a balancer built later for its id records nothing.
func (w *connWatch) release() { watches.Delete(w.id) }

// poolDialOptions returns the dial options of the pool w watches: its service config (the
// spannerme_pool policy naming w, around the grpc_gcp configuration), then the endpoint's
// other dial options, base (the caller's last), then, for a pool this package dials itself
// (no caller DialFunc, which would add its options after these), the DNS resolver that
// records resolution errors in w; a caller's own "dns" resolver, earlier, wins over it.
func (gme *GCPMultiEndpoint) poolDialOptions(w *connWatch, base []grpc.DialOption) []grpc.DialOption {
	sc := fmt.Sprintf(`{"loadBalancingConfig":[{%q:{"watch":"%d","child":%s}}]}`, poolBalancerName, w.id, gme.gcpJSON)
	opts := append([]grpc.DialOption{grpc.WithDefaultServiceConfig(sc)}, base...)
	if gme.settings.ownDialer {
		opts = append(opts, recordDNS(w, gme.settings.dns)...)
	}
	return opts
}

// record keeps err as the pool's last connection error and reports it. nil w is a no-op.
func (w *connWatch) record(kind ConnErrorKind, err error) {
	if w == nil || err == nil {
		return
	}
	e := &ConnError{Kind: kind, Message: err.Error(), At: w.now()}
	w.last.Store(e)
	if w.report != nil {
		w.report(w, e)
	}
}

// lastError returns the last recorded error, nil if none.
func (w *connWatch) lastError() *ConnError {
	if e := w.last.Load(); e != nil {
		c := *e
		return &c
	}
	return nil
}

// stateChanged notes that the pool's connectivity state changed now.
func (w *connWatch) stateChanged() {
	t := w.now()
	w.changed.Store(&t)
}

// since returns when the pool's connectivity state last changed.
func (w *connWatch) since() time.Time { return *w.changed.Load() }

// poolBalancerBuilder builds the spannerme_pool policy: grpc_gcp, watched.
type poolBalancerBuilder struct{}

func (poolBalancerBuilder) Name() string { return poolBalancerName }

func (poolBalancerBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &poolBalancer{states: make(map[balancer.SubConn]connectivity.State)}
	b.child = nonEmptyBuilder{}.Build(&poolClientConn{ClientConn: cc, b: b}, opts)
	return b
}

// poolLBConfig is the parsed spannerme_pool configuration.
type poolLBConfig struct {
	serviceconfig.LoadBalancingConfig
	watch uint64
	child serviceconfig.LoadBalancingConfig
}

// ParseConfig reads {"watch":"<id>","child":<grpc_gcp configuration>}.
func (poolBalancerBuilder) ParseConfig(j json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c struct {
		Watch uint64          `json:"watch,string"`
		Child json.RawMessage `json:"child"`
	}
	if err := json.Unmarshal(j, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", poolBalancerName, err)
	}
	parser, ok := balancer.Get(grpcgcp.Name).(balancer.ConfigParser)
	if !ok {
		return nil, fmt.Errorf("%s: the %s balancer parses no configuration", poolBalancerName, grpcgcp.Name)
	}
	if len(c.Child) == 0 {
		c.Child = json.RawMessage("{}")
	}
	child, err := parser.ParseConfig(c.Child)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", poolBalancerName, err)
	}
	return &poolLBConfig{watch: c.Watch, child: child}, nil
}

// poolBalancer is grpc_gcp with every channel's state changes observed first.
type poolBalancer struct {
	child balancer.Balancer

	// mu guards watch and states. gRPC serializes a balancer's calls, so it is never
	// contended; it keeps that an implementation detail.
	mu     sync.Mutex
	watch  *connWatch
	states map[balancer.SubConn]connectivity.State
}

func (b *poolBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	if c, ok := s.BalancerConfig.(*poolLBConfig); ok {
		b.mu.Lock()
		if b.watch == nil {
			if w, ok := watches.Load(c.watch); ok {
				b.watch = w.(*connWatch)
			}
		}
		b.mu.Unlock()
		s.BalancerConfig = c.child
	}
	if len(resolvedAddresses(s.ResolverState)) == 0 { // refused by nonEmptyBalancer
		b.mu.Lock()
		w := b.watch
		b.mu.Unlock()
		w.record(ConnDNS, errNoAddresses)
	}
	return b.child.UpdateClientConnState(s)
}

// ResolverError records a name resolution error that comes after the first resolution (those
// before it reach no balancer: dnsRecorder records them).
func (b *poolBalancer) ResolverError(err error) {
	b.mu.Lock()
	w := b.watch
	b.mu.Unlock()
	w.record(ConnDNS, err)
	b.child.ResolverError(err)
}

// UpdateSubConnState is how gRPC reports the state of a SubConn created without a
// StateListener, as grpc_gcp v1.6.0 creates them.
func (b *poolBalancer) UpdateSubConnState(sc balancer.SubConn, s balancer.SubConnState) {
	b.observe(sc, s)
	//lint:ignore SA1019 grpc_gcp v1.6.0 creates its SubConns without a StateListener
	b.child.UpdateSubConnState(sc, s)
}

func (b *poolBalancer) Close()    { b.child.Close() }
func (b *poolBalancer) ExitIdle() { b.child.ExitIdle() }

// observe records a channel's failed connection attempt (TRANSIENT_FAILURE with its error)
// and a ready connection that closed (READY to IDLE: gRPC gives no error then). It runs
// before grpc_gcp sees the change, so the error is recorded before the pool's state moves.
func (b *poolBalancer) observe(sc balancer.SubConn, s balancer.SubConnState) {
	b.mu.Lock()
	prev := b.states[sc]
	if s.ConnectivityState == connectivity.Shutdown {
		delete(b.states, sc)
	} else {
		b.states[sc] = s.ConnectivityState
	}
	w := b.watch
	b.mu.Unlock()
	switch {
	case s.ConnectivityState == connectivity.TransientFailure && s.ConnectionError != nil:
		w.record(classifyConnError(s.ConnectionError), s.ConnectionError)
	case prev == connectivity.Ready && s.ConnectivityState == connectivity.Idle:
		w.record(ConnClosed, errConnClosed)
	}
}

// poolClientConn is what grpc_gcp sees as its ClientConn: gRPC's, with SubConn state
// listeners (if grpc_gcp sets any) observed first.
type poolClientConn struct {
	balancer.ClientConn
	b *poolBalancer
}

func (c *poolClientConn) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	if l := opts.StateListener; l != nil {
		var sc balancer.SubConn
		opts.StateListener = func(s balancer.SubConnState) {
			c.b.observe(sc, s)
			l(s)
		}
		var err error
		sc, err = c.ClientConn.NewSubConn(addrs, opts) //lint:ignore SA1019 grpc_gcp's call, passed on
		return sc, err
	}
	return c.ClientConn.NewSubConn(addrs, opts) //lint:ignore SA1019 grpc_gcp's call, passed on
}
