package spannerme

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spannerme/spanner-multiendpoint/internal/endpointname"
)

// Native fuzz targets (`make fuzz` runs each for FUZZTIME). Their seeds (f.Add below and
// testdata/fuzz/<target>/) run as ordinary tests in `make test`.

// addConfigSeeds adds the example files and the hostile ones of configfile_limits_test.go.
func addConfigSeeds(f *testing.F, ext string) {
	f.Helper()
	examples, err := filepath.Glob(filepath.Join("..", "testdata", "config-*"+ext))
	if err != nil || len(examples) == 0 {
		f.Fatalf("no example files (%v)", err)
	}
	for _, p := range examples {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// The hostile files, of the size the tests refuse them at, where that is small; the
	// others cut down to a few kilobytes (a seed is mutated and minimized byte by byte, so a
	// large one starves the fuzzer).
	for _, tc := range hostileConfigs() {
		if len(tc.in) <= 8<<10 {
			f.Add([]byte(tc.in))
		}
	}
	for _, in := range []string{
		aliasGroupsYAML(4 << 10), oneLineJSON(8 << 10), manyGroupsYAML(100), groupsOfYAML(10, 200), endpointOptionsYAML(100),
		strings.Repeat("[", 2000) + strings.Repeat("]", 2000), "{" + strings.Repeat(`"a":{`, 2000) + strings.Repeat("}", 2001),
		`{"a":[` + strings.Repeat("1,", 2000) + "1]}", pemKey()[:1000],
	} {
		f.Add([]byte(in))
	}
}

// checkParsed is what holds for any input: an error is a bounded *ConfigFileError wrapping
// ErrInvalidConfig with a position inside the file; a success is a configuration that
// NewGCPMultiEndpoint's validation accepts, within the limits.
func checkParsed(t *testing.T, data []byte, c *FileConfig, err error) {
	t.Helper()
	if err != nil {
		var fe *ConfigFileError
		if c != nil || !errors.As(err, &fe) || !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("ParseConfig = %v, %v; want nil and a *ConfigFileError", c, err)
		}
		checkBoundedError(t, fe)
		if lines := strings.Count(string(data), "\n") + 1; fe.Line < 0 || fe.Line > lines+1 {
			t.Fatalf("error at line %d of a file of %d lines: %v", fe.Line, lines, err)
		}
		return
	}
	if _, err := parseConfig(c.Options); err != nil {
		t.Fatalf("accepted a configuration NewGCPMultiEndpoint refuses: %v", err)
	}
	if n := len(c.Options.MultiEndpoints); n == 0 || n > maxGroups {
		t.Fatalf("accepted %d groups", n)
	}
	for name, g := range c.Options.MultiEndpoints {
		if len(g.Endpoints) == 0 || len(g.Endpoints) > maxGroupEndpoints {
			t.Fatalf("accepted group %q of %d endpoints", name, len(g.Endpoints))
		}
	}
}

func FuzzParseConfigYAML(f *testing.F) {
	addConfigSeeds(f, ".yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, _, err := parseConfigFile(data, "")
		checkParsed(t, data, c, err)
	})
}

func FuzzParseConfigJSON(f *testing.F) {
	addConfigSeeds(f, ".json")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, _, err := parseConfigFile(data, "spannerme.json")
		checkParsed(t, data, c, err)
	})
}

// FuzzEndpoint: an endpoint is accepted or refused with a problem; an accepted one's
// normalized form is accepted as itself.
func FuzzEndpoint(f *testing.F) {
	for _, e := range []string{
		"psc-east4:443", "10.20.0.5:443", "[::1]:443", "https://psc.example.com", "https://psc.example.com:8443/",
		"dns:///psc.example.com:443", "dns://8.8.8.8/psc.example.com", "passthrough:///10.0.0.1:443", "unix:/tmp/s",
		"unix:///tmp/s", "unix-abstract:name", "no-port", ":443", "host:0", "host:65536", "http://x:1", "https://a/b",
		"dns:", "a b:1", " a:1", "[::1", "h:1\x00", strings.Repeat("a", 5000) + ":1", "ftp://x", "https://[::1]",
	} {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, e string) {
		n, problem := endpointname.Normalize(e)
		if (problem == "") == (n == "") {
			t.Fatalf("endpointname.Normalize(%q) = %q, %q: want exactly one of them", e, n, problem)
		}
		if problem != "" {
			return
		}
		if n2, p2 := endpointname.Normalize(n); n2 != n || p2 != "" {
			t.Fatalf("endpointname.Normalize(%q) = %q, but endpointname.Normalize(%q) = %q, %q", e, n, n, n2, p2)
		}
	})
}
