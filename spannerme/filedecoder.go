package spannerme

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.yaml.in/yaml/v3"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
	"github.com/spannerme/spanner-multiendpoint/internal/endpointname"
)

// The limits of a configuration file's schema (docs/configuration.md, "Limits", states
// them, with the limits of its size and values, internal/configfile's): a file over a limit
// is refused with a *ConfigFileError before anything is built from it.
const (
	// maxGroups bounds the groups (multiEndpoints), maxGroupEndpoints the endpoints of one
	// group, maxEndpoints the distinct endpoints of every group together (each is a pool
	// of connections), and maxEndpointOptions the entries of the endpoints section.
	maxGroups          = 1000
	maxGroupEndpoints  = 100
	maxEndpoints       = 1000
	maxEndpointOptions = 1000
)

// parsedFile is a configuration file's validated content in the form UpdateMultiEndpoints
// applies: the groups, the endpoint options and the directed read policies, parsed once.
type parsedFile struct {
	cfg          *config
	endpointOpts endpointOptions
	directed     directedReads
	hedging      hedgeSettings
	tiers        map[string]tierConfig // the groups with a nested list of endpoints
}

// fileDecoder reads a configuration file's node tree (configfile.Decoder) into the options
// and settings it configures: the file's schema.
type fileDecoder struct {
	*configfile.Decoder
	options  *grpcgcp.GCPMultiEndpointOptions
	settings Settings
	// poolSize and affinity come from poolSize and sessionAffinity.
	poolSize uint32
	poolSet  bool
	affinity bool
	affSet   bool
	// endpoints holds the distinct endpoints of every group, to bound them.
	endpoints map[string]bool
}

// decode reads the file's root mapping into the decoder's options and settings.
func (d *fileDecoder) decode(root *configfile.Node) error {
	d.options = &grpcgcp.GCPMultiEndpointOptions{}
	err := d.Mapping(root, "", configfile.Fields{
		"default": func(n *configfile.Node, p string) (err error) {
			d.options.Default, err = d.Str(n, p)
			return err
		},
		"multiEndpoints": d.groups,
		"endpoints":      d.endpointOptions,
		"poolSize": func(n *configfile.Node, p string) error {
			v, err := d.Uint(n, p, 1, 1024)
			d.poolSize, d.poolSet = uint32(v), true
			return err
		},
		"sessionAffinity": func(n *configfile.Node, p string) error {
			v, err := d.Bool(n, p)
			d.affinity, d.affSet = v, true
			return err
		},
		"settings": d.settingsSection,
	})
	if err != nil {
		return err
	}
	for _, req := range []string{"default", "multiEndpoints"} {
		if d.Node(req) == nil {
			return d.ErrAt(root, req, "required field missing")
		}
	}
	if d.poolSet || d.affSet {
		// poolSize is the channels kept connected (MinSize); the pool grows by the rule of
		// DefaultPoolSize. sessionAffinity: true is upstream's session affinity.
		if d.affinity {
			d.options.GRPCgcpConfig = SessionAffinityConfig(0)
		} else {
			d.options.GRPCgcpConfig = &pb.ApiConfig{ChannelPool: &pb.ChannelPoolConfig{}}
		}
		d.options.GRPCgcpConfig.ChannelPool.MinSize = d.poolSize
	}
	return nil
}

func (d *fileDecoder) groups(n *configfile.Node, path string) error {
	n = configfile.Resolve(n)
	if n.Kind != yaml.MappingNode {
		return d.ErrAt(n, path, "want a mapping of group names to groups, got %s", configfile.KindName(n))
	}
	if groups := len(n.Content) / 2; groups > maxGroups {
		return d.ErrAt(n, path, "%d groups: at most %d are accepted", groups, maxGroups)
	}
	d.options.MultiEndpoints = map[string]*multiendpoint.MultiEndpointOptions{}
	fields := configfile.Fields{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name := configfile.Resolve(n.Content[i]).Value
		fields[name] = func(v *configfile.Node, p string) error { return d.group(name, v, p) }
	}
	return d.Mapping(n, path, fields)
}

func (d *fileDecoder) group(name string, n *configfile.Node, path string) error {
	g := &multiendpoint.MultiEndpointOptions{}
	d.options.MultiEndpoints[name] = g
	var tiers TierSettings // slowStart, and the tiers groupEndpoints stores
	defer func() {
		if t, ok := d.settings.Tiers[name]; ok {
			t.SlowStart = tiers.SlowStart
			d.settings.Tiers[name] = t
		}
	}()
	err := d.Mapping(n, path, configfile.Fields{
		"endpoints": func(n *configfile.Node, p string) error {
			n = configfile.Resolve(n)
			if n.Kind != yaml.SequenceNode {
				return d.ErrAt(n, p, "want a list of endpoints, got %s", configfile.KindName(n))
			}
			if len(n.Content) > maxGroupEndpoints {
				return d.ErrAt(n, p, "%d endpoints: a group has at most %d", len(n.Content), maxGroupEndpoints)
			}
			return d.groupEndpoints(name, g, n, p)
		},
		"slowStart": func(n *configfile.Node, p string) (err error) {
			tiers.SlowStart, err = d.Duration(n, p, "")
			return err
		},
		"recoveryTimeout": func(n *configfile.Node, p string) (err error) {
			g.RecoveryTimeout, err = d.Duration(n, p, "")
			return err
		},
		"switchingDelay": func(n *configfile.Node, p string) (err error) {
			g.SwitchingDelay, err = d.Duration(n, p, "")
			return err
		},
		"directedReads": func(n *configfile.Node, p string) error {
			o, err := decodeDirectedReads(d.Decoder, name, n, p)
			if err == nil {
				if d.settings.DirectedReads == nil {
					d.settings.DirectedReads = map[string]*spannerpb.DirectedReadOptions{}
				}
				d.settings.DirectedReads[name] = o
			}
			return err
		},
		"hedging": func(n *configfile.Node, p string) error {
			h, err := decodeHedging(d.Decoder, n, p)
			if err == nil {
				if d.settings.Hedging == nil {
					d.settings.Hedging = map[string]HedgingSettings{}
				}
				d.settings.Hedging[name] = h
			}
			return err
		},
	})
	if err == nil && d.Node(configfile.Join(path, "endpoints")) == nil {
		return d.ErrAt(configfile.Resolve(n), configfile.Join(path, "endpoints"), "required field missing")
	}
	if _, tiered := d.settings.Tiers[name]; err == nil && !tiered && d.Node(configfile.Join(path, "slowStart")) != nil {
		return d.ErrAt(d.Node(configfile.Join(path, "slowStart")), configfile.Join(path, "slowStart"),
			"slowStart applies to a group with tiers (a nested list in endpoints)")
	}
	return err
}

// groupEndpoints reads a group's endpoints: a list whose items are endpoints, or lists of
// endpoints (tiers of equal priority, TierSettings). With a nested list the group has tiers,
// an endpoint alone being a tier of its own; g.Endpoints is the list flattened (the order of
// tiers and members), so a flat list means exactly what it means upstream. An endpoint's
// path in errors is its position in the flattened list: endpoints[k].
func (d *fileDecoder) groupEndpoints(name string, g *multiendpoint.MultiEndpointOptions, n *configfile.Node, p string) error {
	var tiers [][]string
	nested := false
	add := func(e *configfile.Node) error {
		ep := fmt.Sprintf("%s[%d]", p, len(g.Endpoints))
		s, err := d.Str(e, ep)
		if err != nil {
			return err
		}
		if d.endpoints == nil {
			d.endpoints = map[string]bool{}
		}
		if d.endpoints[s] = true; len(d.endpoints) > maxEndpoints {
			return d.ErrAt(configfile.Resolve(e), ep, "more than %d distinct endpoints in all groups together", maxEndpoints)
		}
		if len(g.Endpoints) >= maxGroupEndpoints {
			return d.ErrAt(configfile.Resolve(e), ep, "more than %d endpoints: a group has at most %d", maxGroupEndpoints, maxGroupEndpoints)
		}
		d.SetNode(ep, configfile.Resolve(e))
		g.Endpoints = append(g.Endpoints, s)
		return nil
	}
	for i, e := range n.Content {
		if r := configfile.Resolve(e); r.Kind == yaml.SequenceNode {
			nested = true
			if len(r.Content) == 0 {
				return d.ErrAt(r, fmt.Sprintf("%s[%d]", p, i), "empty tier")
			}
			var tier []string
			for _, m := range r.Content {
				if err := add(m); err != nil {
					return err
				}
				tier = append(tier, g.Endpoints[len(g.Endpoints)-1])
			}
			tiers = append(tiers, tier)
			continue
		}
		if err := add(e); err != nil {
			return err
		}
		tiers = append(tiers, []string{g.Endpoints[len(g.Endpoints)-1]})
	}
	if nested {
		if d.settings.Tiers == nil {
			d.settings.Tiers = map[string]TierSettings{}
		}
		d.settings.Tiers[name] = TierSettings{Tiers: tiers}
	}
	return nil
}

func (d *fileDecoder) endpointOptions(n *configfile.Node, path string) error {
	n = configfile.Resolve(n)
	if n.Kind != yaml.MappingNode {
		return d.ErrAt(n, path, "want a mapping of endpoints to their options, got %s", configfile.KindName(n))
	}
	if entries := len(n.Content) / 2; entries > maxEndpointOptions {
		return d.ErrAt(n, path, "%d entries: at most %d are accepted", entries, maxEndpointOptions)
	}
	d.settings.EndpointOptions = map[string]EndpointOptions{}
	type namedBy struct {
		key        *configfile.Node // the endpoint's key in the file
		normalized string
	}
	named := map[string]namedBy{} // name -> the endpoint that has it
	fields := configfile.Fields{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := configfile.Resolve(n.Content[i])
		fields[key.Value] = func(v *configfile.Node, p string) error {
			// An endpoint that no group lists is accepted, as in Settings.EndpointOptions
			// (parseEndpointOptions): its options apply once a group lists it, so an
			// endpoint taken out of its groups keeps its options in the file.
			ne, problem := endpointname.Normalize(key.Value)
			if problem != "" {
				return d.ErrAt(key, p, "%s", problem)
			}
			var eo EndpointOptions
			err := d.Mapping(v, p, configfile.Fields{
				"authority": func(n *configfile.Node, p string) (err error) {
					if eo.Authority, err = d.Str(n, p); err == nil {
						if problem := checkAuthority(eo.Authority); problem != "" {
							err = d.ErrAt(configfile.Resolve(n), p, "%s: %s", configfile.Q(eo.Authority), problem)
						}
					}
					return err
				},
				"name": func(n *configfile.Node, p string) (err error) {
					if eo.Name, err = d.Str(n, p); err != nil {
						return err
					}
					if problem := checkEndpointName(eo.Name); problem != "" {
						return d.ErrAt(configfile.Resolve(n), p, "%s: %s", configfile.Q(eo.Name), problem)
					}
					if other, taken := named[eo.Name]; taken && other.normalized != ne {
						line, _ := d.Pos(other.key)
						return d.ErrAt(configfile.Resolve(n), p, "%s is also the name of endpoint %s (line %d); names must be unique",
							configfile.Q(eo.Name), bounded.Text(other.key.Value, configfile.MaxQuoted), line)
					}
					named[eo.Name] = namedBy{key, ne}
					return nil
				},
			})
			d.settings.EndpointOptions[key.Value] = eo
			return err
		}
	}
	return d.Mapping(n, path, fields)
}

func (d *fileDecoder) settingsSection(n *configfile.Node, path string) error {
	s := &d.settings
	dur := func(dst *time.Duration, off string) func(*configfile.Node, string) error {
		return func(n *configfile.Node, p string) (err error) {
			*dst, err = d.Duration(n, p, off)
			return err
		}
	}
	return d.Mapping(n, path, configfile.Fields{
		"reconnectMaxDelay": dur(&s.ReconnectMaxDelay, ""),
		"minConnectTimeout": dur(&s.MinConnectTimeout, ""),
		"keepaliveTime":     dur(&s.KeepaliveTime, "turn keepalive off"),
		"keepaliveTimeout":  dur(&s.KeepaliveTimeout, ""),
		"keepaliveWithoutCalls": func(n *configfile.Node, p string) (err error) {
			s.KeepaliveWithoutCalls, err = d.Bool(n, p)
			return err
		},
		"drainTimeout": dur(&s.DrainTimeout, ""),
		"switchingJitter": func(n *configfile.Node, p string) (err error) {
			s.SwitchingJitter, err = d.Number(n, p, "a number from 0 to 1", " (a fraction of SwitchingDelay)",
				func(v float64) bool { return v >= 0 && v <= 1 })
			return err
		},
		"health": func(n *configfile.Node, p string) error { return d.healthSection(n, p) },
	})
}

// healthSection reads settings.health into Settings.Health (health.go).
func (d *fileDecoder) healthSection(n *configfile.Node, path string) error {
	h := &d.settings.Health
	dur := func(dst *time.Duration) func(*configfile.Node, string) error {
		return func(n *configfile.Node, p string) (err error) {
			*dst, err = d.Duration(n, p, "")
			return err
		}
	}
	count := func(dst *int, hi uint64) func(*configfile.Node, string) error {
		return func(n *configfile.Node, p string) error {
			v, err := d.Uint(n, p, 0, hi)
			*dst = int(v)
			return err
		}
	}
	flag := func(dst *bool) func(*configfile.Node, string) error {
		return func(n *configfile.Node, p string) (err error) {
			*dst, err = d.Bool(n, p)
			return err
		}
	}
	return d.Mapping(n, path, configfile.Fields{
		"disabled":                   flag(&h.Disabled),
		"interval":                   dur(&h.Interval),
		"consecutiveFailures":        count(&h.ConsecutiveFailures, 1<<31-1),
		"failurePercentage":          count(&h.FailurePercentage, 100),
		"minimumCalls":               count(&h.MinimumCalls, 1<<31-1),
		"baseEjectionTime":           dur(&h.BaseEjectionTime),
		"maxEjectionTime":            dur(&h.MaxEjectionTime),
		"probeTimeout":               dur(&h.ProbeTimeout),
		"probeInterval":              dur(&h.ProbeInterval),
		"resourceExhaustedIsFailure": flag(&h.ResourceExhaustedIsFailure),
		"brownout": func(n *configfile.Node, p string) error {
			b := &h.Brownout
			return d.Mapping(n, p, configfile.Fields{
				"disabled": flag(&b.Disabled),
				"ratio": func(n *configfile.Node, p string) (err error) {
					b.Ratio, err = d.Number(n, p, "a number of at least 1", " (how many times slower than the fallback)",
						func(v float64) bool { return v >= 1 && !math.IsInf(v, 1) })
					return err
				},
				"margin":        dur(&b.Margin),
				"window":        dur(&b.Window),
				"probeInterval": dur(&b.ProbeInterval),
			})
		},
	})
}

// validate runs NewGCPMultiEndpoint's validation, places its error in the file, and returns
// the parsed form of the file's content.
func (d *fileDecoder) validate() (*parsedFile, error) {
	var f parsedFile
	var err error
	f.cfg, err = parseConfig(d.options)
	if err == nil {
		f.endpointOpts, err = parseEndpointOptions(d.settings.EndpointOptions)
	}
	if err == nil {
		f.directed, err = parseDirectedReads(d.settings.DirectedReads)
	}
	if err == nil {
		f.hedging, err = parseHedging(d.settings.Hedging)
	}
	if err == nil {
		f.tiers, err = parseTiers(d.settings.Tiers)
	}
	if err == nil {
		return &f, nil
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		return nil, err
	}
	path := ""
	switch {
	case strings.HasPrefix(ce.Problem, "Default"):
		path = "default"
	case strings.HasPrefix(ce.Problem, "no MultiEndpoints"):
		path = "multiEndpoints"
	case ce.Group != "" && ce.Index >= 0:
		path = fmt.Sprintf("multiEndpoints.%s.endpoints[%d]", ce.Group, ce.Index)
	case ce.Group != "" && d.Node("multiEndpoints."+ce.Group) != nil:
		path = "multiEndpoints." + ce.Group
	case ce.Endpoint != "":
		path = "endpoints." + ce.Endpoint
	}
	fe := &ConfigFileError{Field: path, Problem: strings.TrimPrefix(ce.Error(), ErrInvalidConfig.Error()+": "), Err: ce}
	fe.Line, fe.Column = d.Pos(d.Node(path))
	return nil, fe
}
