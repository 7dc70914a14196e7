package spannerme

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime/debug"

	"cloud.google.com/go/spanner"
	vkit "cloud.google.com/go/spanner/apiv1"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
)

// emulatorHostEnv is the variable the Spanner client reads to talk to the emulator.
const emulatorHostEnv = "SPANNER_EMULATOR_HOST"

// NewMultiEndpointClient is NewMultiEndpointClientWithConfig with the Spanner client's
// default configuration, as upstream's spanner.NewMultiEndpointClient.
func NewMultiEndpointClient(ctx context.Context, database string, gmeCfg *grpcgcp.GCPMultiEndpointOptions, opts ...option.ClientOption) (*spanner.Client, *GCPMultiEndpoint, error) {
	//lint:ignore SA1019 the same default configuration as upstream's spanner.NewMultiEndpointClient
	return NewMultiEndpointClientWithConfig(ctx, database, spanner.ClientConfig{SessionPoolConfig: spanner.DefaultSessionPoolConfig}, gmeCfg, opts...)
}

// NewMultiEndpointClientWithConfig creates a Spanner client whose every call goes through a
// GCPMultiEndpoint built from gmeCfg, with upstream's signature. See
// NewMultiEndpointClientWithSettings.
func NewMultiEndpointClientWithConfig(ctx context.Context, database string, config spanner.ClientConfig, gmeCfg *grpcgcp.GCPMultiEndpointOptions, opts ...option.ClientOption) (*spanner.Client, *GCPMultiEndpoint, error) {
	return NewMultiEndpointClientWithSettings(ctx, database, config, gmeCfg, Settings{}, opts...)
}

// NewMultiEndpointClientWithSettings creates a Spanner client for database
// ("projects/P/instances/I/databases/D") whose every call goes through a GCPMultiEndpoint
// built from gmeCfg, and returns both. Use the GCPMultiEndpoint to reconfigure endpoints at
// runtime and to read their status; route a call to a group with NewMEContext.
//
//   - opts (credentials, TLS, user agent, dial options, option.WithoutAuthentication, ...)
//     apply to every endpoint's pool, each dialed with gtransport.Dial and
//     option.WithEndpoint(endpoint). option.WithEndpoint, option.WithGRPCConn and
//     option.WithGRPCConnectionPool in opts are overridden per endpoint (pool size: below).
//     Dial options in opts come before this package's, which therefore win (see
//     NewGCPMultiEndpointWithSettings). A grpc.WaitForReady(true) among their default call
//     options (grpc.WithDefaultCallOptions) applies as if every call gave it, as there
//     (not with grpc.WithBlock, nor with a DialFunc).
//   - The Spanner client's user agent and config.Compression apply to the pools; its
//     request-ID header and built-in metrics interceptors do not (it is given a connection,
//     and gtransport then ignores its dial options).
//   - GRPCgcpConfig without Method gets the Spanner affinity configuration (session binding
//     on CreateSession and BatchCreateSessions, unbinding on DeleteSession, calls bound to the
//     session key). Pool size per endpoint: GRPCgcpConfig.ChannelPool.MaxSize, else
//     config.NumChannels, else DefaultPoolSize. The Spanner client itself sees one
//     connection, so config.NumChannels is not passed on to it.
//   - DialFunc in gmeCfg, if set, replaces gtransport.Dial (opts are then not applied).
//   - With SPANNER_EMULATOR_HOST set, every group's endpoints are replaced by the emulator,
//     plaintext and without authentication, as the upstream client does, and a warning is
//     logged: failover is then not exercised.
//   - Endpoint health from call outcomes is on unless settings.Health.Disabled; its probe is
//     SpannerProbe(database) unless settings.Health.Probe is set (HealthSettings).
//   - Closing the Spanner client closes the GCPMultiEndpoint and every pool; closing the
//     GCPMultiEndpoint as well is harmless.
//   - The GCPMultiEndpoint's metrics go to settings.MeterProvider, else to
//     config.OpenTelemetryMeterProvider, else to the global meter provider.
//
// gmeCfg and config are not modified. On any error everything dialed is closed. Errors: a
// *ConfigError wrapping ErrInvalidConfig for an invalid gmeCfg or settings; a dial error
// naming the endpoint; any error of spanner.NewClientWithConfig.
func NewMultiEndpointClientWithSettings(ctx context.Context, database string, config spanner.ClientConfig,
	gmeCfg *grpcgcp.GCPMultiEndpointOptions, settings Settings, opts ...option.ClientOption) (*spanner.Client, *GCPMultiEndpoint, error) {
	if _, err := parseConfig(gmeCfg); err != nil {
		return nil, nil, err
	}
	if err := settings.validate(); err != nil {
		return nil, nil, err
	}
	if settings.Health.Probe == nil {
		settings.Health.Probe = SpannerProbe(database)
	}
	if settings.MeterProvider == nil {
		settings.MeterProvider = config.OpenTelemetryMeterProvider // nil: the global one
	}
	settings = settings.withDefaults()
	cfg := *gmeCfg // shallow copy: the caller's struct is never written
	opts = append([]option.ClientOption(nil), opts...)
	if host := os.Getenv(emulatorHostEnv); host != "" {
		settings.emulator = emulatorScheme.ReplaceAllString(host, "")
		opts = append(opts,
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithoutAuthentication())
		settings.Logger.Warn("spannerme: "+emulatorHostEnv+" is set: every MultiEndpoint points at the emulator, so failover is not exercised",
			"emulator", host)
	}
	poolSize := uint32(DefaultPoolSize)
	//lint:ignore SA1019 upstream's MultiEndpoint client sizes its pools from NumChannels too
	if config.NumChannels > 0 {
		poolSize = uint32(config.NumChannels) //lint:ignore SA1019 as above
	}
	cfg.GRPCgcpConfig = spannerAPIConfig(cfg.GRPCgcpConfig, poolSize)
	if cfg.DialFunc == nil {
		cfg.DialFunc = gtransportDialer(opts, config.Compression)
		settings.callDefaults = clientDefaultCallOptions(opts) // e.g. WaitForReady (issue 13)
	}
	gme, err := NewGCPMultiEndpointWithSettings(&cfg, settings)
	if err != nil {
		return nil, nil, err
	}
	front, err := newFrontConn(gme)
	if err != nil {
		gme.Close()
		return nil, nil, err
	}
	//lint:ignore SA1019 the client sees one connection, the front; a NumChannels > 1 would be rejected
	config.NumChannels = 0
	client, err := spanner.NewClientWithConfig(ctx, database, config, append(opts, option.WithGRPCConn(front))...)
	if err != nil {
		gme.Close() // closes the front too
		return nil, nil, err
	}
	return client, gme, nil
}

// spannerAPIConfig returns a copy of cfg with the Spanner affinity methods when it has none,
// and the channel pool filled in by effectiveAPIConfig. The bindings follow upstream's
// spanner.NewMultiEndpointClient (cloud.google.com/go/spanner, client.go).
func spannerAPIConfig(cfg *pb.ApiConfig, poolSize uint32) *pb.ApiConfig {
	c := effectiveAPIConfig(cfg, poolSize)
	if len(c.Method) == 0 {
		method := func(cmd pb.AffinityConfig_Command, key string, names ...string) *pb.MethodConfig {
			return &pb.MethodConfig{Name: names, Affinity: &pb.AffinityConfig{Command: cmd, AffinityKey: key}}
		}
		const svc = "/google.spanner.v1.Spanner/"
		c.Method = []*pb.MethodConfig{
			method(pb.AffinityConfig_BIND, "name", svc+"CreateSession"),
			method(pb.AffinityConfig_BIND, "session.name", svc+"BatchCreateSessions"),
			method(pb.AffinityConfig_UNBIND, "name", svc+"DeleteSession"),
			method(pb.AffinityConfig_BOUND, "name", svc+"GetSession"),
			method(pb.AffinityConfig_BOUND, "session",
				svc+"BeginTransaction", svc+"Commit", svc+"ExecuteBatchDml", svc+"ExecuteSql",
				svc+"ExecuteStreamingSql", svc+"PartitionQuery", svc+"PartitionRead", svc+"Read",
				svc+"Rollback", svc+"StreamingRead"),
		}
		c.ChannelPool.BindPickStrategy = pb.ChannelPoolConfig_ROUND_ROBIN
	}
	return c
}

// gtransportDialer dials one endpoint's pool with the Spanner API defaults, the Spanner
// client's user agent and compression, the caller's client options, and the
// GCPMultiEndpoint's dial options. (The Spanner client's own dial options, its request-ID
// header and built-in metrics interceptors, do not reach the pools: the client is given a
// connection, and gtransport then ignores its dial options.)
func gtransportDialer(opts []option.ClientOption, compression string) DialFunc {
	return func(ctx context.Context, target string, dopts ...grpc.DialOption) (*grpc.ClientConn, error) {
		all := append(vkit.DefaultClientOptions(), option.WithUserAgent(userAgent()))
		if compression == gzip.Name {
			all = append(all, option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.UseCompressor(gzip.Name))))
		}
		all = append(all, opts...)
		for _, d := range dopts {
			all = append(all, option.WithGRPCDialOption(d))
		}
		all = append(all, option.WithEndpoint(target), option.WithGRPCConnectionPool(1), option.WithGRPCConn(nil))
		return gtransport.Dial(ctx, all...)
	}
}

var emulatorScheme = regexp.MustCompile(`^(http://|https://|passthrough:///)`)

// userAgent is the Spanner client's user agent ("spanner-go/v1.96.1"), read from the build
// information, followed by this package's name.
func userAgent() string {
	v := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "cloud.google.com/go/spanner" {
				v = "/" + d.Version
			}
		}
	}
	return "spanner-go" + v + " spannerme"
}

// errFrontDial is what the front connection's dialer returns: it never connects.
var errFrontDial = errors.New("spannerme: the front connection never dials; calls go through the GCPMultiEndpoint")

// newFrontConn returns the *grpc.ClientConn handed to the Spanner client. It never connects:
// its interceptors send every call into gme. When it is closed (spanner.Client.Close), gme is
// closed; when gme is closed, so is it.
func newFrontConn(gme *GCPMultiEndpoint) (*grpc.ClientConn, error) {
	front, err := grpc.NewClient("passthrough:///spannerme-multiendpoint",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return nil, errFrontDial }),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return gme.Invoke(ctx, method, req, reply, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, _ *grpc.ClientConn, method string, _ grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return gme.NewStream(ctx, desc, method, opts...)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("spannerme: front connection: %w", err)
	}
	gme.attachFront(front)
	return front, nil
}

// attachFront ties the front connection's life to gme's: a goroutine waits for the front's
// SHUTDOWN and then closes gme; gme's Close closes the front, which ends that goroutine.
func (gme *GCPMultiEndpoint) attachFront(front *grpc.ClientConn) {
	done := make(chan struct{})
	gme.mu.Lock()
	gme.front, gme.frontDone = front, done
	gme.mu.Unlock()
	go func() {
		defer close(done)
		for s := front.GetState(); s != connectivity.Shutdown; s = front.GetState() {
			front.WaitForStateChange(context.Background(), s)
		}
		gme.close(false)
	}()
}

// NoAffinityConfig returns a GRPCgcpConfig without session affinity, for a pool of
// poolSize channels (0: the default rule). Pass it as GCPMultiEndpointOptions.GRPCgcpConfig
// to spread calls over all channels of an endpoint.
//
// Why: the Spanner client uses one multiplexed session for all its data calls, so the
// default affinity (calls bound to their session's channel) sends every query of a client
// through ONE channel of each endpoint's pool. Without affinity, grpcgcp sends each
// call to the channel with the fewest active streams. Sessions are valid on every channel,
// so nothing else changes.
func NoAffinityConfig(poolSize uint32) *pb.ApiConfig {
	return &pb.ApiConfig{
		ChannelPool: &pb.ChannelPoolConfig{MaxSize: poolSize},
		// A non-empty Method list stops the Spanner affinity from being filled in; this entry
		// names no real method, so no call gets an affinity.
		Method: []*pb.MethodConfig{{
			Name:     []string{"/spannerme.NoAffinity/None"},
			Affinity: &pb.AffinityConfig{Command: pb.AffinityConfig_BIND, AffinityKey: "name"},
		}},
	}
}
