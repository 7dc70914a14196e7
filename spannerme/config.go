package spannerme

import (
	"fmt"
	"sort"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// DefaultPoolSize is the number of channels (gRPC connections) in each endpoint's pool when
// GRPCgcpConfig.ChannelPool.MaxSize is not set.
const DefaultPoolSize = 4

// groupConfig is one validated MultiEndpoint.
type groupConfig struct {
	name            string
	endpoints       []string // normalized, by priority
	recoveryTimeout time.Duration
	switchingDelay  time.Duration
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

func configErr(group, endpoint string, index int, format string, args ...any) error {
	return &ConfigError{Group: group, Endpoint: endpoint, Index: index, Problem: fmt.Sprintf(format, args...)}
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
	if _, ok := o.MultiEndpoints[o.Default]; !ok {
		return nil, configErr(o.Default, "", -1, "Default names a MultiEndpoint that is not configured")
	}
	names := make([]string, 0, len(o.MultiEndpoints))
	for name := range o.MultiEndpoints {
		names = append(names, name)
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
			return nil, err
		}
		g := groupConfig{name: name, recoveryTimeout: meo.RecoveryTimeout, switchingDelay: meo.SwitchingDelay}
		seen := make(map[string]int, len(meo.Endpoints))
		for i, e := range meo.Endpoints {
			n, problem := normalizeEndpoint(e)
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

// effectiveAPIConfig returns a copy of cfg (nil allowed) with the channel pool filled in:
// MaxSize defaults to poolSize, and MinSize to MaxSize so that every channel of a standby
// endpoint connects up front (a warm standby).
func effectiveAPIConfig(cfg *pb.ApiConfig, poolSize uint32) *pb.ApiConfig {
	c := &pb.ApiConfig{}
	if cfg != nil {
		c = proto.Clone(cfg).(*pb.ApiConfig)
	}
	if c.ChannelPool == nil {
		c.ChannelPool = &pb.ChannelPoolConfig{}
	}
	if c.ChannelPool.MaxSize == 0 {
		c.ChannelPool.MaxSize = poolSize
	}
	if c.ChannelPool.MinSize == 0 || c.ChannelPool.MinSize > c.ChannelPool.MaxSize {
		c.ChannelPool.MinSize = c.ChannelPool.MaxSize
	}
	return c
}

// grpcgcpConfigJSON is the configuration of the grpc_gcp balancer that manages each
// endpoint's channel pool; connWatch.dialOptions puts it in the pool's service config.
func grpcgcpConfigJSON(cfg *pb.ApiConfig) ([]byte, error) {
	b, err := protojson.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("spannerme: encoding GRPCgcpConfig: %w", err)
	}
	return b, nil
}
