package spannerme

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
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
		"default": {Endpoints: []string{"psc-east4.p.googleapis.com:443", "10.20.0.5:443"}, RecoveryTimeout: 2 * time.Second, SwitchingDelay: 30 * time.Second},
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
		{name: "syntax", in: "default: d\nmultiEndpoints: [\n", line: 2, want: "not valid YAML"},
		{name: "not a mapping", in: "- a\n", line: 0, want: "not a configuration file: its content (4 bytes) is a list of 1 item"},
		{name: "unknown top field", in: head + "defualt: x\n", line: 5, field: "defualt", want: "unknown field (did you mean default?)"},
		{name: "unknown group field", in: head + "    recoveryTime: 2s\n", line: 5, field: "multiEndpoints.d.recoveryTime", want: "did you mean recoveryTimeout?"},
		{name: "far from any field", in: head + "zzzzzzzzz: 1\n", line: 5, field: "zzzzzzzzz", want: "known fields: default, endpoints, multiEndpoints, poolSize, sessionAffinity, settings"},
		{name: "quoted pool size", in: head + "poolSize: '4'\n", line: 5, field: "poolSize", want: `got "4" (a string: write the number without quotes)`},
		{name: "quoted bool", in: head + "sessionAffinity: \"true\"\n", line: 5, field: "sessionAffinity", want: `got the string "true" (write it without quotes)`},
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
		{name: "bad endpoint of endpoint options", in: head + "endpoints:\n  no-port: {authority: x}\n", line: 6, field: "endpoints.no-port", want: "not host:port"},
		{name: "unknown endpoint option", in: head + "endpoints:\n  a:1: {serverName: x}\n", line: 6, field: "endpoints.a:1.serverName", want: "unknown field (did you mean name?)"},
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
	if err := os.WriteFile(big, make([]byte, configfile.MaxSize+1), 0o600); err != nil {
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

// parseErr parses in (as the named file when name is not "") and returns its
// *ConfigFileError, failing the test when there is none.
func parseErr(t *testing.T, name, in string) *ConfigFileError {
	t.Helper()
	var c *FileConfig
	var err error
	if name == "" {
		c, err = ParseConfig([]byte(in))
	} else {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err = LoadConfig(path)
	}
	var fe *ConfigFileError
	if !errors.As(err, &fe) || c != nil || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("parse = %v, %v; want a *ConfigFileError wrapping ErrInvalidConfig", c, err)
	}
	return fe
}

// JSON is parsed by encoding/json: what YAML would also accept (a trailing comma, a quoted
// number, a comment, a key without quotes) is an error with the line and column of the
// mistake; a .json file is JSON whatever its first character.
func TestParseConfigJSONIsStrict(t *testing.T) {
	const ok = "{\n\t\"default\": \"d\",\n\t\"multiEndpoints\": {\"d\": {\"endpoints\": [\"a:1\"]}}"
	for _, tc := range []struct {
		name, file, in string
		line, column   int
		field, want    string
	}{
		{name: "trailing comma in a list", in: "{\n\t\"default\": \"d\",\n\t\"multiEndpoints\": {\"d\": {\"endpoints\": [\"a:1\",]}}\n}\n",
			line: 3, column: 47, want: "JSON allows no trailing comma"},
		{name: "trailing comma in an object", in: ok + ",\n}\n", line: 4, column: 1, want: "JSON allows no trailing comma"},
		{name: "quoted number", in: ok + ",\n\t\"poolSize\": \"4\"\n}\n", line: 4, column: 14, field: "poolSize",
			want: `want a whole number from 1 to 1024, got "4" (a string: write the number without quotes)`},
		{name: "fraction for a whole number", in: ok + ",\n\t\"poolSize\": 4.0\n}\n", line: 4, column: 14, field: "poolSize", want: "want a whole number"},
		{name: "quoted bool", in: ok + ",\n\t\"sessionAffinity\": \"false\"\n}\n", line: 4, column: 21, field: "sessionAffinity", want: "write it without quotes"},
		{name: "quoted fraction", in: ok + ",\n\t\"settings\": {\"switchingJitter\": \"0.2\"}\n}\n", line: 4, column: 34, field: "settings.switchingJitter", want: "write the number without quotes"},
		{name: "number for a string", in: "{\"default\": 1, \"multiEndpoints\": {}}", line: 1, column: 13, field: "default", want: "want a string"},
		{name: "comment", in: ok + "\n\t// the pools\n}\n", line: 4, column: 2, want: "not valid JSON: invalid character '/'"},
		{name: "key without quotes", in: "{default: \"d\"}", line: 1, column: 2, want: "looking for beginning of object key string (the file starts with '{', so it is read as JSON)"},
		{name: "unterminated", in: ok + "\n", line: 4, column: 1, want: "not valid JSON: unexpected end of JSON input"},
		{name: "data after the object", in: ok + "\n}\n{}\n", line: 5, column: 1, want: "after top-level value"},
		{name: "number too large", in: ok + ",\n\t\"poolSize\": 1e400\n}\n", line: 4, column: 14, field: "poolSize", want: `want a whole number from 1 to 1024, got "1e400"`},
		{name: "nested too deep", in: "{\"default\": " + strings.Repeat("[", 10001), line: 1, column: 10012, want: "exceeded max depth"},
		{name: "key twice", in: ok + ",\n\t\"default\": \"d\"\n}\n", line: 4, column: 2, field: "default", want: "given twice (first at line 2)"},
		{name: "YAML in a .json file", file: "spannerme.json", in: "default: d\nmultiEndpoints: {d: {endpoints: [a:1]}}\n", line: 1, column: 1, want: "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := parseErr(t, tc.file, tc.in)
			if fe.Line != tc.line || fe.Column != tc.column || fe.Field != tc.field || !strings.Contains(fe.Error(), tc.want) {
				t.Errorf("error %q (line %d, column %d, field %q); want line %d, column %d, field %q, text %q",
					fe, fe.Line, fe.Column, fe.Field, tc.line, tc.column, tc.field, tc.want)
			}
			if tc.file != "" && fe.File == "" {
				t.Errorf("error %q does not name the file", fe)
			}
		})
	}
	// The same content without the mistakes parses, tabs and all, as does a .JSON file.
	c, err := ParseConfig([]byte(ok + ",\n\t\"poolSize\": 4,\n\t\"sessionAffinity\": true,\n\t\"settings\": {\"switchingJitter\": 0.25, \"health\": {\"minimumCalls\": 7}}\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Options.GRPCgcpConfig.ChannelPool.MinSize != 4 || !hasAffinity(c.Options.GRPCgcpConfig) || c.Settings.SwitchingJitter != 0.25 || c.Settings.Health.MinimumCalls != 7 {
		t.Errorf("parsed %+v %+v", c.Options.GRPCgcpConfig, c.Settings)
	}
	path := filepath.Join(t.TempDir(), "SPANNERME.JSON")
	if err := os.WriteFile(path, []byte(ok+"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err != nil {
		t.Errorf("LoadConfig(%s): %v", path, err)
	}
	// A string keeps JSON's escapes: \u0031 is "1".
	c, err = ParseConfig([]byte(`{"default": "d\u0031", "multiEndpoints": {"d1": {"endpoints": ["a:1"], "recoveryTimeout": "1\u0073"}}}`))
	if err != nil || c.Options.Default != "d1" || c.Options.MultiEndpoints["d1"].RecoveryTimeout != time.Second {
		t.Errorf("escapes: %+v, %v", c, err)
	}
}

// A YAML file indented with tabs fails with an error that names the tab and its line, not
// the parser's "found character that cannot start any token"; a tab that YAML allows (inside
// a flow mapping, or after the indentation of a block scalar) is not an error.
func TestParseConfigNamesTabIndentation(t *testing.T) {
	for _, tc := range []struct {
		name, in     string
		line, column int
	}{
		{"whole file", "default: d\nmultiEndpoints:\n\td:\n\t\tendpoints: [a:1]\n", 3, 1},
		{"one line", "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n  \trecoveryTimeout: 1s\n", 5, 3},
		{"a list item", "default: d\nmultiEndpoints:\n  d:\n    endpoints:\n\t- a:1\n", 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := parseErr(t, "", tc.in)
			want := fmt.Sprintf("line %d column %d: not valid YAML: tabs are not allowed for indentation", tc.line, tc.column)
			if fe.Line != tc.line || fe.Column != tc.column || !strings.Contains(fe.Error(), want) {
				t.Errorf("error %q; want %q", fe, want)
			}
		})
	}
	for _, in := range []string{
		"default: d\nmultiEndpoints: {d: {endpoints: [a:1],\n\trecoveryTimeout: 1s}}\n",
		"# a comment\ndefault: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n",
	} {
		if _, err := ParseConfig([]byte(in)); err != nil {
			t.Errorf("ParseConfig(%q) = %v", in, err)
		}
	}
	// An error elsewhere in a file whose tab is allowed is not blamed on the tab.
	fe := parseErr(t, "", "default: d\nmultiEndpoints: {d: {endpoints: [a:1],\n\trecoveryTimeout: 1s}}\nsettings: [\n")
	if strings.Contains(fe.Error(), "tab") {
		t.Errorf("error %q blames the tab", fe)
	}
}

// Every unknown field, in YAML and JSON and at every level of the file, names the nearest
// known field; one far from every field also lists them.
func TestParseConfigUnknownFieldNamesNearest(t *testing.T) {
	const head = "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n"
	const jsonHead = "{\"default\": \"d\", \"multiEndpoints\": {\"d\": {\"endpoints\": [\"a:1\"]"
	for _, tc := range []struct {
		name, in, field, want string
	}{
		{"top", head + "sessionAfinity: true\n", "sessionAfinity", "did you mean sessionAffinity?"},
		{"top, other case", head + "PoolSize: 2\n", "PoolSize", "did you mean poolSize?"},
		{"group", head + "    switchDelay: 1s\n", "multiEndpoints.d.switchDelay", "did you mean switchingDelay?"},
		{"group, part of a name", head + "    timeout: 1s\n", "multiEndpoints.d.timeout", "did you mean recoveryTimeout?"},
		{"endpoint options", head + "endpoints:\n  a:1: {authorty: x}\n", "endpoints.a:1.authorty", "did you mean authority?"},
		{"settings", head + "settings:\n  keepAlive: 1s\n", "settings.keepAlive", "did you mean keepaliveTime?"},
		{"health", head + "settings:\n  health:\n    consecutiveFailure: 3\n", "settings.health.consecutiveFailure", "did you mean consecutiveFailures?"},
		{"health, two words swapped", head + "settings:\n  health:\n    ejectionTimeBase: 3s\n", "settings.health.ejectionTimeBase", "did you mean "},
		{"JSON group", jsonHead + ", \"switchDelay\": \"1s\"}}}", "multiEndpoints.d.switchDelay", "did you mean switchingDelay?"},
		{"JSON top", jsonHead + "}}, \"multiEndpoint\": {}}", "multiEndpoint", "did you mean multiEndpoints?"},
		{"JSON health", jsonHead + "}}, \"settings\": {\"health\": {\"probeIntervall\": \"1s\"}}}", "settings.health.probeIntervall", "did you mean probeInterval?"},
		{"far from every field", head + "zzzzzzzzz: 1\n", "zzzzzzzzz", "? known fields: default, endpoints, multiEndpoints, poolSize, sessionAffinity, settings)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := parseErr(t, "", tc.in)
			if fe.Field != tc.field || !strings.Contains(fe.Error(), "unknown field (did you mean ") || !strings.Contains(fe.Error(), tc.want) {
				t.Errorf("error %q (field %q); want field %q, text %q", fe, fe.Field, tc.field, tc.want)
			}
		})
	}
}

// The file and Settings.EndpointOptions follow one rule for the options of an endpoint that
// no group lists: both accept them, and they apply once a group lists the endpoint (here
// added by UpdateMultiEndpoints, which takes no endpoint options). A malformed endpoint is
// refused by both, naming it.
func TestEndpointOptionsOfUnlistedEndpointAcceptedByFileAndSettings(t *testing.T) {
	cert, roots := testCert(t)
	var auth1, auth2 authorities
	a1 := startTLSServer(t, "one", cert, &auth1)
	a2 := startTLSServer(t, "two", cert, &auth2)
	file := fmt.Sprintf("default: g\nmultiEndpoints:\n  g:\n    endpoints: [%q]\nendpoints:\n  %q: {authority: %s}\n  %q: {authority: %s}\n",
		a1, a1, testServerName, a2, testServerName)
	fc, err := ParseConfig([]byte(file))
	if err != nil {
		t.Fatalf("a file with options of an endpoint no group lists: %v", err)
	}
	if got := fc.Settings.EndpointOptions[a2]; got.Authority != testServerName {
		t.Fatalf("EndpointOptions[%s] = %+v", a2, got)
	}
	s := fastSettings(nil)
	s.EndpointOptions = fc.Settings.EndpointOptions
	gme, err := newTLSGME(t, a1, s, roots)
	if err != nil {
		t.Fatalf("Settings with options of an endpoint no group lists: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitServedBy(t, ctx, gme, "one", 15*time.Second)
	if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, a2, a1)})); err != nil {
		t.Fatal(err)
	}
	// Without its authority the added endpoint would fail its TLS handshake and never serve.
	waitServedBy(t, ctx, gme, "two", 15*time.Second)
	if got := auth2.last(); got != testServerName {
		t.Errorf(":authority of the endpoint added later = %q, want %q", got, testServerName)
	}

	// A malformed endpoint that no group lists: refused by both, naming it.
	fe := parseErr(t, "", "default: g\nmultiEndpoints:\n  g:\n    endpoints: [a:1]\nendpoints:\n  no-port: {authority: x}\n")
	if fe.Field != "endpoints.no-port" || !strings.Contains(fe.Error(), "not host:port") {
		t.Errorf("file: %v", fe)
	}
	_, err = NewGCPMultiEndpointWithSettings(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "a:1")}),
		Settings{EndpointOptions: map[string]EndpointOptions{"no-port": {Authority: "x"}}}, insecureDial)
	if ce := (*ConfigError)(nil); !errors.As(err, &ce) || ce.Endpoint != "no-port" {
		t.Errorf("Settings: %v, want a *ConfigError naming no-port", err)
	}
}
