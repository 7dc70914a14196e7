package pool

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// A pool's latency connection: the latency probes (latency.go) of a pool dialed with
// latencyConn (DialOptions) go on a connection of their own to the endpoint, never on the
// channels that carry the calls.
//
// Why: a probe on the calls' channels takes one of their streams for as long as the endpoint
// takes to answer. Once the calls fill every stream of every channel (grpcgcp's pool at
// MaxSize, each connection at the server's limit of concurrent streams), grpcgcp still sends
// each call to its least busy channel, so one call waits, on a full connection, for a stream
// that a call ends: up to a whole latency of the endpoint, once per probe. Through a
// 100-stream frontend adding 1 s, 1,000 concurrent queries on 10 channels took two seconds
// per wave instead of one (BenchmarkClient_Frontend, latency=1s/C=1000). On a connection of
// its own a probe waits for no call and no call waits for it, and every endpoint's probe
// measures the same thing: the endpoint's answer on an otherwise idle connection.
//
// How: the pool's balancer creates the connection (a gRPC SubConn with the channels'
// addresses, which grpc_gcp does not see) on gRPC's balancer serializer when it gets the
// first addresses, replaces it when they change, reconnects it whenever the server ends it
// (IDLE), and shuts it down when it closes. While it is READY, the pool's Watch holds a
// grpc.ClientConnInterface that opens streams on it directly (a SubConn's producer
// interface: no picker, no interceptor; the dial options' transport credentials and
// per-RPC credentials apply, as they are the transport's). A probe sent while it is not
// READY (connecting, or a caller's dial option replaced the pool's policy) goes on the
// channels, as before. It costs one more connection per endpoint while brownout detection
// is on.

// latencyConn is a pool balancer's latency connection. sc is set once; the other fields are
// guarded by the balancer's mu.
type latencyConn struct {
	sc      balancer.SubConn
	addrs   []resolver.Address
	release func() // drops the producer reference taken when it became READY; nil if none
	// Guarded by the poolBalancer's mu: its last state, when it last became READY (on the
	// youth clock), and the timer that connects it again after it died young (young.go),
	// with its generation.
	state   connectivity.State
	readyAt time.Time
	timer   clock.Timer
	gen     uint64
}

// connProducer hands out the grpc.ClientConnInterface gRPC builds a SubConn's producers with,
// which opens streams on that SubConn only.
type connProducer struct{ cc grpc.ClientConnInterface }

type connProducerBuilder struct{}

func (connProducerBuilder) Build(cc any) (balancer.Producer, func()) {
	c, _ := cc.(grpc.ClientConnInterface)
	return &connProducer{cc: c}, func() {}
}

// updateLatencyConn creates the latency connection over addrs, or replaces it when addrs
// differ from its own, when the configuration asks for one and the watch exists. Called
// from UpdateClientConnState, on gRPC's serializer.
func (b *poolBalancer) updateLatencyConn(addrs []resolver.Address) {
	b.mu.Lock()
	old := b.lat
	if !b.latencyConn || b.watch == nil || b.closed || (old != nil && slices.EqualFunc(old.addrs, addrs, resolver.Address.Equal)) {
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	lc := &latencyConn{addrs: addrs}
	//lint:ignore SA1019 the addresses of grpc_gcp's channels, which it passes to NewSubConn as they are
	sc, err := b.cc.NewSubConn(addrs, balancer.NewSubConnOptions{
		StateListener: func(s balancer.SubConnState) { b.latencyConnState(lc, s) },
	})
	if err != nil {
		return // gRPC is closing the balancer
	}
	lc.sc = sc
	b.mu.Lock()
	b.lat = lc
	b.mu.Unlock()
	if old != nil {
		old.sc.Shutdown() // its listener clears the watch's connection
	}
	sc.Connect()
}

// latencyConnState follows the latency connection lc: READY publishes its stream interface
// in the watch, any other state withdraws it, and IDLE (the server ended it) reconnects it.
// Called by gRPC on its serializer.
func (b *poolBalancer) latencyConnState(lc *latencyConn, s balancer.SubConnState) {
	b.mu.Lock()
	w, current := b.watch, b.lat == lc
	release := lc.release
	lc.release = nil
	yc := clock.Clock(clock.Real) // the youth clock (young.go)
	if w != nil {
		yc = w.youthClock
	}
	now := yc.Now()
	prev := lc.state
	lc.state = s.ConnectivityState
	var wait time.Duration
	switch s.ConnectivityState {
	case connectivity.Ready:
		lc.readyAt = now
		b.lives.ready() // the endpoint accepts connections: its lifetimes are no outage's
	case connectivity.Idle:
		if wait = b.latencyEndedLocked(lc, prev, now); wait > 0 && current {
			stopLatencyTimer(lc)
			gen := lc.gen
			lc.timer = yc.AfterFunc(wait, func() { b.reconnectLatency(lc, gen) })
		}
	case connectivity.Shutdown:
		stopLatencyTimer(lc)
	}
	b.mu.Unlock()
	if release != nil {
		release()
	}
	if s.ConnectivityState == connectivity.Ready && current {
		pr, rel := lc.sc.GetOrBuildProducer(connProducerBuilder{})
		b.mu.Lock()
		lc.release = rel
		b.mu.Unlock()
		if cp, ok := pr.(*connProducer); ok && cp.cc != nil {
			w.setLatencyConn(lc, cp.cc)
		}
		return
	}
	w.clearLatencyConn(lc)
	if s.ConnectivityState == connectivity.Idle && current && wait == 0 {
		lc.sc.Connect()
	}
}

// reconnectLatency connects lc again at the end of its young-death wait, if it is still the
// pool's latency connection and the timer is of generation gen.
func (b *poolBalancer) reconnectLatency(lc *latencyConn, gen uint64) {
	b.mu.Lock()
	ok := lc.gen == gen && !b.closed && b.lat == lc
	if ok {
		lc.timer = nil
	}
	b.mu.Unlock()
	if ok {
		lc.sc.Connect()
	}
}

// latencyConnRef is what a Watch holds of its pool's latency connection while it is READY.
type latencyConnRef struct {
	of *latencyConn
	cc grpc.ClientConnInterface
}

// setLatencyConn publishes cc, the stream interface of lc, which is READY.
func (w *Watch) setLatencyConn(lc *latencyConn, cc grpc.ClientConnInterface) {
	w.latency.Store(&latencyConnRef{of: lc, cc: cc})
}

// clearLatencyConn withdraws lc's stream interface, if it is the one published.
func (w *Watch) clearLatencyConn(lc *latencyConn) {
	if r := w.latency.Load(); r != nil && r.of == lc {
		w.latency.CompareAndSwap(r, nil)
	}
}

// latencyConnOf returns the stream interface of w's latency connection while it is READY;
// nil otherwise, and for a nil w.
func (w *Watch) latencyConnOf() grpc.ClientConnInterface {
	if w == nil {
		return nil
	}
	if r := w.latency.Load(); r != nil {
		return r.cc
	}
	return nil
}

// latencyRoute is the connection latency probes are sent through: the pool's latency
// connection while it is READY, the pool's channels otherwise (and when the latency
// connection refuses the stream: it left READY meanwhile; nothing was sent).
type latencyRoute struct {
	w     *Watch
	calls grpc.ClientConnInterface
}

func (r latencyRoute) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return invokeAsStream(ctx, r, method, args, reply, opts...)
}

func (r latencyRoute) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if cc := r.w.latencyConnOf(); cc != nil {
		if cs, err := cc.NewStream(ctx, desc, method, opts...); err == nil || ctx.Err() != nil {
			return cs, err
		}
	}
	return r.calls.NewStream(ctx, desc, method, opts...)
}
