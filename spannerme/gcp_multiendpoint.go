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
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/front"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
)

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
// NewGCPMultiEndpoint*, NewMultiEndpointClient*, or NewGCPMultiEndpointForSpanner for Spanner
// clients that share it (NewClient, Configurator).
type GCPMultiEndpoint struct {
	// mechanisms are the routing snapshot and the mechanisms that calls and pools reach
	// (mechanisms.go).
	mechanisms

	dial      DialFunc
	dialOpts  []grpc.DialOption
	gcpConfig *pb.ApiConfig
	gcpJSON   []byte // gcpConfig as the grpc_gcp balancer's configuration
	settings  Settings
	pl        plumbing
	log       *slog.Logger
	// tierSettings are the validated Settings.Tiers, read and written only under updateMu.
	tierSettings map[string]tierConfig
	// endpointOpts (Settings.EndpointOptions) and dialedOpts (the options each configured
	// endpoint's pool was dialed with) are read and written only under updateMu.
	endpointOpts, dialedOpts endpointOptions
	// directed is the validated Settings.DirectedReads that apply publishes in every
	// snapshot; read and written only under updateMu.
	directed directedReads
	// configStatus is the configuration file's status, set by a ConfigWatcher; nil without.
	configStatus atomic.Pointer[ConfigStatus]

	unknown route.UnknownNames // calls that named an unknown group
	waiting atomic.Int64       // calls waiting in pickConnected

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
	stop       chan struct{}  // closed by Close: stops drains
	wg         sync.WaitGroup // drain goroutines; Add only under updateMu

	mu      sync.Mutex // guards the fields below; never held across a dial, gRPC call or callback
	closed  bool
	groups  map[string]*multiendpoint.MultiEndpoint
	pools   map[string]*pool.Pool // the pools of the configured endpoints
	retired map[*pool.Pool]bool   // draining pools, until closed
	// fronts are the fronts given to Spanner clients (NewMultiEndpointClient*, NewClient,
	// Configurator) not yet released, forgotten at Close; they are counted in Status.Clients
	// and Status.Configurators.
	fronts    map[*front.Front]struct{}
	closeDone chan struct{} // closed when the first Close has finished
	// closedAt and lastDefault are when Close was called and the default group's name
	// then, for Status after Close.
	closedAt    time.Time
	lastDefault string
}

// plumbing is what the constructors and this package's tests pass to newGCPMultiEndpoint
// beside the public input. Its zero value is what NewGCPMultiEndpoint* use.
type plumbing struct {
	// clock is the time source of the state machines and health detectors; nil means the
	// real clock.
	clock clock.Clock
	// emulator, when set (SPANNER_EMULATOR_HOST), replaces every group's endpoints, at
	// creation and at every UpdateMultiEndpoints.
	emulator string
	// dns, if not nil, resolves the "dns" scheme instead of gRPC's resolver (tests: to fail
	// name resolution without a DNS query).
	dns resolver.Builder
	// callDefaults are the default call options of the client options' dial options
	// (NewMultiEndpointClient*), which come before the GCPMultiEndpoint's own.
	callDefaults []grpc.CallOption
	// ownDialer: the pools are dialed by this package (grpc.NewClient, or gtransport for
	// NewMultiEndpointClient*), not by a caller's DialFunc, so dial options it appends come
	// after the caller's (pool.DialOptions).
	ownDialer bool
	// poolMin and poolMax size each pool when GRPCgcpConfig does not (0: the default
	// rule); NewMultiEndpointClient* take them from the ClientConfig. Kept so that a
	// watched file's pool settings compare with what creation made of the same request.
	poolMin, poolMax uint32
	// poolSettings are the ClientConfig settings the pools were built with
	// (NewMultiEndpointClient*, NewGCPMultiEndpointForSpanner); nil for NewGCPMultiEndpoint*,
	// whose pools take their transport from dial options, as if from a zero ClientConfig.
	// Every client over the GCPMultiEndpoint must ask for the same (clientPlan).
	poolSettings []poolSetting
	// clientOpts are the caller's client options (NewMultiEndpointClient*), with which the
	// owner's native metrics exporter is dialed (internal/export).
	clientOpts []option.ClientOption
	// latency, if not nil, replaces (*pool.Pool).Latency as the brownout rule's source of
	// latencies (tests: to drive the rule on a fake clock).
	latency func(*pool.Pool) (time.Duration, bool)
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
// sized by the rule of DefaultPoolSize. DialFunc, if set, dials each pool (it receives the
// endpoint and the dial options); otherwise grpc.NewClient does. opts come after this
// package's dial options, so they win, and a grpc.WaitForReady(true) among their default
// call options applies to every call as if the call gave it (see Invoke); which options, and
// what a resolver or a DialFunc in them changes: docs/transport.md, "Dial options: yours win".
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
	return newGCPMultiEndpointChecked(gmeCfg, settings, plumbing{}, opts)
}

// newGCPMultiEndpointChecked validates gmeCfg and settings, then builds the GCPMultiEndpoint.
func newGCPMultiEndpointChecked(gmeCfg *grpcgcp.GCPMultiEndpointOptions, settings Settings, pl plumbing, opts []grpc.DialOption) (*GCPMultiEndpoint, error) {
	cfg, err := parseConfig(gmeCfg)
	if err != nil {
		return nil, err
	}
	s, err := settings.parse()
	if err != nil {
		return nil, err
	}
	return newGCPMultiEndpoint(cfg, gmeCfg, s, pl, opts)
}

// newGCPMultiEndpoint builds the GCPMultiEndpoint of the validated cfg (parsed from gmeCfg,
// of which it reads only GRPCgcpConfig and DialFunc) and settings, and dials its pools.
func newGCPMultiEndpoint(cfg *config, gmeCfg *grpcgcp.GCPMultiEndpointOptions, s parsedSettings, pl plumbing, opts []grpc.DialOption) (*GCPMultiEndpoint, error) {
	settings := s.Settings
	if pl.clock == nil {
		pl.clock = clock.Real
	}
	cfg.collapseTo(pl.emulator)
	apiCfg := effectiveAPIConfig(gmeCfg.GRPCgcpConfig, 0, 0)
	gcpJSON, err := grpcgcpConfigJSON(apiCfg)
	if err != nil {
		return nil, err
	}
	// Each pool also gets its own service config, placed before these, and, when this
	// package dials it, the DNS error recorder, placed after the caller's options
	// (pool.DialOptions).
	dopts := []grpc.DialOption{
		grpc.WithDisableServiceConfig(),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: settings.reconnectBackoff(), MinConnectTimeout: settings.MinConnectTimeout}),
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
		dial:         gmeCfg.DialFunc,
		dialOpts:     append(dopts, opts...),
		gcpConfig:    apiCfg,
		gcpJSON:      gcpJSON,
		settings:     settings,
		pl:           pl,
		log:          settings.Logger,
		endpointOpts: s.endpointOpts,
		directed:     s.directed,
		groups:       make(map[string]*multiendpoint.MultiEndpoint),
		pools:        make(map[string]*pool.Pool),
		retired:      make(map[*pool.Pool]bool),
		fronts:       make(map[*front.Front]struct{}),
		stop:         make(chan struct{}),
		tierSettings: s.tiers,

		lazyStreams: lazyStreams,
	}
	gme.initMechanisms(settings, s.hedging, pl.clock, pl.latency)
	gme.waitForReadyDefault = pool.WaitForReady(pool.WaitForReady(false, pl.callDefaults), pool.DefaultCallOptions(gme.dialOpts))
	gme.dialCtx, gme.cancelDial = context.WithCancel(context.Background())
	if gme.dial == nil {
		gme.pl.ownDialer = true
		gme.dial = func(_ context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
			return grpc.NewClient(target, opts...)
		}
	}
	gme.updateMu.Lock()
	defer gme.updateMu.Unlock()
	if err := gme.apply(cfg, durationsAsWritten); err != nil { // at creation no group is kept
		gme.events.close()
		gme.obs.Close()
		gme.cancelDial()
		return nil, err
	}
	gme.obs.Metrics().Observe(settings.MeterProvider, gme.metricsView)
	return gme, nil
}

// zero reports whether gme is a zero value (not made by a constructor): it serves nothing.
func (gme *GCPMultiEndpoint) zero() bool { return gme.stop == nil }

// logger is gme's logger, or slog's default for a nil or zero-value gme.
func (gme *GCPMultiEndpoint) logger() *slog.Logger {
	if gme == nil || gme.zero() {
		return slog.Default()
	}
	return gme.log
}

// addFront registers p, the front of a Spanner client over gme, which Status counts. It
// returns false, registering nothing, once gme is closed (or a zero value).
func (gme *GCPMultiEndpoint) addFront(p *front.Front) bool {
	gme.mu.Lock()
	defer gme.mu.Unlock()
	if gme.closed || gme.zero() {
		return false
	}
	gme.fronts[p] = struct{}{}
	return true
}

// dropFront forgets p, a front whose client closed its connection; a no-op after Close,
// which forgot every front.
func (gme *GCPMultiEndpoint) dropFront(p *front.Front) {
	gme.mu.Lock()
	delete(gme.fronts, p)
	gme.mu.Unlock()
}

// frontConn is gme as its fronts see it (front.Conn).
type frontConn struct{ *GCPMultiEndpoint }

func (c frontConn) InvokeID(ctx context.Context, method string, args, reply any, id string, opts []grpc.CallOption) error {
	return c.invoke(ctx, method, args, reply, id, opts)
}
func (c frontConn) NewStreamID(ctx context.Context, desc *grpc.StreamDesc, method, id string, opts []grpc.CallOption) (grpc.ClientStream, error) {
	return c.newStream(ctx, desc, method, id, opts)
}
func (c frontConn) Add(f *front.Front) bool { return c.addFront(f) }
func (c frontConn) Drop(f *front.Front)     { c.dropFront(f) }

// newFront returns a front of kind over gme (front.New); ErrClosed after gme.Close (and on
// a zero value).
func newFront(gme *GCPMultiEndpoint, kind front.Kind, export front.Export) (*front.Front, error) {
	f, ok := front.New(frontConn{gme}, kind, export)
	if !ok {
		return nil, ErrClosed
	}
	return f, nil
}

// GCPConfig returns a copy of the grpcgcp configuration every pool was dialed with, pool size
// included; nil for a zero-value GCPMultiEndpoint.
func (gme *GCPMultiEndpoint) GCPConfig() *pb.ApiConfig {
	if gme.zero() {
		return nil
	}
	return proto.Clone(gme.gcpConfig).(*pb.ApiConfig)
}

// Close stops every group's timers and every pool's monitor, closes every pool (calls in
// flight end with codes.Canceled, as on a closed grpc.ClientConn), and waits for its
// goroutines, except that an OnSwitch or OnHealth call already running may still be
// finishing (and an ejection or readmission being reported: it is then neither logged nor
// delivered). Later calls fail with codes.Canceled carrying ErrClosed's text, those of every
// Spanner client over gme included (NewMultiEndpointClient*, NewClient, Configurator); each
// such client keeps its own front connection (it never connects) until its own Close. Close
// is idempotent; it returns the first errors from
// closing the pools. On a zero-value GCPMultiEndpoint it does nothing and returns nil.
//
// Ownership: only Close closes gme, and the Spanner client of NewMultiEndpointClient*, which
// built it, calls it from its own Close; clients of NewClient and Configurator never do.
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
	if gme.zero() { // nothing to close
		gme.mu.Unlock()
		return nil
	}
	gme.closedAt = gme.obs.Now()
	gme.lastDefault = gme.snap.Load().DefaultNameOrEmpty()
	gme.mu.Unlock()
	gme.cancelDial()

	gme.updateMu.Lock() // waits for an update in progress; later ones see closed
	defer gme.updateMu.Unlock()
	gme.snap.Store(nil)
	gme.changed.Signal() // waiting calls see the closed snapshot
	close(gme.stop)
	gme.mu.Lock()
	groups, pools := gme.groups, gme.pools
	gme.fronts = nil
	gme.mu.Unlock()
	for _, me := range groups {
		me.Close()
	}
	gme.steering.Close()
	gme.hedger.Close()
	gme.events.close()
	var errs []error
	for _, p := range pools {
		if err := p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("endpoint %q: %w", p.Endpoint(), err))
		}
	}
	gme.wg.Wait() // drains see stop and close their pools
	gme.obs.Close()
	return errors.Join(errs...)
}

// namesLocked returns the names of the configured endpoints that have one, by endpoint.
// gme.mu must be held.
func (gme *GCPMultiEndpoint) namesLocked() map[string]string {
	names := make(map[string]string)
	for e, p := range gme.pools {
		if n := poolName(p); n != "" {
			names[e] = n
		}
	}
	return names
}

// allPoolsLocked returns the pools of the configured endpoints and the retired ones still
// draining. gme.mu must be held.
func (gme *GCPMultiEndpoint) allPoolsLocked() []*pool.Pool {
	pools := make([]*pool.Pool, 0, len(gme.pools)+len(gme.retired))
	for _, p := range gme.pools {
		pools = append(pools, p)
	}
	for p := range gme.retired {
		pools = append(pools, p)
	}
	return pools
}

// metricsView returns what the observable metrics read; false after Close (and on a zero
// value), when only the waiting calls are observed.
func (gme *GCPMultiEndpoint) metricsView() (observe.View, bool) {
	v := observe.View{Waiting: gme.waiting.Load()}
	if gme.zero() {
		return v, false
	}
	if u := (map[string]int64{}); gme.unknown.CountsInto(u) > 0 {
		v.Unknown = u
	}
	gme.mu.Lock()
	if gme.closed {
		gme.mu.Unlock()
		return v, false
	}
	pools := gme.allPoolsLocked()
	v.Names = gme.namesLocked()
	for p := range gme.retired {
		if n := poolName(p); n != "" && gme.pools[p.Endpoint()] == nil {
			v.Names[p.Endpoint()] = n // a configured endpoint's name, even none, wins
		}
	}
	groups := make([]*multiendpoint.MultiEndpoint, 0, len(gme.groups))
	for _, me := range gme.groups {
		groups = append(groups, me)
	}
	gme.mu.Unlock()
	v.Active = make(map[string]int64, len(pools))
	for _, p := range pools {
		v.Active[p.Endpoint()] += p.InFlight()
	}
	for _, me := range groups {
		v.Groups = append(v.Groups, me.Status())
	}
	v.Degraded = gme.judge.Brownouts().DegradedSet()
	v.Verdicts = gme.judge.Verdicts().All()
	v.Hedges = gme.hedger.Counts()
	v.Scores = gme.tiers.Scores()
	return v, true
}

// frontsLocked counts the fronts: the Spanner clients' (NewMultiEndpointClient*, NewClient)
// and the Configurators'. gme.mu must be held.
func (gme *GCPMultiEndpoint) frontsLocked() (clients, configurators int) {
	for f := range gme.fronts {
		if f.Kind() == front.Configurator {
			configurators++
		} else {
			clients++
		}
	}
	return clients, configurators
}
