package spannerme

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.yaml.in/yaml/v3"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// FileConfig is a parsed configuration file (LoadConfig, ParseConfig): what
// NewMultiEndpointClientWithSettings and NewGCPMultiEndpointWithSettings take. The file's
// schema is in docs/configuration.md; testdata/config-*.yaml and .json are
// examples.
type FileConfig struct {
	// Options holds the groups (MultiEndpoints) and the Default group, and, when the file
	// sets poolSize or sessionAffinity, GRPCgcpConfig (else nil: the defaults). DialFunc is
	// nil. Options was validated as NewGCPMultiEndpoint validates it.
	Options *grpcgcp.GCPMultiEndpointOptions
	// Settings holds the file's settings section, EndpointOptions from its endpoints
	// section, and DirectedReads and Hedging from its groups' directedReads and hedging. What a file cannot hold is zero (Logger, OnSwitch, OnHealth, MeterProvider,
	// Health.Probe): set it before use.
	Settings Settings
	// Hash is the hex SHA-256 of the file's bytes.
	Hash string
}

// ConfigFileError is a mistake in a configuration file: where it is and what is wrong. Use
// errors.As to get it. It wraps ErrInvalidConfig, and Err when not nil.
type ConfigFileError struct {
	// File is the path given to LoadConfig; "" for ParseConfig.
	File string
	// Line and Column locate the mistake (1-based); 0 when unknown (Column of a syntax
	// error) or the mistake is the whole file's.
	Line, Column int
	// Field is the path of the offending field, e.g. "multiEndpoints.default.recoveryTimeout"
	// or "multiEndpoints.default.endpoints[1]"; "" for the whole file.
	Field string
	// Problem says what is wrong.
	Problem string
	// Err is the *ConfigError of a mistake found by the same validation as
	// NewGCPMultiEndpoint's, or nil.
	Err error
}

func (e *ConfigFileError) Error() string {
	if e.File == "" { // placed by line and column alone, as the decoder words it
		return "spannerme configuration: " + (&configfile.Error{Line: e.Line, Column: e.Column, Field: e.Field, Problem: e.Problem}).Error()
	}
	var b strings.Builder
	b.WriteString("spannerme configuration: ")
	switch {
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	default:
		b.WriteString(e.File + ": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

// Unwrap returns ErrInvalidConfig and Err.
func (e *ConfigFileError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidConfig, e.Err}
	}
	return []error{ErrInvalidConfig}
}

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

// The limits of what a ConfigFileError holds: its Field holds at most maxErrorField bytes
// and its Problem at most maxErrorProblem; what is cut ends with a marker ("…[cut: N bytes in
// all]"). A value of the file is quoted with at most configfile.MaxQuoted bytes of it.
const (
	maxErrorField   = 256
	maxErrorProblem = 512
)

// LoadConfig reads and parses the configuration file at path, YAML or JSON, as ParseConfig
// does; a file whose name ends in ".json" (in any case) is read as JSON whatever its first
// character. It is LoadConfigContext with a deadline of 10 seconds for reading the file.
// Errors and concurrency: LoadConfigContext's.
func LoadConfig(path string) (*FileConfig, error) {
	ctx, cancel := context.WithTimeout(context.Background(), configfile.ReadTimeout)
	defer cancel()
	return LoadConfigContext(ctx, path)
}

// LoadConfigContext is LoadConfig with ctx bounding the read of the file: it returns when ctx
// ends, whatever the read is doing (a read stuck on a network or FUSE file system finishes
// in its own goroutine). The file must be a regular file (or a symlink to one): it is opened
// without blocking and anything else (a named pipe, a directory, a device, a socket) is
// refused, naming its kind. It reads at most 1 MiB and one byte more: a larger file is
// refused. Errors: a *ConfigFileError naming the file (and the line and field of a mistake
// in it) for a file that is not a regular file, is too large, or is not a valid
// configuration; the read error otherwise (wrapping fs.ErrNotExist for a missing file, and
// ctx's error when ctx ended first). It is safe for concurrent use.
func LoadConfigContext(ctx context.Context, path string) (*FileConfig, error) {
	data, _, err := configfile.ReadFileContext(ctx, path)
	if err != nil {
		return nil, configReadError(path, err)
	}
	c, _, err := parseConfigFile(data, path)
	return c, err
}

// configReadError is the error of LoadConfig and of a watcher for err, an error of
// configfile.ReadFile: a *ConfigFileError for a file refused by its kind or size, else err
// prefixed.
func configReadError(path string, err error) error {
	if fe := (*configfile.Error)(nil); errors.As(err, &fe) {
		return &ConfigFileError{File: path, Problem: fe.Problem}
	}
	return fmt.Errorf("spannerme configuration: %w", err)
}

// ParseConfig parses a configuration file's content, YAML or JSON. Content whose first
// character other than white space is '{' is JSON, parsed by encoding/json (RFC 8259: no
// trailing commas, no comments); anything else is YAML (go.yaml.in/yaml/v3), where a tab
// used for indentation is an error that says so.
//
// It is strict: an unknown field (the error names the nearest known one), a value of the
// wrong type (a number or true/false written in quotes is a string: "poolSize": "4" is an
// error), a bad duration, a field given twice or an invalid configuration (as
// NewGCPMultiEndpoint judges it) is an error. Options of an endpoint that no group lists are
// accepted, as Settings.EndpointOptions accepts them: they apply once a group lists the
// endpoint. Errors are *ConfigFileError, naming the line, the column when known, and the
// field.
//
// It is bounded: content over 1 MiB, more than 100,000 values (every mapping, list, key and
// scalar counts one; a YAML alias, *name, counts as the values of its anchor), more than
// 1000 groups, 100 endpoints in a group, 1000 distinct endpoints in all or 1000 entries in
// the endpoints section is refused. Its time and memory are linear in len(data). Content
// that is one value or a list (an access token, a password, a key: a path pointed at the
// wrong file) is "not a configuration file", with its kind and length and none of it quoted.
// Any other error quotes at most 80 bytes of any value of the file, and its Field and Problem
// hold at most 256 and 512 bytes, each ending with "…[cut: N bytes in all]" when cut. It is
// safe for concurrent use and does not keep data.
func ParseConfig(data []byte) (*FileConfig, error) {
	c, _, err := parseConfigFile(data, "")
	return c, err
}

// parseConfigFile is ParseConfig of the content of the file at path ("" for none): a path
// ending in ".json" is read as JSON, and its errors name the file. It also returns the
// parsed form of what it validated, which a watcher applies as is.
func parseConfigFile(data []byte, path string) (*FileConfig, *parsedFile, error) {
	c, parsed, err := parseConfigData(data, strings.EqualFold(filepath.Ext(path), ".json"))
	if de := (*configfile.Error)(nil); errors.As(err, &de) {
		err = &ConfigFileError{Line: de.Line, Column: de.Column, Field: de.Field, Problem: de.Problem}
	}
	if fe := (*ConfigFileError)(nil); errors.As(err, &fe) {
		fe.File = path
		fe.Field = bounded.Text(fe.Field, maxErrorField)
		fe.Problem = bounded.Text(fe.Problem, maxErrorProblem)
	}
	return c, parsed, err
}

func parseConfigData(data []byte, isJSON bool) (*FileConfig, *parsedFile, error) {
	dec, root, err := configfile.Parse(data, isJSON)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(data)
	d := &fileDecoder{Decoder: dec}
	if err := dec.Root(root); err != nil {
		return nil, nil, err
	}
	if err := d.decode(root); err != nil {
		return nil, nil, err
	}
	c := &FileConfig{Options: d.options, Settings: d.settings, Hash: hex.EncodeToString(sum[:])}
	parsed, err := d.validate()
	if err != nil {
		return nil, nil, err
	}
	return c, parsed, nil
}

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
		"directedReads": func(n *configfile.Node, p string) error { return d.directedReads(name, n, p) },
		"hedging":       func(n *configfile.Node, p string) error { return d.hedging(name, n, p) },
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
			ne, problem := normalizeEndpoint(key.Value)
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
