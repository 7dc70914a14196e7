package spannerme

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/protobuf/proto"
)

func TestParseConfigExamples(t *testing.T) {
	var parsed []*FileConfig
	for _, name := range []string{"config-example.yaml", "config-example.json"} {
		c, err := LoadConfig(filepath.Join("..", "testdata", name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		parsed = append(parsed, c)
	}
	// Protocol buffers compare with proto.Equal, not reflect.DeepEqual.
	wantDirected := &spannerpb.DirectedReadOptions{Replicas: &spannerpb.DirectedReadOptions_IncludeReplicas_{IncludeReplicas: &spannerpb.DirectedReadOptions_IncludeReplicas{
		ReplicaSelections: []*spannerpb.DirectedReadOptions_ReplicaSelection{{Location: "us-west2", Type: spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY}}}}}
	for i, p := range parsed {
		if dr := p.Settings.DirectedReads; len(dr) != 1 || !proto.Equal(dr["west"], wantDirected) {
			t.Errorf("example %d: DirectedReads %v, want west: %v", i, dr, wantDirected)
		}
		p.Settings.DirectedReads = nil
	}
	c := parsed[0]
	wantGroups := map[string]*multiendpoint.MultiEndpointOptions{
		"default": {Endpoints: []string{"psc-east4.p.googleapis.com:443", "10.20.0.5:443"}, RecoveryTimeout: 2 * time.Second, SwitchingDelay: 10 * time.Second},
		"west":    {Endpoints: []string{"psc-west2.p.googleapis.com:443", "psc-east4.p.googleapis.com:443"}, RecoveryTimeout: 2 * time.Second},
	}
	if !reflect.DeepEqual(c.Options.MultiEndpoints, wantGroups) || c.Options.Default != "default" {
		t.Errorf("groups %+v default %q", c.Options.MultiEndpoints, c.Options.Default)
	}
	if hasAffinity(c.Options.GRPCgcpConfig) || c.Options.GRPCgcpConfig.ChannelPool.MinSize != 4 {
		t.Errorf("GRPCgcpConfig %v, want no affinity and MinSize 4", c.Options.GRPCgcpConfig)
	}
	wantSettings := Settings{ReconnectMaxDelay: 5 * time.Second, MinConnectTimeout: 10 * time.Second, KeepaliveTime: 120 * time.Second,
		KeepaliveTimeout: 20 * time.Second, DrainTimeout: 5 * time.Minute, SwitchingJitter: 0.2,
		EndpointOptions: map[string]EndpointOptions{
			"psc-east4.p.googleapis.com:443": {Name: "psc-east4"},
			"10.20.0.5:443":                  {Name: "psc-east4-ip", Authority: "spanner.us-east4.rep.googleapis.com"},
		}}
	if !reflect.DeepEqual(c.Settings, wantSettings) {
		t.Errorf("settings %+v\nwant %+v", c.Settings, wantSettings)
	}
	// The JSON example says the same as the YAML one.
	j := parsed[1]
	if !reflect.DeepEqual(j.Options.MultiEndpoints, c.Options.MultiEndpoints) || !reflect.DeepEqual(j.Settings, c.Settings) ||
		hasAffinity(j.Options.GRPCgcpConfig) || len(c.Hash) != 64 || j.Hash == c.Hash {
		t.Errorf("JSON example differs: %+v %+v hash %s vs %s", j.Options, j.Settings, j.Hash, c.Hash)
	}
	// The parsed options are accepted as they are.
	if _, err := parseConfig(c.Options); err != nil {
		t.Error(err)
	}
}

func TestParseConfigMinimal(t *testing.T) {
	c, err := ParseConfig([]byte("default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Options.GRPCgcpConfig != nil || !reflect.DeepEqual(c.Settings, Settings{}) || c.Options.MultiEndpoints["d"].RecoveryTimeout != 0 {
		t.Errorf("a minimal file sets more than its groups: %+v %+v", c.Options, c.Settings)
	}
	c, err = ParseConfig([]byte("default: d\nmultiEndpoints: {d: {endpoints: [a:1]}}\npoolSize: 8\nsettings: {keepaliveTime: off}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Options.GRPCgcpConfig.ChannelPool.MinSize != 8 || len(c.Options.GRPCgcpConfig.Method) != 0 || c.Settings.KeepaliveTime >= 0 {
		t.Errorf("poolSize 8, keepalive off: %v %+v", c.Options.GRPCgcpConfig, c.Settings)
	}
}

func TestParseConfigErrors(t *testing.T) {
	const head = "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1, b:2]\n"
	for _, tc := range []struct {
		name, in    string
		line        int
		field, want string
		validation  bool // a *ConfigError of parseConfig
	}{
		{name: "empty", in: " \n", want: "the file is empty"},
		{name: "syntax", in: "default: d\nmultiEndpoints: [\n", line: 2, want: "not valid YAML or JSON"},
		{name: "not a mapping", in: "- a\n", line: 1, want: "want a mapping"},
		{name: "unknown top field", in: head + "defualt: x\n", line: 5, field: "defualt", want: "unknown field (did you mean default?)"},
		{name: "unknown group field", in: head + "    recoveryTime: 2s\n", line: 5, field: "multiEndpoints.d.recoveryTime", want: "did you mean recoveryTimeout?"},
		{name: "far from any field", in: head + "zzzzzzzzz: 1\n", line: 5, field: "zzzzzzzzz", want: "known fields: default, endpoints, multiEndpoints, poolSize, sessionAffinity, settings"},
		{name: "bad duration", in: head + "    switchingDelay: soon\n", line: 5, field: "multiEndpoints.d.switchingDelay", want: `invalid duration "soon"`},
		{name: "duration without unit", in: head + "    switchingDelay: 2\n", line: 5, field: "multiEndpoints.d.switchingDelay", want: `invalid duration "2"`},
		{name: "negative duration", in: head + "    recoveryTimeout: -1s\n", line: 5, field: "multiEndpoints.d.recoveryTimeout", want: "negative duration"},
		{name: "negative keepalive", in: head + "settings:\n  keepaliveTime: -1s\n", line: 6, field: "settings.keepaliveTime", want: "write off to turn keepalive off"},
		{name: "unknown setting", in: head + "settings:\n  drainTimout: 1s\n", line: 6, field: "settings.drainTimout", want: "did you mean drainTimeout?"},
		{name: "bad jitter", in: head + "settings:\n  switchingJitter: 1.5\n", line: 6, field: "settings.switchingJitter", want: `want a number from 0 to 1`},
		{name: "bad bool", in: head + "sessionAffinity: yes\n", line: 5, field: "sessionAffinity", want: `want true or false, got "yes"`},
		{name: "bad pool size", in: head + "poolSize: 0\n", line: 5, field: "poolSize", want: "from 1 to 1024"},
		{name: "twice", in: head + "default: d\n", line: 5, field: "default", want: "given twice (first at line 1)"},
		{name: "endpoint not a string", in: "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1, 443]\n", line: 4, field: "multiEndpoints.d.endpoints[1]", want: "quote it"},
		{name: "endpoints missing", in: "default: d\nmultiEndpoints:\n  d:\n    recoveryTimeout: 1s\n", line: 4, field: "multiEndpoints.d.endpoints", want: "required field missing"},
		{name: "default missing", in: "multiEndpoints:\n  d:\n    endpoints: [a:1]\n", line: 1, field: "default", want: "required field missing"},
		{name: "null group", in: "default: d\nmultiEndpoints:\n  d:\n", line: 3, field: "multiEndpoints.d", want: "got nothing (null)"},
		{name: "two documents", in: head + "---\ndefault: e\n", line: 5, want: "more than one YAML document"},
		{name: "authority", in: head + "endpoints:\n  b:2: {authority: 'x y'}\n", line: 6, field: "endpoints.b:2.authority", want: "not a host or host:port"},
		{name: "endpoint options of an unlisted endpoint", in: head + "endpoints:\n  c:3: {authority: x}\n", line: 6, field: "endpoints.c:3", want: "not listed in any group"},
		{name: "unknown endpoint option", in: head + "endpoints:\n  a:1: {serverName: x}\n", line: 6, field: "endpoints.a:1.serverName", want: "known fields: authority, name"},
		{name: "endpoint name misspelt", in: head + "endpoints:\n  a:1: {nmae: east}\n", line: 6, field: "endpoints.a:1.nmae", want: "did you mean name?"},
		{name: "endpoint name with a space", in: head + "endpoints:\n  a:1:\n    name: psc east4\n", line: 7, field: "endpoints.a:1.name", want: `"psc east4": ' ' (byte 3) is not an ASCII letter, digit, '.', '_' or '-'`},
		{name: "endpoint name beginning with a dash", in: head + "endpoints:\n  a:1: {name: -east}\n", line: 6, field: "endpoints.a:1.name", want: "must begin with an ASCII letter or digit"},
		{name: "endpoint name too long", in: head + "endpoints:\n  a:1: {name: " + strings.Repeat("x", 64) + "}\n", line: 6, field: "endpoints.a:1.name", want: "longer than 63 bytes"},
		{name: "endpoint name not a string", in: head + "endpoints:\n  a:1: {name: 4}\n", line: 6, field: "endpoints.a:1.name", want: "quote it"},
		{name: "endpoint name twice", in: head + "endpoints:\n  a:1: {name: east}\n  b:2:\n    name: east\n", line: 8, field: "endpoints.b:2.name", want: `"east" is also the name of endpoint a:1 (line 6); names must be unique`},
		// Mistakes found by NewGCPMultiEndpoint's own validation, placed in the file.
		{name: "default not a group", in: "default: e\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n", line: 1, field: "default", want: "Default names a MultiEndpoint that is not configured", validation: true},
		{name: "bad endpoint", in: "default: d\nmultiEndpoints:\n  d:\n    endpoints:\n      - a:1\n      - no-port\n", line: 6, field: "multiEndpoints.d.endpoints[1]", want: `group "d": endpoint 1 "no-port": not host:port`, validation: true},
		{name: "duplicate endpoint", in: "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1, a:1]\n", line: 4, field: "multiEndpoints.d.endpoints[1]", want: "duplicate endpoint", validation: true},
		{name: "no endpoints", in: "default: d\nmultiEndpoints:\n  d:\n    endpoints: []\n", line: 3, field: "multiEndpoints.d", want: "no endpoints", validation: true},
		{name: "no groups", in: "default: d\nmultiEndpoints: {}\n", line: 2, field: "multiEndpoints", want: "no MultiEndpoints configured", validation: true},
		{name: "JSON unknown field", in: "{\n\t\"default\": \"d\",\n\t\"multiEndpoints\": {\"d\": {\"endpoints\": [\"a:1\"]}},\n\t\"pool\": 2\n}\n", line: 4, field: "pool", want: "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.in))
			var fe *ConfigFileError
			if !errors.As(err, &fe) || c != nil {
				t.Fatalf("ParseConfig = %v, %v; want a *ConfigFileError", c, err)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("%v does not wrap ErrInvalidConfig", err)
			}
			if fe.Line != tc.line || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (line %d, field %q); want line %d, field %q, text %q", err, fe.Line, fe.Field, tc.line, tc.field, tc.want)
			}
			var ce *ConfigError
			if errors.As(err, &ce) != tc.validation {
				t.Errorf("errors.As(*ConfigError) = %v, want %v", !tc.validation, tc.validation)
			}
		})
	}
}

func TestLoadConfigNamesFile(t *testing.T) {
	p := filepath.Join("..", "testdata", "config-invalid.yaml")
	_, err := LoadConfig(p)
	if err == nil || !strings.HasPrefix(err.Error(), "spannerme configuration: "+p+":6:5: multiEndpoints.default.recoveryTime: unknown field") {
		t.Errorf("LoadConfig(%s) = %v", p, err)
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, maxConfigSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(big); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

func TestParseConfigNeverPanics(t *testing.T) {
	// Odd but legal YAML shapes reach every decoder with the wrong kind of node.
	for _, in := range []string{
		"default: [x]\nmultiEndpoints: {}", "default: d\nmultiEndpoints: [a]", "default: d\nmultiEndpoints:\n  d: [a]",
		"default: d\nmultiEndpoints:\n  d:\n    endpoints: a:1", "default: d\nmultiEndpoints:\n  d:\n    endpoints: [[a]]",
		"settings: 3", "endpoints: [a]\ndefault: d\nmultiEndpoints: {d: {endpoints: [a:1]}}", "? [a]\n: b",
		"a: &x {b: *x}", "default: &d d\nmultiEndpoints: {*d : {endpoints: [a:1]}}", "!!binary aGVsbG8=", "null", "42",
		"default: d\nmultiEndpoints: {d: {endpoints: [a:1], recoveryTimeout: {}}}", "poolSize: 99999999999",
	} {
		if _, err := ParseConfig([]byte(in)); err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseConfig(%q) = %v, want nil or ErrInvalidConfig", in, err)
		}
	}
	// An alias to a group is followed.
	c, err := ParseConfig([]byte("default: d\nmultiEndpoints:\n  d: &g {endpoints: [a:1]}\n  e: *g\n"))
	if err != nil || len(c.Options.MultiEndpoints) != 2 {
		t.Errorf("aliases: %v %v", c, err)
	}
}
