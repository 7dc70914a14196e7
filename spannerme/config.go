package spannerme

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/endpointname"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
)

// DialFunc dials one endpoint's channel pool; it is grpcgcp.GCPMultiEndpointOptions.DialFunc.
type DialFunc = func(ctx context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error)

// Channel pool sizing. Each endpoint's pool is a grpcgcp pool of channels (gRPC
// connections). It keeps MinSize channels connected at all times (a warm standby is ready to
// take traffic), sends each call to the channel with the fewest active streams, and adds a
// channel, up to MaxSize, when every channel carries MaxConcurrentStreamsLowWatermark
// streams (grpcgcp v1.6.0, gcp_picker.go getLeastBusySubConnRef). Channels are not removed
// when load drops. The sizing rule, for GRPCgcpConfig.ChannelPool:
//
//   - MinSize and MaxSize both set: as given (MinSize is capped at MaxSize);
//   - only MaxSize set: MinSize = MaxSize, a fixed pool (upstream's rule: "the number of
//     channels is configured via MaxSize");
//   - only MinSize set: MaxSize = max(MinSize, DefaultMaxPoolSize);
//   - neither: MinSize = ClientConfig.NumChannels if set (client constructors), else
//     DefaultPoolSize; MaxSize = max(MinSize, DefaultMaxPoolSize). With
//     ClientConfig.DynamicChannelPoolConfig.DCPEnabled (which is then turned off), its
//     DCPInitialChannels, if set, stands for DefaultPoolSize and its DCPMaxChannels, if
//     set, for DefaultMaxPoolSize;
//   - MaxConcurrentStreamsLowWatermark 0: DefaultStreamsPerChannel.
//
// So an endpoint carries up to MaxSize x 100 concurrent calls before calls queue for a
// stream, against NumChannels x 100 for a plain Spanner client.
const (
	// DefaultPoolSize is the number of channels each endpoint's pool keeps connected
	// (MinSize) by default: 4, the Spanner client's own default number of channels
	// (cloud.google.com/go/spanner v1.96.1, client.go numChannels) and its dynamic channel
	// pool's default DCPInitialChannels.
	DefaultPoolSize = 4
	// DefaultMaxPoolSize is the number of channels a pool may grow to by default: 10, the
	// Spanner client's dynamic channel pool default DCPMaxChannels (dynamic_channel_pool.go).
	DefaultMaxPoolSize = 10
	// DefaultStreamsPerChannel is the default MaxConcurrentStreamsLowWatermark: a pool grows
	// when every channel carries this many streams. 100 is the limit of concurrent streams
	// per HTTP/2 connection of Google's front ends, and grpcgcp's default.
	DefaultStreamsPerChannel = 100
)

// groupConfig is one validated MultiEndpoint.
type groupConfig struct {
	name            string
	endpoints       []string // normalized, by priority
	recoveryTimeout time.Duration
	switchingDelay  time.Duration
	// tiers and slowStart: the group's Settings.Tiers (assignTiers); nil: no tiers.
	tiers     [][]string
	slowStart time.Duration
}

// config is a validated GCPMultiEndpointOptions. It shares no memory with the caller's.
type config struct {
	defaultName string
	groups      []groupConfig // sorted by name
}

// collapseTo replaces every group's endpoints with addr (SPANNER_EMULATOR_HOST); "" leaves
// the configuration as it is.
func (c *config) collapseTo(addr string) {
	if addr == "" {
		return
	}
	for i := range c.groups {
		c.groups[i].endpoints = []string{addr}
	}
}

func (c *config) endpoints() map[string]bool {
	set := make(map[string]bool)
	for _, g := range c.groups {
		for _, e := range g.endpoints {
			set[e] = true
		}
	}
	return set
}

// parseConfig validates the MultiEndpoint part of o (groups, endpoints, durations, default)
// without changing o. Errors are *ConfigError, wrapping ErrInvalidConfig.
func parseConfig(o *grpcgcp.GCPMultiEndpointOptions) (*config, error) {
	if o == nil {
		return nil, configErr("", "", -1, "nil GCPMultiEndpointOptions")
	}
	if len(o.MultiEndpoints) == 0 {
		return nil, configErr("", "", -1, "no MultiEndpoints configured")
	}
	if o.Default == "" {
		return nil, configErr("", "", -1, "Default is empty; it must name one of the MultiEndpoints")
	}
	names := make([]string, 0, len(o.MultiEndpoints))
	for name := range o.MultiEndpoints {
		names = append(names, name)
	}
	if _, ok := o.MultiEndpoints[o.Default]; !ok {
		return nil, configErr(o.Default, "", -1, "Default names a MultiEndpoint that is not configured%s; the MultiEndpoints are %s",
			route.DidYouMean(o.Default, names), route.QuotedList(names))
	}
	sort.Strings(names)
	c := &config{defaultName: o.Default}
	for _, name := range names {
		meo := o.MultiEndpoints[name]
		if name == "" {
			return nil, configErr(name, "", -1, "empty MultiEndpoint name")
		}
		if meo == nil {
			return nil, configErr(name, "", -1, "nil MultiEndpointOptions")
		}
		if len(meo.Endpoints) == 0 {
			return nil, configErr(name, "", -1, "no endpoints")
		}
		if err := multiendpoint.ValidateDurations(name, meo.RecoveryTimeout, meo.SwitchingDelay); err != nil {
			return nil, fromStateMachine(err)
		}
		g := groupConfig{name: name, recoveryTimeout: meo.RecoveryTimeout, switchingDelay: meo.SwitchingDelay}
		seen := make(map[string]int, len(meo.Endpoints))
		for i, e := range meo.Endpoints {
			n, problem := endpointname.Normalize(e)
			if problem != "" {
				return nil, configErr(name, e, i, "%s", problem)
			}
			if j, dup := seen[n]; dup {
				return nil, configErr(name, e, i, "duplicate endpoint (same as %q at position %d)", meo.Endpoints[j], j)
			}
			seen[n] = i
			g.endpoints = append(g.endpoints, n)
		}
		c.groups = append(c.groups, g)
	}
	return c, nil
}

// effectiveAPIConfig returns a copy of cfg (nil allowed) with the channel pool filled in by
// the sizing rule above. minSize and maxSize are the sizes used when cfg sets neither (0:
// DefaultPoolSize and DefaultMaxPoolSize; MaxSize is never below MinSize). It is idempotent.
func effectiveAPIConfig(cfg *pb.ApiConfig, minSize, maxSize uint32) *pb.ApiConfig {
	c := &pb.ApiConfig{}
	if cfg != nil {
		c = proto.Clone(cfg).(*pb.ApiConfig)
	}
	if c.ChannelPool == nil {
		c.ChannelPool = &pb.ChannelPoolConfig{}
	}
	cp := c.ChannelPool
	if minSize == 0 {
		minSize = DefaultPoolSize
	}
	if maxSize == 0 {
		maxSize = DefaultMaxPoolSize
	}
	switch {
	case cp.MinSize == 0 && cp.MaxSize == 0:
		cp.MinSize, cp.MaxSize = minSize, max(minSize, maxSize)
	case cp.MinSize == 0:
		cp.MinSize = cp.MaxSize
	case cp.MaxSize == 0:
		cp.MaxSize = max(cp.MinSize, DefaultMaxPoolSize)
	case cp.MinSize > cp.MaxSize:
		cp.MinSize = cp.MaxSize
	}
	if cp.MaxConcurrentStreamsLowWatermark == 0 {
		cp.MaxConcurrentStreamsLowWatermark = DefaultStreamsPerChannel
	}
	return c
}

// grpcgcpConfigJSON is the configuration of the grpc_gcp balancer that manages each
// endpoint's channel pool; poolDialOptions puts it in the pool's service config.
func grpcgcpConfigJSON(cfg *pb.ApiConfig) ([]byte, error) {
	b, err := protojson.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("spannerme: encoding GRPCgcpConfig: %w", err)
	}
	return b, nil
}

// NoAffinityConfig returns a GRPCgcpConfig without session affinity, with a fixed pool of
// poolSize channels per endpoint (0: the default sizing rule, see DefaultPoolSize). No
// affinity is what the client constructors use by default, since every call of the Spanner
// client's one multiplexed session would be pinned to one channel; this function is
// kept for code that passes it explicitly.
func NoAffinityConfig(poolSize uint32) *pb.ApiConfig {
	return &pb.ApiConfig{ChannelPool: &pb.ChannelPoolConfig{MaxSize: poolSize}}
}

// SessionAffinityConfig returns upstream's Spanner session affinity as a GRPCgcpConfig
// (cloud.google.com/go/spanner v1.96.1, createGCPMultiEndpoint), with a fixed pool of
// poolSize channels per endpoint (0: the default sizing rule): a session is bound to a
// channel, round-robin, when it is created (CreateSession, BatchCreateSessions), and every
// call of the session goes to that channel. It spreads a client that uses many regular
// sessions; with the Spanner client's one multiplexed session it pins every call to one
// channel, which is why it is not the default.
func SessionAffinityConfig(poolSize uint32) *pb.ApiConfig {
	method := func(cmd pb.AffinityConfig_Command, key string, names ...string) *pb.MethodConfig {
		return &pb.MethodConfig{Name: names, Affinity: &pb.AffinityConfig{Command: cmd, AffinityKey: key}}
	}
	const svc = "/google.spanner.v1.Spanner/"
	return &pb.ApiConfig{
		ChannelPool: &pb.ChannelPoolConfig{MaxSize: poolSize, BindPickStrategy: pb.ChannelPoolConfig_ROUND_ROBIN},
		Method: []*pb.MethodConfig{
			method(pb.AffinityConfig_BIND, "name", svc+"CreateSession"),
			method(pb.AffinityConfig_BIND, "session.name", svc+"BatchCreateSessions"),
			method(pb.AffinityConfig_UNBIND, "name", svc+"DeleteSession"),
			method(pb.AffinityConfig_BOUND, "name", svc+"GetSession"),
			method(pb.AffinityConfig_BOUND, "session",
				svc+"BeginTransaction", svc+"Commit", svc+"ExecuteBatchDml", svc+"ExecuteSql",
				svc+"ExecuteStreamingSql", svc+"PartitionQuery", svc+"PartitionRead", svc+"Read",
				svc+"Rollback", svc+"StreamingRead"),
		},
	}
}

// durationRule says what a kept group's zero RecoveryTimeout or SwitchingDelay in a new
// configuration means.
type durationRule bool

const (
	keepUnsetDurations durationRule = true  // zero keeps the group's value (UpdateMultiEndpoints)
	durationsAsWritten durationRule = false // zero is zero (a configuration file's reload)
)

// poolSetting is one ClientConfig setting that shapes the endpoints' pools, as text.
type poolSetting struct {
	name, value string
	secret      bool // value is a digest, never shown
}
