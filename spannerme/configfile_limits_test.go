package spannerme

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// Hostile configuration files: each is refused, quickly and in bounded memory
// (BenchmarkParseConfigHostile measures them; FuzzParseConfig starts from them).

// aliasGroupsYAML is a small YAML file whose groups are aliases of one group of 100
// endpoints, written out to about size bytes: expanded, half a million endpoint entries
// at 40 KB.
func aliasGroupsYAML(size int) string {
	var b strings.Builder
	b.WriteString("default: g0\nmultiEndpoints:\n  g0: &g {endpoints: [")
	for i := range 100 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "h%d:1", i)
	}
	b.WriteString("]}\n")
	for i := 1; b.Len() < size; i++ {
		fmt.Fprintf(&b, "  g%d: *g\n", i)
	}
	return b.String()
}

// nestedAliasesYAML is the classic "billion laughs": each anchor lists the one before ten
// times.
func nestedAliasesYAML() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x:1, x:1, x:1, x:1, x:1, x:1, x:1, x:1, x:1, x:1]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	return b.String()
}

// oneLineJSON is a one-line JSON file of about size bytes: one group with as many endpoints
// as fit.
func oneLineJSON(size int) string {
	var b strings.Builder
	b.WriteString(`{"default":"g","multiEndpoints":{"g":{"endpoints":["h0:1"`)
	for i := 1; b.Len() < size-64; i++ {
		fmt.Fprintf(&b, `,"h%d:1"`, i)
	}
	b.WriteString("]}}}")
	return b.String()
}

// pemKey looks like a PEM private key: what a configuration path pointed at the wrong file
// reads.
func pemKey() string {
	body := strings.Repeat("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n", 26)
	return "-----BEGIN PRIVATE KEY-----\n" + body + "-----END PRIVATE KEY-----\n"
}

// manyGroupsYAML has n groups of one endpoint each.
func manyGroupsYAML(n int) string {
	var b strings.Builder
	b.WriteString("default: g0\nmultiEndpoints:\n")
	for i := range n {
		fmt.Fprintf(&b, "  g%d: {endpoints: [h%d:1]}\n", i, i)
	}
	return b.String()
}

// groupOfYAML has one group of n endpoints.
func groupOfYAML(n int) string {
	eps := make([]string, n)
	for i := range eps {
		eps[i] = fmt.Sprintf("h%d:1", i)
	}
	return "default: g\nmultiEndpoints:\n  g:\n    endpoints: [" + strings.Join(eps, ", ") + "]\n"
}

// groupsOfYAML has groups of per endpoints each, all distinct, total endpoints in all.
func groupsOfYAML(per, total int) string {
	var b strings.Builder
	b.WriteString("default: g0\nmultiEndpoints:\n")
	for g := 0; g*per < total; g++ {
		eps := make([]string, 0, per)
		for i := g * per; i < min(total, (g+1)*per); i++ {
			eps = append(eps, fmt.Sprintf("h%d:1", i))
		}
		fmt.Fprintf(&b, "  g%d: {endpoints: [%s]}\n", g, strings.Join(eps, ", "))
	}
	return b.String()
}

// endpointOptionsYAML has n entries in its endpoints section.
func endpointOptionsYAML(n int) string {
	var b strings.Builder
	b.WriteString(groupOfYAML(1) + "endpoints:\n")
	for i := range n {
		fmt.Fprintf(&b, "  h%d:1: {name: e%d}\n", i, i)
	}
	return b.String()
}

// hostileConfigs are files the parser must refuse, each with what the error says.
func hostileConfigs() []struct{ name, in, want string } {
	return []struct{ name, in, want string }{
		{"aliased groups, 40 KB", aliasGroupsYAML(40 << 10), "aliases expanded"},
		{"aliased groups, 116 KB", aliasGroupsYAML(116 << 10), "aliases expanded"},
		{"nested aliases", nestedAliasesYAML(), "aliases expanded"},
		{"alias in its own anchor", "default: &d {a: *d}\n", "aliases expanded"},
		{"one-line JSON, 1 MiB", oneLineJSON(1 << 20), "endpoints: a group has at most 100"},
		{"one-line JSON of numbers, 1 MiB", `{"a":[` + strings.Repeat("1,", 1<<19-8) + "1]}", "more than 100000 values"},
		{"one-line JSON, 256 KiB", oneLineJSON(256 << 10), "endpoints: a group has at most 100"},
		{"PEM key", pemKey(), "not a configuration file: its content"},
		{"one JSON string of 1 MiB", `{"default":"` + strings.Repeat("x", 1<<20-16) + `"}`, "required field missing"},
		{"too many groups", manyGroupsYAML(1001), "1001 groups: at most 1000"},
		{"too many endpoints in a group", groupOfYAML(101), "101 endpoints: a group has at most 100"},
		{"too many distinct endpoints", groupsOfYAML(100, 1001), "more than 1000 distinct endpoints"},
		{"too many endpoint options", endpointOptionsYAML(1001), "1001 entries: at most 1000"},
		{"deep nesting", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), "not valid YAML"},
		{"deep JSON nesting", "{" + strings.Repeat(`"a":{`, 20000) + strings.Repeat("}", 20001), "not valid JSON"},
	}
}

func TestParseConfigRefusesHostileInput(t *testing.T) {
	for _, tc := range hostileConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.in))
			var fe *ConfigFileError
			if c != nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseConfig = %v, %v; want a *ConfigFileError saying %q", c, err, tc.want)
			}
			checkBoundedError(t, fe)
		})
	}
}

// The limits themselves are accepted.
func TestParseConfigAcceptsUpToTheLimits(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"1000 groups", manyGroupsYAML(1000)},
		{"100 endpoints in a group", groupOfYAML(100)},
		{"1000 distinct endpoints", groupsOfYAML(100, 1000)},
		{"1000 endpoint options", endpointOptionsYAML(1000)},
		{"aliased groups, within the values' limit", aliasGroupsYAML(800)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseConfig([]byte(tc.in)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkBoundedError fails unless fe echoes the file within the stated limits.
func checkBoundedError(t *testing.T, fe *ConfigFileError) {
	t.Helper()
	const markerMax = len("…[cut: 1048576 bytes in all]")
	if len(fe.Field) > maxErrorField+markerMax || len(fe.Problem) > maxErrorProblem+markerMax {
		t.Errorf("field of %d bytes, problem of %d bytes: over the limits (%d, %d)", len(fe.Field), len(fe.Problem), maxErrorField, maxErrorProblem)
	}
}

// ParseConfig has the size cap LoadConfig has.
func TestParseConfigRefusesOversizedInput(t *testing.T) {
	in := []byte(groupOfYAML(1) + "#" + strings.Repeat("x", configfile.MaxSize) + "\n")
	c, err := ParseConfig(in)
	if c != nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Errorf("ParseConfig of %d bytes = %v, %v", len(in), c, err)
	}
}

// A configuration path pointed at a key file does not print the key: the error names what
// the file holds and its length, and quotes none of it.
func TestLoadConfigQuotesNothingOfAWrongFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key.pem")
	key := pemKey()
	if err := os.WriteFile(path, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path)
	var fe *ConfigFileError
	if !errors.As(err, &fe) {
		t.Fatalf("LoadConfig of a key file: %v, want a *ConfigFileError", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "MII") || strings.Contains(msg, "BEGIN") {
		t.Errorf("the error quotes the key: %s", msg)
	}
	if want := fmt.Sprintf("not a configuration file: its content (%d bytes) is one text value", len(key)); !strings.Contains(msg, want) {
		t.Errorf("the error %q does not say %q", msg, want)
	}
}

// Long keys and values are cut in the error's field and problem alike.
func TestParseConfigErrorsAreBounded(t *testing.T) {
	long := strings.Repeat("k", 5000)
	for _, tc := range []struct{ name, in string }{
		{"long unknown field", groupOfYAML(1) + long + ": 1\n"},
		{"long group name with a bad endpoint", "default: " + long + "\nmultiEndpoints:\n  " + long + ": {endpoints: [no-port]}\n"},
		{"long endpoint", "default: g\nmultiEndpoints:\n  g: {endpoints: [" + long + "]}\n"},
		{"long duration", groupOfYAML(1) + "settings: {drainTimeout: " + long + "}\n"},
		{"long key of endpoint options", groupOfYAML(1) + "endpoints:\n  " + long + ": {name: x}\n"},
		{"long JSON value", `{"default": "g", "multiEndpoints": {"g": {"endpoints": ["h:1"], "switchingDelay": "` + long + `"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.in))
			var fe *ConfigFileError
			if !errors.As(err, &fe) {
				t.Fatalf("ParseConfig = %v, want a *ConfigFileError", err)
			}
			checkBoundedError(t, fe)
			if strings.Contains(err.Error(), long[:maxErrorProblem]) {
				t.Errorf("the error quotes %d bytes of the file or more", maxErrorProblem)
			}
		})
	}
}

// BenchmarkParseConfigHostile: the time and heap each hostile file costs before it is
// refused (B/op is the heap allocated).
func BenchmarkParseConfigHostile(b *testing.B) {
	for _, tc := range hostileConfigs() {
		in := []byte(tc.in)
		b.Run(strings.ReplaceAll(tc.name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := ParseConfig(in); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}
