package spannerme

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// DialFunc dials one endpoint's channel pool; it is grpcgcp.GCPMultiEndpointOptions.DialFunc.
type DialFunc = func(ctx context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error)

// GCPMultiEndpoint is a gRPC client connection over several named MultiEndpoints (groups of
// endpoints in priority order), with one grpcgcp channel pool per unique endpoint shared by
// every group that lists it. Each call goes to the current endpoint of the group named in its
// context (NewMEContext), else of the default group. It implements grpc.ClientConnInterface.
//
// All methods are safe for concurrent use. Invoke and NewStream take no lock; the routing
// pick, the recording of a successful call's outcome (HealthSettings) and the metrics
// allocate nothing, and NewStream adds two small allocations per stream (about 250 bytes in
// all: a wrapper and the callback through which gRPC reports a cancelled stream's end, to
// count the stream as in flight until it ends and see its outcome). UpdateMultiEndpoints and
// Close are serialized with each other.
//
// The zero value is a closed GCPMultiEndpoint: Status reports Closed, Close returns nil,
// calls fail with CANCELED and UpdateMultiEndpoints with ErrClosed. Create one with
// NewGCPMultiEndpoint* or NewMultiEndpointClient*.
type GCPMultiEndpoint struct {
	snap atomic.Pointer[snapshot] // the routing snapshot; nil after Close

	dial      DialFunc
	dialOpts  []grpc.DialOption
	gcpConfig *pb.ApiConfig
	gcpJSON   []byte // gcpConfig as the grpc_gcp balancer's configuration
	settings  Settings
	log       *slog.Logger
	obs       *observer // logs of transitions, metrics, switch history
	// endpointOpts (Settings.EndpointOptions) and dialedOpts (the options each configured
	// endpoint's pool was dialed with) are read and written only under updateMu.
	endpointOpts, dialedOpts endpointOptions
	// configStatus is the configuration file's status, set by a ConfigWatcher; nil without.
	configStatus atomic.Pointer[ConfigStatus]

	unknown sync.Map // group name (string) -> *atomic.Int64: calls that named an unknown group
	// unknownMu serializes the first call of each unknown name, so that exactly
	// maxUnknownNames names are kept; unknownNames is written under it, read without it.
	unknownMu    sync.Mutex
	unknownNames atomic.Int64 // distinct names in unknown, at most maxUnknownNames
	events       *eventQueue
	waiting      atomic.Int64 // calls waiting in pickConnected
	changed      *broadcast   // signalled when a pool's state or a group's current endpoint changes

	// waitForReadyDefault: the dial options make grpc.WaitForReady(true) a default call
	// option (grpc.WithDefaultCallOptions); read once at construction.
	waitForReadyDefault bool
	// lazyStreams: the pools have grpcgcp's stream interceptor, which creates the gRPC stream
	// on the first SendMsg, so a stream abandoned before that is never reported ended by
	// gRPC; set at construction.
	lazyStreams bool

	// updateMu serializes UpdateMultiEndpoints and Close. It is held across the dials of an
	// update: reconfigurations are sequential by design. Nothing else waits on it: calls read
	// the snapshot, Status and the pool goroutines take only mu.
	updateMu sync.Mutex
	// dialCtx is given to every dial; Close cancels it before it waits for updateMu, so that a
	// DialFunc that honours its context cannot hold Close.
	dialCtx    context.Context
	cancelDial context.CancelFunc
	stop       chan struct{}  // closed by Close: stops monitors and drains
	wg         sync.WaitGroup // monitor and drain goroutines; Add only under updateMu

	mu      sync.Mutex // guards the fields below; never held across a dial, gRPC call or callback
	closed  bool
	groups  map[string]*multiendpoint.MultiEndpoint
	pools   map[string]*pool // the pools of the configured endpoints
	retired map[*pool]bool   // draining pools, until closed
	// front is the connection given to the Spanner client (NewMultiEndpointClient*), closed
	// with gme.
	front     *grpc.ClientConn
	closeDone chan struct{} // closed when the first Close has finished
	// closedAt and lastDefault are when Close was called and the default group's name
	// then, for Status after Close.
	closedAt    time.Time
	lastDefault string
}

// snapshot is an immutable routing table. The call path loads it with one atomic read.
type snapshot struct {
	defaultName string
	def         *multiendpoint.MultiEndpoint
	groups      map[string]*multiendpoint.MultiEndpoint
	pools       map[string]*pool
}

var _ grpc.ClientConnInterface = (*GCPMultiEndpoint)(nil)

// NewGCPMultiEndpoint validates gmeCfg, dials one channel pool per unique endpoint with opts,
// and returns the GCPMultiEndpoint. It is NewGCPMultiEndpointWithSettings with zero Settings.
func NewGCPMultiEndpoint(gmeCfg *grpcgcp.GCPMultiEndpointOptions, opts ...grpc.DialOption) (*GCPMultiEndpoint, error) {
	return NewGCPMultiEndpointWithSettings(gmeCfg, Settings{}, opts...)
}

// NewGCPMultiEndpointWithSettings is NewGCPMultiEndpoint with Settings beyond upstream's.
//
// gmeCfg is not modified and not retained. GRPCgcpConfig may be nil; its channel pool is
// sized by the rule of DefaultPoolSize (MinSize 4 connected, growing up to 10 under load).
// DialFunc, if set, dials each pool (it receives the endpoint and the dial options);
// otherwise grpc.NewClient does. opts come after this package's dial options (grpc_gcp
// balancer, reconnect backoff, keepalive, no channel idleness), so they win; a resolver in
// opts (grpc.WithResolvers, for the dns scheme too) is used. A grpc.WaitForReady(true) among
// the default call options of opts (grpc.WithDefaultCallOptions) applies to every call as if
// the call gave it (see Invoke); default call options that only a DialFunc adds are not seen.
//
// Each pool tracks its calls' outcomes and probes its endpoint (settings.Health, with
// UnimplementedMethodProbe unless settings.Health.Probe is set): an endpoint whose calls fail
// or stall is ejected, not available to any group, until a probe readmits it.
//
// Errors: a *ConfigError wrapping ErrInvalidConfig, naming the group and endpoint, for any
// invalid configuration, or naming the field of an invalid Settings (settings.Health
// included); the dial error, naming the endpoint, if a pool cannot be dialed. On error every
// pool dialed so far is closed.
func NewGCPMultiEndpointWithSettings(gmeCfg *grpcgcp.GCPMultiEndpointOptions, settings Settings, opts ...grpc.DialOption) (*GCPMultiEndpoint, error) {
	cfg, err := parseConfig(gmeCfg)
	if err != nil {
		return nil, err
	}
	if err := settings.validate(); err != nil {
		return nil, err
	}
	endpointOpts, err := parseEndpointOptions(settings.EndpointOptions)
	if err != nil {
		return nil, err
	}
	settings = settings.withDefaults()
	cfg.collapseTo(settings.emulator)
	apiCfg := effectiveAPIConfig(gmeCfg.GRPCgcpConfig, 0, 0)
	gcpJSON, err := grpcgcpConfigJSON(apiCfg)
	if err != nil {
		return nil, err
	}
	// Each pool also gets its own service config, placed before these, and, when this
	// package dials it, the DNS error recorder, placed after the caller's options
	// (poolDialOptions).
	dopts := []grpc.DialOption{
		grpc.WithDisableServiceConfig(),
		grpc.WithConnectParams(grpc.ConnectParams{
			// gRPC waits BaseDelay before the first retry whatever MaxDelay says.
			Backoff: backoff.Config{BaseDelay: min(backoff.DefaultConfig.BaseDelay, settings.ReconnectMaxDelay),
				Multiplier: backoff.DefaultConfig.Multiplier, Jitter: backoff.DefaultConfig.Jitter, MaxDelay: settings.ReconnectMaxDelay},
			MinConnectTimeout: settings.MinConnectTimeout,
		}),
		grpc.WithIdleTimeout(0), // a standby gets no calls, yet must stay connected
	}
	lazyStreams := len(apiCfg.Method) > 0
	if lazyStreams {
		// grpcgcp's interceptors hand the request and reply to its picker, which reads them
		// only for methods with an affinity; without any they cost a stream wrapper, a
		// context and a condition variable per call, for nothing.
		dopts = append(dopts,
			grpc.WithChainUnaryInterceptor(grpcgcp.GCPUnaryClientInterceptor),
			grpc.WithChainStreamInterceptor(grpcgcp.GCPStreamClientInterceptor))
	}
	if settings.KeepaliveTime > 0 {
		dopts = append(dopts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: settings.KeepaliveTime, Timeout: settings.KeepaliveTimeout, PermitWithoutStream: settings.KeepaliveWithoutCalls}))
	}
	gme := &GCPMultiEndpoint{
		dial:      gmeCfg.DialFunc,
		dialOpts:  append(dopts, opts...),
		gcpConfig: apiCfg,
		gcpJSON:   gcpJSON,
		settings:  settings,
		log:       settings.Logger,
		groups:    make(map[string]*multiendpoint.MultiEndpoint),
		pools:     make(map[string]*pool),
		retired:   make(map[*pool]bool),
		stop:      make(chan struct{}),
		events:    newEventQueue(settings.Logger, settings.OnSwitch, settings.OnHealth),
		changed:   newBroadcast(),

		lazyStreams: lazyStreams,
	}
	gme.obs = newObserver(settings.Logger, settings.clock, newMetrics(settings.MeterProvider))
	gme.waitForReadyDefault = waitForReady(waitForReady(false, settings.callDefaults), defaultCallOptions(gme.dialOpts))
	gme.endpointOpts = endpointOpts
	gme.dialCtx, gme.cancelDial = context.WithCancel(context.Background())
	if gme.dial == nil {
		gme.settings.ownDialer = true
		gme.dial = func(_ context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
			return grpc.NewClient(target, opts...)
		}
	}
	gme.updateMu.Lock()
	defer gme.updateMu.Unlock()
	if err := gme.apply(cfg); err != nil {
		gme.events.close()
		gme.obs.close()
		gme.cancelDial()
		return nil, err
	}
	gme.obs.metrics.observe(settings.MeterProvider, gme)
	return gme, nil
}

// Invoke performs a unary call on the current endpoint of the call's group. While that
// endpoint's pool is connecting, the call waits (until it connects, fails, or the group
// switches) instead of queuing in gRPC; so does a call that waits for ready
// (grpc.WaitForReady(true), per call or as a default call option) while the pool has
// failed. Errors: the call's own; CANCELED after Close (and on a zero-value
// GCPMultiEndpoint); UNAVAILABLE when reconfigurations kept retiring the picked pool (rare;
// retryable); the context's error, as a gRPC status, if it ends while the call waits. A call
// sent to an endpoint is measured (metrics) and, when ctx carries a recording span, the span
// gets the group and the endpoint as attributes.
func (gme *GCPMultiEndpoint) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	p, me, err := gme.pickConnected(ctx, opts)
	if err != nil {
		return err
	}
	defer p.release()
	cs := gme.obs.callBegin(ctx, p, me)
	err = p.conn.Invoke(ctx, method, args, reply, opts...)
	p.observe(err, false)
	gme.obs.callEnd(ctx, p, me.Name(), cs, err)
	return err
}

// NewStream starts a streaming call on the current endpoint of the call's group, picked as
// for Invoke, with the same errors. The call counts as in flight on that endpoint until the
// stream ends (RecvMsg returns an error or io.EOF, SendMsg returns an error other than io.EOF,
// a call without server streaming has its response, or ctx is done), so removing the
// endpoint does not cut it. As with any gRPC stream, a caller that stops reading early must
// cancel ctx. gRPC reports that cancellation through a grpc.OnFinish call option: a stream
// interceptor among the caller's dial options that does not pass the call options on to gRPC
// hides it, and a stream abandoned that way then counts as in flight until its endpoint's
// pool is closed (Settings.DrainTimeout after the endpoint is removed).
func (gme *GCPMultiEndpoint) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return gme.newStream(ctx, desc, method, "", opts)
}

// newStream is NewStream for a call that carries the Spanner client's request ID id ("" for
// none; the header is already in ctx), which is added to the stream's errors.
func (gme *GCPMultiEndpoint) newStream(ctx context.Context, desc *grpc.StreamDesc, method, id string, opts []grpc.CallOption) (grpc.ClientStream, error) {
	p, me, err := gme.pickConnected(ctx, opts)
	if err != nil {
		return nil, withRequestID(err, id)
	}
	s := &trackedStream{ctx: ctx, pool: p, serverStreams: desc.ServerStreams, requestID: id, obs: gme.obs, group: me.Name()}
	s.start = gme.obs.callBegin(ctx, p, me)
	if gme.lazyStreams {
		s.watchContext()
	}
	cs, err := p.conn.NewStream(ctx, desc, method, s.callOptions(opts)...)
	if err != nil {
		if status.Code(err) != codes.DeadlineExceeded {
			// A deadline that passes here passed before the stream existed (gRPC held it
			// for a free HTTP/2 stream of a busy pool, or it was already over): it says
			// nothing about the endpoint.
			p.observe(err, false)
		}
		s.finish(err)
		return nil, withRequestID(err, id)
	}
	s.ClientStream = cs
	return s, nil
}

// errClosedCall is returned to calls made after Close, with the code gRPC uses for a call on a
// closed ClientConn.
var errClosedCall = status.Error(codes.Canceled, ErrClosed.Error())

// pickConnected returns the acquired pool of the current endpoint of ctx's group, once that
// pool is not connecting. A pool that is connecting (CONNECTING or IDLE) does not take the
// call: gRPC would hold it until the connection attempt ends, up to MinConnectTimeout, even
// after the group has failed over (an endpoint that accepts TCP and never answers, F3). The
// call waits here instead, holding nothing, until a pool's state or a group's current
// endpoint changes, and picks again. READY pools take it at once; so do pools in
// TRANSIENT_FAILURE, where gRPC fails it fast with UNAVAILABLE for the Spanner client to
// retry; unless the call waits for ready (grpc.WaitForReady(true), given by the call or as a
// default call option of the dial options), which gRPC would hold in that pool. It also
// returns the group that picked the pool. Errors: those of pick, and the context's (as a
// gRPC status) while waiting.
func (gme *GCPMultiEndpoint) pickConnected(ctx context.Context, opts []grpc.CallOption) (*pool, *multiendpoint.MultiEndpoint, error) {
	if gme.changed == nil {
		return nil, nil, errClosedCall // a zero-value GCPMultiEndpoint
	}
	count := true
	for {
		changed := gme.changed.wait() // before the pick: no news between them is lost
		p, me, err := gme.pick(ctx, count)
		if err != nil {
			return nil, nil, err
		}
		switch connectivity.State(p.state.Load()) {
		case connectivity.Connecting, connectivity.Idle:
		case connectivity.TransientFailure:
			if !waitForReady(gme.waitForReadyDefault, opts) {
				return p, me, nil // gRPC fails it fast, for the Spanner client to retry
			}
			// gRPC would hold it in this pool even after the group fails over.
		default:
			return p, me, nil
		}
		p.release()
		count = false
		gme.waiting.Add(1)
		select {
		case <-changed:
			gme.waiting.Add(-1)
		case <-ctx.Done():
			gme.waiting.Add(-1)
			return nil, nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// waitForReady reports whether a call with the call options opts asks gRPC to wait for a
// ready connection (grpc.WaitForReady(true)), given whether the dial options make it the
// default (def). As in gRPC, the call's own options come after the defaults, and the last
// one given wins.
func waitForReady(def bool, opts []grpc.CallOption) bool {
	wait := def
	for _, o := range opts {
		if f, ok := o.(grpc.FailFastCallOption); ok {
			wait = !f.FailFast
		}
	}
	return wait
}

// pick returns the acquired pool of the current endpoint of ctx's group, and the group. A
// pool retired between the snapshot load and the acquire makes it retry on the newer
// snapshot. count says whether a call naming an unknown group is counted. The name "" is
// the default group's, as no name is.
func (gme *GCPMultiEndpoint) pick(ctx context.Context, count bool) (*pool, *multiendpoint.MultiEndpoint, error) {
	name, named := FromMEContext(ctx)
	named = named && name != ""
	for range 4 {
		s := gme.snap.Load()
		if s == nil {
			return nil, nil, errClosedCall
		}
		me := s.def
		if named && name != s.defaultName {
			if g, ok := s.groups[name]; ok {
				me = g
			} else if count {
				gme.noteUnknown(name)
				count = false
			}
		}
		if p := s.pools[me.Current()]; p != nil && p.acquire() {
			return p, me, nil
		}
	}
	// Only a reconfiguration racing this call on every attempt gets here.
	return nil, nil, status.Error(codes.Unavailable, "spannerme: endpoint reconfigured during the call; retry")
}

// maxUnknownNames bounds how many distinct unknown group names are remembered; calls naming
// further ones are counted under otherUnknownNames.
const (
	maxUnknownNames   = 64
	otherUnknownNames = "(other unknown names)"
)

// noteUnknown counts a call that named a group that is not configured, logging the name once.
// The first maxUnknownNames distinct names are kept, however many first calls race; only the
// first call of each of them takes unknownMu.
func (gme *GCPMultiEndpoint) noteUnknown(name string) {
	if c, ok := gme.unknown.Load(name); ok {
		c.(*atomic.Int64).Add(1)
		return
	}
	c, fresh := gme.unknownCounter(name)
	c.Add(1)
	if fresh {
		gme.log.Warn("spannerme: call names an unknown MultiEndpoint; it uses the default one (logged once per name)",
			"multiendpoint", name, "default", gme.snap.Load().defaultNameOrEmpty())
	}
}

// unknownCounter returns the counter of an unknown name that is not stored yet: its own,
// stored now if fewer than maxUnknownNames names are kept (fresh), else the shared one.
func (gme *GCPMultiEndpoint) unknownCounter(name string) (c *atomic.Int64, fresh bool) {
	other := func() *atomic.Int64 {
		c, _ := gme.unknown.LoadOrStore(otherUnknownNames, new(atomic.Int64))
		return c.(*atomic.Int64)
	}
	if gme.unknownNames.Load() >= maxUnknownNames { // full: never again a lock
		// A name is stored before it is counted, so every kept name is visible now, this
		// one included if a racing first call stored it since the caller looked.
		if v, ok := gme.unknown.Load(name); ok {
			return v.(*atomic.Int64), false
		}
		return other(), false
	}
	gme.unknownMu.Lock()
	defer gme.unknownMu.Unlock()
	if v, ok := gme.unknown.Load(name); ok { // stored by a racing first call
		return v.(*atomic.Int64), false
	}
	if gme.unknownNames.Load() >= maxUnknownNames {
		return other(), false
	}
	c = new(atomic.Int64)
	gme.unknown.Store(name, c)
	gme.unknownNames.Add(1)
	return c, true
}

func (s *snapshot) defaultNameOrEmpty() string {
	if s == nil {
		return ""
	}
	return s.defaultName
}

// UpdateMultiEndpoints applies a new configuration while calls flow. It returns once new
// pools are dialed (dials do not wait for connections) and the new routing is in force;
// concurrent calls to it, and Close, wait for it. Groups are matched by
// name: new ones are created, missing ones removed, kept ones get the new endpoint list,
// RecoveryTimeout and SwitchingDelay (their endpoints' states are kept). Endpoints are
// matched by address: a new one gets a new pool; one no group lists any more is retired: it
// takes no new calls, its in-flight calls (unary and streaming) finish, and it is closed when
// they are done or after Settings.DrainTimeout. GRPCgcpConfig and DialFunc of meOpts are
// ignored: pools keep the configuration they were dialed with.
//
// The whole configuration is validated and every new pool dialed before anything changes: on
// error nothing changes and the new pools are closed. Errors: a *ConfigError wrapping
// ErrInvalidConfig; a dial error naming the endpoint; ErrClosed after Close (and on a
// zero-value GCPMultiEndpoint).
func (gme *GCPMultiEndpoint) UpdateMultiEndpoints(meOpts *grpcgcp.GCPMultiEndpointOptions) error {
	if gme.stop == nil {
		return ErrClosed // a zero-value GCPMultiEndpoint
	}
	cfg, err := parseConfig(meOpts)
	if err != nil {
		return err
	}
	cfg.collapseTo(gme.settings.emulator)
	gme.updateMu.Lock()
	defer gme.updateMu.Unlock()
	return gme.apply(cfg)
}

// apply moves to cfg: dial, create groups, publish, update groups, publish, retire.
// gme.updateMu must be held; gme.mu is taken only to read and write the maps, never across a
// dial or a state-machine call. Calls keep flowing on the published snapshot meanwhile.
func (gme *GCPMultiEndpoint) apply(cfg *config) error {
	gme.mu.Lock()
	if gme.closed || gme.stop == nil { // closed, or a zero-value GCPMultiEndpoint
		gme.mu.Unlock()
		return ErrClosed
	}
	oldPools, oldGroups := gme.pools, gme.groups // replaced, never mutated, under updateMu
	gme.mu.Unlock()

	// 1. Dial new pools. Nothing is visible yet.
	want := cfg.endpoints()
	fresh := make(map[string]*pool)
	closeFresh := func() {
		for _, p := range fresh {
			p.close()
		}
	}
	for _, g := range cfg.groups {
		for i, e := range g.endpoints {
			if oldPools[e] != nil || fresh[e] != nil {
				continue
			}
			w := newConnWatch(e, gme.obs.now, gme.obs.connError)
			conn, err := gme.dial(gme.dialCtx, e, gme.poolDialOptions(w, gme.dialOptionsFor(e))...)
			if err == nil && conn == nil {
				err = errors.New("DialFunc returned no connection and no error")
			}
			if err != nil {
				w.release()
				closeFresh()
				return fmt.Errorf("spannerme: group %q: endpoint %d %q: dial: %w", g.name, i, e, err)
			}
			fresh[e] = newPool(e, conn)
			fresh[e].watch = w
			gme.startHealth(fresh[e])
		}
	}
	// 2. Create new groups. An endpoint whose pool is already READY starts Available (F2);
	// a fresh pool has not connected yet.
	// The closure stays with the group for its later SetEndpoints, so it reads the snapshot
	// in force when it is called, never a map captured now (a re-added endpoint has a fresh
	// pool, not the retired one).
	initial := func(e string) multiendpoint.State {
		var p *pool
		if s := gme.snap.Load(); s != nil {
			p = s.pools[e]
		}
		return initialState(p)
	}
	created := make(map[string]*multiendpoint.MultiEndpoint)
	for _, g := range cfg.groups {
		if oldGroups[g.name] != nil {
			continue
		}
		me, err := multiendpoint.New(multiendpoint.Options{
			Name: g.name, Endpoints: g.endpoints, RecoveryTimeout: g.recoveryTimeout, SwitchingDelay: g.switchingDelay,
			InitialState: initial, OnSwitch: gme.onSwitch, Clock: gme.settings.clock,
			SwitchingJitter: gme.settings.SwitchingJitter,
			// With RecoveryTimeout 0, a first connection attempt gets as long as gRPC gives it.
			ConnectGrace: gme.settings.MinConnectTimeout,
		})
		if err != nil { // unreachable after parseConfig; never leave a half-applied update
			for _, me := range created {
				me.Close()
			}
			closeFresh()
			return err
		}
		created[g.name] = me
	}
	// 3. Publish the new groups over the union of old and new pools, then update kept groups:
	// a call that read the old snapshot and sees a new current endpoint retries on this one.
	union := make(map[string]*pool, len(oldPools)+len(fresh))
	for e, p := range oldPools {
		union[e] = p
	}
	for e, p := range fresh {
		union[e] = p
	}
	groups := make(map[string]*multiendpoint.MultiEndpoint, len(cfg.groups))
	for _, g := range cfg.groups {
		if me := oldGroups[g.name]; me != nil {
			groups[g.name] = me
		} else {
			groups[g.name] = created[g.name]
		}
	}
	gme.snap.Store(&snapshot{defaultName: cfg.defaultName, def: groups[cfg.defaultName], groups: groups, pools: union})
	for _, g := range cfg.groups {
		if me := oldGroups[g.name]; me != nil {
			// Validated by parseConfig; it fails only after the group's Close, which only
			// Close and this function call, under updateMu.
			_ = me.Reconfigure(g.endpoints, g.recoveryTimeout, g.switchingDelay)
		}
	}
	// 4. Publish the final snapshot: only configured endpoints.
	pools := make(map[string]*pool, len(want))
	for e := range want {
		pools[e] = union[e]
	}
	gme.snap.Store(&snapshot{defaultName: cfg.defaultName, def: groups[cfg.defaultName], groups: groups, pools: pools})
	gme.changed.signal()
	// 5. Start monitoring the new pools; sync every group with every pool's availability
	// (an endpoint already READY that a group starts listing is Available at once).
	for _, p := range fresh {
		ctx, cancel := context.WithCancel(context.Background())
		p.stopMonitor = cancel
		gme.wg.Add(1)
		go func() {
			defer gme.wg.Done()
			p.monitor(ctx, func(p *pool) {
				gme.publish(p)
				gme.obs.poolAvailability(p)
			}, func() {
				p.watch.stateChanged()
				gme.changed.signal()
			})
		}()
	}
	for _, p := range pools {
		gme.publish(p)
	}
	// 6. Retire what is gone.
	var gone []*pool
	gme.noteDialed(fresh, want)
	gme.mu.Lock()
	gme.groups, gme.pools = groups, pools
	for e, p := range oldPools {
		if !want[e] {
			gme.retired[p] = true
			gone = append(gone, p)
		}
	}
	gme.mu.Unlock()
	for name, me := range oldGroups {
		if groups[name] == nil {
			me.Close()
		}
	}
	gme.obs.history.retain(func(name string) bool { return groups[name] != nil })
	for _, p := range gone {
		gme.retire(p)
	}
	return nil
}

// publish tells every group of the current snapshot the pool's availability, if the pool is
// still the one serving its endpoint. Reports of one pool are serialized and each reads the
// availability under the lock; since every change of it is followed by a publish, the last
// report always carries the latest value.
func (gme *GCPMultiEndpoint) publish(p *pool) {
	p.publishMu.Lock()
	defer p.publishMu.Unlock()
	ready := p.available() // connected and not ejected
	s := gme.snap.Load()
	if s == nil || s.pools[p.endpoint] != p {
		return // closed, or a retired pool: its news concern nobody
	}
	if !ready && !p.settled.Load() {
		return // its first attempt is under way: nothing is known yet (rule 1)
	}
	for _, me := range s.groups {
		me.SetEndpointAvailability(p.endpoint, ready)
	}
}

// onSwitch receives every group's switch events, synchronously: waiting calls pick again,
// the observer counts and remembers the event, and it is queued for the logger and
// Settings.OnSwitch.
func (gme *GCPMultiEndpoint) onSwitch(me multiendpoint.Event) {
	ev := switchEventOf(me)
	gme.changed.signal()
	gme.obs.switched(ev)
	gme.events.push(ev)
}

// retire stops new calls on p and closes it once drained. gme.updateMu must be held (it
// starts a goroutine counted by gme.wg).
func (gme *GCPMultiEndpoint) retire(p *pool) {
	p.retire()
	p.haltHealth() // the drain goroutine's close waits for the probes, not the update
	gme.wg.Add(1)
	go func() {
		defer gme.wg.Done()
		if p.drainThenClose(gme.settings.DrainTimeout, gme.stop) {
			gme.log.Warn("spannerme: retired endpoint's pool closed with calls still in flight after the drain timeout",
				"endpoint", p.endpoint, "in_flight", p.inFlight(), "drain_timeout", gme.settings.DrainTimeout)
		}
		gme.mu.Lock()
		delete(gme.retired, p)
		gme.mu.Unlock()
	}()
}

// GCPConfig returns a copy of the grpcgcp configuration every pool was dialed with, pool size
// included; nil for a zero-value GCPMultiEndpoint.
func (gme *GCPMultiEndpoint) GCPConfig() *pb.ApiConfig {
	if gme.gcpConfig == nil {
		return nil
	}
	return proto.Clone(gme.gcpConfig).(*pb.ApiConfig)
}

// Close stops every group's timers and every pool's monitor, closes every pool (calls in
// flight end with codes.Canceled, as on a closed grpc.ClientConn), and waits for its
// goroutines, except that an OnSwitch or OnHealth call already running may still be
// finishing (and an ejection or readmission being reported: it is then neither logged nor
// delivered). Later calls fail with codes.Canceled. For a GCPMultiEndpoint made by
// NewMultiEndpointClient*, Close also closes the connection the Spanner client uses. Close is
// idempotent; it returns the first errors from closing the pools. On a zero-value
// GCPMultiEndpoint it does nothing and returns nil.
func (gme *GCPMultiEndpoint) Close() error {
	gme.mu.Lock()
	if gme.closed {
		done := gme.closeDone
		gme.mu.Unlock()
		<-done // Close returns only once everything is closed
		return nil
	}
	gme.closed = true
	gme.closeDone = make(chan struct{})
	defer close(gme.closeDone)
	if gme.stop == nil { // a zero-value GCPMultiEndpoint: nothing to close
		gme.mu.Unlock()
		return nil
	}
	gme.closedAt = gme.obs.now()
	gme.lastDefault = gme.snap.Load().defaultNameOrEmpty()
	gme.mu.Unlock()
	gme.cancelDial()

	gme.updateMu.Lock() // waits for an update in progress; later ones see closed
	defer gme.updateMu.Unlock()
	gme.snap.Store(nil)
	gme.changed.signal() // waiting calls see the closed snapshot
	close(gme.stop)
	gme.mu.Lock()
	groups, pools, front := gme.groups, gme.pools, gme.front
	gme.mu.Unlock()
	for _, me := range groups {
		me.Close()
	}
	gme.events.close()
	var errs []error
	for _, p := range pools {
		if err := p.close(); err != nil {
			errs = append(errs, fmt.Errorf("endpoint %q: %w", p.endpoint, err))
		}
	}
	gme.wg.Wait() // drains see stop and close their pools
	gme.obs.close()
	if front != nil {
		front.Close() // the Spanner client may have closed it already
	}
	return errors.Join(errs...)
}
