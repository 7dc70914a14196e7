package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// poolBalancerName is the load-balancing policy of every pool: grpc_gcp, watched (watch.go).
const poolBalancerName = "spannerme_pool"

func init() { balancer.Register(poolBalancerBuilder{}) }

// errNoAddresses is what calls get while an endpoint's name resolves to no address.
var errNoAddresses = errors.New("spannerme: the name resolved to no address")

// nonEmptyBuilder builds grpcgcp's balancer (registered by grpcgcp's init as grpcgcp.Name)
// behind nonEmptyBalancer: the child of every pool's spannerme_pool policy.
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

// poolBalancerBuilder builds the spannerme_pool policy: grpc_gcp, watched.
type poolBalancerBuilder struct{}

func (poolBalancerBuilder) Name() string { return poolBalancerName }

func (poolBalancerBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &poolBalancer{cc: cc, clock: clock.Real, states: make(map[balancer.SubConn]connectivity.State),
		conns: make(map[balancer.SubConn]*conn)}
	b.child = nonEmptyBuilder{}.Build(&poolClientConn{ClientConn: cc, b: b}, opts)
	return b
}

// poolLBConfig is the parsed spannerme_pool configuration.
type poolLBConfig struct {
	serviceconfig.LoadBalancingConfig
	watch       uint64
	latencyConn bool // a connection of its own for the latency probes (latencyconn.go)
	child       serviceconfig.LoadBalancingConfig
}

// ParseConfig reads {"watch":"<id>","latencyConn":true,"child":<grpc_gcp configuration>}
// (latencyConn may be left out: false).
func (poolBalancerBuilder) ParseConfig(j json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c struct {
		Watch       uint64          `json:"watch,string"`
		LatencyConn bool            `json:"latencyConn"`
		Child       json.RawMessage `json:"child"`
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
	return &poolLBConfig{watch: c.Watch, latencyConn: c.LatencyConn, child: child}, nil
}

// poolBalancer is grpc_gcp with every channel's state changes observed first, and its
// channels' connections rotated before the server ends them (rotate.go).
type poolBalancer struct {
	child balancer.Balancer
	cc    balancer.ClientConn // gRPC's

	// mu guards the fields below and the guarded fields of every channel and conn. gRPC
	// serializes a balancer's calls; the rotation timers and grpc_gcp's picker (which creates
	// channels) take it too. It is never held across a call into gRPC or grpc_gcp (grpc_gcp
	// holds its own lock when it calls a channel's methods, so mu comes after grpc_gcp's).
	mu     sync.Mutex
	watch  *Watch
	clock  clock.Clock // the watch's; the real clock without a watch
	states map[balancer.SubConn]connectivity.State
	conns  map[balancer.SubConn]*conn // every gRPC SubConn of a channel, by itself
	lives  lifetimes
	closed bool
	// expired counts the retired connections marked expired and not yet shut down.
	expired int
	// latencyConn: the LB configuration asks for a latency connection; lat is it (nil
	// before the first addresses, and without the watch it is published in).
	latencyConn bool
	lat         *latencyConn

	// pubMu serializes the pickers handed to gRPC and guards published, the last one with
	// its state (republished after a channel changed connection), so that a republished
	// picker never overtakes a newer one of grpc_gcp's. Held across gRPC's UpdateState (which
	// stores the picker and calls no balancer back, as grpc_gcp calls it under its own lock),
	// never across a call into grpc_gcp.
	pubMu     sync.Mutex
	published balancer.State
	// fromChild is grpc_gcp's last state, its picker wrapped; failed is the text of the
	// latest failure of a channel (an attempt, or a young death) since grpc_gcp last
	// published READY, nil if none (failfast.go). Guarded by pubMu.
	fromChild balancer.State
	failed    error
}

func (b *poolBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	if c, ok := s.BalancerConfig.(*poolLBConfig); ok {
		b.mu.Lock()
		if b.watch == nil {
			if w, ok := watches.Load(c.watch); ok {
				b.watch = w.(*Watch)
				b.clock = b.watch.clock
			}
		}
		b.latencyConn = c.latencyConn
		b.mu.Unlock()
		s.BalancerConfig = c.child
	}
	if len(resolvedAddresses(s.ResolverState)) == 0 { // refused by nonEmptyBalancer
		b.mu.Lock()
		w := b.watch
		b.mu.Unlock()
		w.record(KindDNS, errNoAddresses)
	} else {
		b.updateLatencyConn(resolvedAddresses(s.ResolverState))
	}
	return b.child.UpdateClientConnState(s)
}

// ResolverError records a name resolution error that comes after the first resolution (those
// before it reach no balancer: dnsRecorder records them).
func (b *poolBalancer) ResolverError(err error) {
	b.mu.Lock()
	w := b.watch
	b.mu.Unlock()
	w.record(KindDNS, err)
	b.child.ResolverError(err)
}

// UpdateSubConnState is how gRPC reports the state of a SubConn created without a
// StateListener, as grpc_gcp v1.6.0 creates them. The changes of a channel's current
// connection reach grpc_gcp as the channel's; those of its replacement and of its retired
// connections do not (rotate.go).
func (b *poolBalancer) UpdateSubConnState(sc balancer.SubConn, s balancer.SubConnState) {
	b.subConnState(sc, s)
}

// subConnState applies a state change of one of the pool's SubConns, reported by gRPC on its
// serializer: through UpdateSubConnState for grpc_gcp's own, through their StateListener for
// the replacements of rotation (prepare).
func (b *poolBalancer) subConnState(sc balancer.SubConn, s balancer.SubConnState) {
	fwd, fs, todo := b.route(sc, s)
	b.observe(sc, s, todo.young != nil)
	todo.run(b)
	if fwd != nil {
		//lint:ignore SA1019 grpc_gcp v1.6.0 creates its SubConns without a StateListener
		b.child.UpdateSubConnState(fwd, fs)
		if _, ok := fwd.(*channel); ok && fs.ConnectivityState == connectivity.TransientFailure {
			b.attemptFailed(fs)
		}
	}
}

// Close stops the rotation timers and closes grpc_gcp's balancer. gRPC shuts the SubConns
// down.
func (b *poolBalancer) Close() {
	b.mu.Lock()
	b.closed = true
	for _, c := range b.conns {
		stopTimer(c)
	}
	lat := b.lat
	b.lat = nil
	if lat != nil {
		stopLatencyTimer(lat)
	}
	b.mu.Unlock()
	if lat != nil {
		lat.sc.Shutdown()
	}
	b.child.Close()
}

func (b *poolBalancer) ExitIdle() { b.child.ExitIdle() }

// observe records a channel's failed connection attempt (TRANSIENT_FAILURE with its error)
// and a ready connection that closed (READY to IDLE: gRPC gives no error then), unless it is
// a connection that rotation retired (rotate.go): the server ending it is the routine end
// rotation waits for, and no error of the pool, or one that died young (young: route records
// a more telling error for it). It runs before grpc_gcp sees the change, so the error is
// recorded before the pool's state moves.
func (b *poolBalancer) observe(sc balancer.SubConn, s balancer.SubConnState, young bool) {
	b.mu.Lock()
	prev := b.states[sc]
	retired := b.conns[sc] != nil && b.conns[sc].role == roleRetired
	if s.ConnectivityState == connectivity.Shutdown {
		delete(b.states, sc)
	} else {
		b.states[sc] = s.ConnectivityState
	}
	w := b.watch
	b.mu.Unlock()
	switch {
	case s.ConnectivityState == connectivity.TransientFailure && s.ConnectionError != nil:
		w.record(ClassifyConnError(s.ConnectionError), s.ConnectionError)
	case prev == connectivity.Ready && s.ConnectivityState == connectivity.Idle && !retired && !young:
		w.record(KindClosed, errConnClosed)
	}
}

// poolClientConn is what grpc_gcp sees as its ClientConn: gRPC's, with its SubConns made
// channels (rotate.go), its pickers wrapped to hand gRPC a channel's current connection, and
// SubConn state listeners (if grpc_gcp sets any) observed first.
type poolClientConn struct {
	balancer.ClientConn
	b *poolBalancer
}

// NewSubConn returns a new channel over a new gRPC SubConn. With a StateListener (grpc_gcp
// v1.6.0 sets none) it returns gRPC's SubConn, whose connections are then not rotated.
func (c *poolClientConn) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	if l := opts.StateListener; l != nil {
		var sc balancer.SubConn
		opts.StateListener = func(s balancer.SubConnState) {
			c.b.observe(sc, s, false)
			l(s)
		}
		var err error
		sc, err = c.ClientConn.NewSubConn(addrs, opts) //lint:ignore SA1019 grpc_gcp's call, passed on
		return sc, err
	}
	sc, err := c.ClientConn.NewSubConn(addrs, opts) //lint:ignore SA1019 grpc_gcp's call, passed on
	if err != nil {
		return nil, err
	}
	// Registered before grpc_gcp can call Connect: gRPC reports no state before that.
	ch := &channel{b: c.b, addrs: addrs, opts: opts}
	cn := &conn{sc: sc, ch: ch, role: roleCurrent, state: connectivity.Idle}
	ch.cur.Store(cn)
	c.b.mu.Lock()
	c.b.conns[sc] = cn
	c.b.mu.Unlock()
	return ch, nil
}

// RemoveSubConn shuts a channel down (gRPC's RemoveSubConn does nothing since grpc-go v1.60:
// grpc_gcp calls it for a SubConn it replaced).
func (c *poolClientConn) RemoveSubConn(sc balancer.SubConn) {
	if ch, ok := sc.(*channel); ok {
		ch.Shutdown()
		return
	}
	sc.Shutdown()
}

// UpdateAddresses updates a channel's addresses.
func (c *poolClientConn) UpdateAddresses(sc balancer.SubConn, addrs []resolver.Address) {
	//lint:ignore SA1019 grpc_gcp's call, passed on
	sc.UpdateAddresses(addrs)
}

// UpdateState hands gRPC grpc_gcp's state with its picker wrapped (poolPicker), or failing
// every pick while the pool is connecting after a failed attempt (failfast.go).
func (c *poolClientConn) UpdateState(s balancer.State) {
	c.b.pubMu.Lock()
	defer c.b.pubMu.Unlock()
	if s.Picker != nil {
		s.Picker = &poolPicker{child: s.Picker}
	}
	if s.ConnectivityState == connectivity.Ready {
		c.b.failed = nil
	}
	c.b.fromChild = s
	c.b.publishLocked()
}

// republish hands gRPC the last state again with a new picker over the same grpc_gcp picker,
// so that the calls waiting for a new picker (gRPC's pick found a connection that is no
// longer ready) pick again.
func (b *poolBalancer) republish() {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	s := b.published
	p, ok := s.Picker.(*poolPicker)
	if !ok {
		return
	}
	s.Picker = &poolPicker{child: p.child}
	b.published = s
	b.cc.UpdateState(s)
}
