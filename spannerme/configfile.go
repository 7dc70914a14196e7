package spannerme

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.yaml.in/yaml/v3"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
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
	var b strings.Builder
	b.WriteString("spannerme configuration: ")
	switch {
	case e.File != "" && e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "line %d column %d: ", e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
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

// The limits of a configuration file (docs/configuration.md, "Limits", states them). With
// them, parsing is linear in the file's size and its memory is bounded: a file over a limit
// is refused with a *ConfigFileError before anything is built from it.
const (
	// maxConfigSize bounds a configuration file, in bytes.
	maxConfigSize = 1 << 20
	// maxConfigNodes bounds the values of a file: every mapping, list, key and scalar
	// counts one.
	maxConfigNodes = 100_000
	// maxGroups bounds the groups (multiEndpoints), maxGroupEndpoints the endpoints of one
	// group, maxEndpoints the distinct endpoints of every group together (each is a pool
	// of connections), and maxEndpointOptions the entries of the endpoints section.
	maxGroups          = 1000
	maxGroupEndpoints  = 100
	maxEndpoints       = 1000
	maxEndpointOptions = 1000
)

// The limits of what a configuration error echoes of the file: a value is quoted with at
// most maxQuoted bytes of it, a ConfigFileError's Field holds at most maxErrorField bytes
// and its Problem at most maxErrorProblem; what is cut ends with a marker
// ("…[cut: N bytes in all]").
const (
	maxQuoted       = 80
	maxErrorField   = 256
	maxErrorProblem = 512
)

// q quotes a value from the file for an error, bounded to maxQuoted bytes.
func q(s string) string { return bounded.Quote(s, maxQuoted) }

// LoadConfig reads and parses the configuration file at path, YAML or JSON, as ParseConfig
// does; a file whose name ends in ".json" (in any case) is read as JSON whatever its first
// character. It reads at most 1 MiB and one byte more: a larger file is refused. Errors:
// the read error (wrapping fs.ErrNotExist for a missing file), or a *ConfigFileError naming
// the file, the line and the field. It is safe for concurrent use.
func LoadConfig(path string) (*FileConfig, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	c, _, err := parseConfigFile(data, path)
	return c, err
}

func readConfigFile(path string) ([]byte, error) {
	data, _, err := readConfigFileInfo(path)
	return data, err
}

// readConfigFileInfo reads the file at path, at most maxConfigSize bytes (a larger file is a
// *ConfigFileError), and returns its content with its size and modification time as the
// opened file had them.
func readConfigFileInfo(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("spannerme configuration: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("spannerme configuration: %s: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("spannerme configuration: %s: %w", path, err)
	}
	if len(data) > maxConfigSize {
		return nil, nil, &ConfigFileError{File: path, Problem: fmt.Sprintf("larger than %d bytes", maxConfigSize)}
	}
	return data, fi, nil
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
// the endpoints section is refused. Its time and memory are linear in len(data). An
// error quotes at most 80 bytes of any value of the file, and its Field and Problem hold at
// most 256 and 512 bytes, each ending with "…[cut: N bytes in all]" when cut. It is safe for
// concurrent use and does not keep data.
func ParseConfig(data []byte) (*FileConfig, error) {
	c, _, err := parseConfigFile(data, "")
	return c, err
}

// parseConfigFile is ParseConfig of the content of the file at path ("" for none): a path
// ending in ".json" is read as JSON, and its errors name the file. It also returns the
// parsed form of what it validated, which a watcher applies as is.
func parseConfigFile(data []byte, path string) (*FileConfig, *parsedFile, error) {
	c, parsed, err := parseConfigData(data, strings.EqualFold(filepath.Ext(path), ".json"))
	if fe := (*ConfigFileError)(nil); errors.As(err, &fe) {
		fe.File = path
		fe.Field = bounded.Text(fe.Field, maxErrorField)
		fe.Problem = bounded.Text(fe.Problem, maxErrorProblem)
	}
	return c, parsed, err
}

func parseConfigData(data []byte, isJSON bool) (*FileConfig, *parsedFile, error) {
	if len(data) > maxConfigSize {
		return nil, nil, &ConfigFileError{Problem: fmt.Sprintf("larger than %d bytes (%d)", maxConfigSize, len(data))}
	}
	sum := sha256.Sum256(data)
	d := &fileDecoder{data: data}
	if err := d.decode(data, isJSON); err != nil {
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
}

// fileDecoder walks the YAML node tree of a configuration file. It records where each group
// and endpoint is, to place validation errors.
type fileDecoder struct {
	// data is the file's content, to place an error in a JSON file (jsonTree).
	data     []byte
	options  *grpcgcp.GCPMultiEndpointOptions
	settings Settings
	// poolSize and affinity come from poolSize and sessionAffinity.
	poolSize uint32
	poolSet  bool
	affinity bool
	affSet   bool
	// nodes locates fields by path, for errors found after decoding.
	nodes map[string]*yaml.Node
	// endpoints holds the distinct endpoints of every group, to bound them.
	endpoints map[string]bool
}

// fieldDecoders decode the fields of one mapping, by key.
type fieldDecoders map[string]func(n *yaml.Node, path string) error

func (d *fileDecoder) errAt(n *yaml.Node, path, format string, args ...any) error {
	e := &ConfigFileError{Field: path, Problem: fmt.Sprintf(format, args...)}
	e.Line, e.Column = d.pos(n)
	return e
}

// pos returns the line and column of n (0, 0 for nil). A node of a JSON file holds its byte
// offset (jsonNode): its position is computed here, for the one error that reports it, so
// that parsing stays linear.
func (d *fileDecoder) pos(n *yaml.Node) (line, column int) {
	switch {
	case n == nil:
		return 0, 0
	case n.Column < 0:
		return position(d.data, n.Line)
	}
	return n.Line, n.Column
}

// decode reads data, JSON when isJSON or when it starts with '{', else YAML, into the
// decoder's options and settings.
func (d *fileDecoder) decode(data []byte, isJSON bool) error {
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return &ConfigFileError{Problem: "the file is empty"}
	}
	var root *yaml.Node
	if isJSON || t[0] == '{' {
		var err error
		if root, err = jsonTree(data, maxConfigNodes); err != nil {
			if fe := (*ConfigFileError)(nil); !isJSON && errors.As(err, &fe) {
				fe.Problem += " (the file starts with '{', so it is read as JSON)"
			}
			return err
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return yamlSyntaxError(data, err)
		}
		var extra yaml.Node
		if err := dec.Decode(&extra); err == nil {
			return d.errAt(&extra, "", "more than one YAML document")
		} else if err != io.EOF {
			return yamlSyntaxError(data, err)
		}
		if err := checkYAMLTree(&doc, maxConfigNodes); err != nil {
			return err
		}
		root = &doc
		if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
			root = root.Content[0]
		}
	}
	d.nodes = map[string]*yaml.Node{}
	d.options = &grpcgcp.GCPMultiEndpointOptions{}
	err := d.mapping(root, "", fieldDecoders{
		"default": func(n *yaml.Node, p string) (err error) {
			d.options.Default, err = d.str(n, p)
			return err
		},
		"multiEndpoints": d.groups,
		"endpoints":      d.endpointOptions,
		"poolSize": func(n *yaml.Node, p string) error {
			v, err := d.uint(n, p, 1, 1024)
			d.poolSize, d.poolSet = uint32(v), true
			return err
		},
		"sessionAffinity": func(n *yaml.Node, p string) error {
			v, err := d.boolean(n, p)
			d.affinity, d.affSet = v, true
			return err
		},
		"settings": d.settingsSection,
	})
	if err != nil {
		return err
	}
	for _, req := range []string{"default", "multiEndpoints"} {
		if d.nodes[req] == nil {
			return d.errAt(root, req, "required field missing")
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

// checkYAMLTree refuses a YAML tree with more than limit nodes once its aliases are
// expanded: the decoders walk an alias's anchor again at each alias, so a few kilobytes of
// nested aliases would otherwise expand to millions of values. An alias inside its own
// anchor counts as too many. The size of each anchored node is computed once, so the check
// is linear in the tree's own size. The error is placed at the node whose expansion crossed
// the limit.
func checkYAMLTree(root *yaml.Node, limit int) error {
	c := yamlCounter{sizes: map[*yaml.Node]int{}, limit: limit}
	if c.size(root) <= limit {
		return nil
	}
	e := &ConfigFileError{Problem: fmt.Sprintf("more than %d values (mappings, lists, keys and scalars; aliases expanded): the limit of a configuration file", limit)}
	if c.over != nil {
		e.Line, e.Column = c.over.Line, c.over.Column
	}
	return e
}

type yamlCounter struct {
	sizes map[*yaml.Node]int // anchored nodes' sizes; inProgress while being counted
	limit int
	over  *yaml.Node // the first node whose size took its parent over limit
}

const inProgress = -1

// size returns the number of nodes of n with aliases expanded, or a number over the limit
// as soon as it is known to be over.
func (c *yamlCounter) size(n *yaml.Node) int {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Anchor != "" {
		if s, ok := c.sizes[n]; ok {
			if s == inProgress { // an alias inside its own anchor: endless
				return c.limit + 1
			}
			return s
		}
		c.sizes[n] = inProgress
	}
	total := 1
	for _, ch := range n.Content {
		if total += c.size(ch); total > c.limit {
			if c.over == nil {
				c.over = ch
			}
			return total
		}
	}
	if n.Anchor != "" {
		c.sizes[n] = total
	}
	return total
}

// yamlSyntaxError turns the parser's error ("yaml: line 3: ...") into a *ConfigFileError.
// When the parser stopped at a character that cannot start a token or at a tab, and a line
// indented with a tab is the error's line or the next one (the parser's line can be the one
// before), the error is that tab: YAML forbids tabs in indentation (YAML 1.2.2, section 6.1,
// https://yaml.org/spec/1.2.2/#61-indentation-spaces), and the parser's words do not say so.
func yamlSyntaxError(data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &ConfigFileError{Problem: "not valid YAML: " + msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ":"); i > 0 {
			if line, err := strconv.Atoi(rest[:i]); err == nil {
				e.Line, e.Problem = line, "not valid YAML: "+strings.TrimSpace(rest[i+1:])
			}
		}
	}
	if e.Line > 0 && (strings.Contains(msg, "tab") || strings.Contains(msg, "cannot start any token")) {
		if line, col := tabIndentation(data, e.Line, e.Line+1); line > 0 {
			e.Line, e.Column = line, col
			e.Problem = "not valid YAML: tabs are not allowed for indentation (indent with spaces)"
		}
	}
	return e
}

// tabIndentation returns the line and column (1-based) of the first tab in the indentation
// (the blanks that start a line) of lines from to to of data, or 0, 0.
func tabIndentation(data []byte, from, to int) (line, column int) {
	for i, l := range bytes.Split(data, []byte("\n")) {
		if i+1 < from || i+1 > to {
			continue
		}
		for j, c := range l {
			if c == '\t' {
				return i + 1, j + 1
			}
			if c != ' ' {
				break
			}
		}
	}
	return 0, 0
}

// jsonTree parses data as JSON with encoding/json into the node tree that the field
// decoders walk, each node with its tag as YAML's core schema would give it (!!str for a
// string, !!int or !!float for a number, !!bool, !!null), so a quoted number stays a string,
// and its byte offset in Line, with Column -1 (fileDecoder.pos turns it into a line and
// column when an error needs it). Errors are *ConfigFileError with the line and column of the
// syntax error, or of the value past limit nodes.
func jsonTree(data []byte, limit int) (*yaml.Node, error) {
	// Unmarshal checks the whole input's syntax first, trailing data included (into a
	// RawMessage: a number too large for a float64 is valid JSON), and its
	// *json.SyntaxError locates the mistake; the tree is then built from a valid input.
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, jsonSyntaxError(data, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	left := limit
	n, err := jsonNode(dec, data, &left)
	if fe := (*ConfigFileError)(nil); errors.As(err, &fe) {
		return nil, err
	}
	if err != nil {
		return nil, jsonSyntaxError(data, err)
	}
	return n, nil
}

// jsonNode reads one JSON value from dec, whose input is data, as a node; left counts the
// nodes that may still be made.
func jsonNode(dec *json.Decoder, data []byte, left *int) (*yaml.Node, error) {
	start := int(dec.InputOffset())
	for start < len(data) && strings.IndexByte(" \t\r\n,:", data[start]) >= 0 {
		start++ // the separators before the token, which Token consumes with it
	}
	if *left <= 0 {
		line, column := position(data, start)
		return nil, &ConfigFileError{Line: line, Column: column,
			Problem: "more than " + strconv.Itoa(maxConfigNodes) + " values (objects, arrays, keys and scalars): the limit of a configuration file"}
	}
	*left--
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Line: start, Column: -1}
	switch t := tok.(type) {
	case json.Delim:
		n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
		if t == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for dec.More() {
			c, err := jsonNode(dec, data, left) // a key (a string) then its value, in a mapping
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	case string:
		n.Tag, n.Value, n.Style = "!!str", t, yaml.DoubleQuotedStyle
	case json.Number:
		n.Tag, n.Value = "!!int", t.String()
		if strings.ContainsAny(n.Value, ".eE") {
			n.Tag = "!!float"
		}
	case bool:
		n.Tag, n.Value = "!!bool", strconv.FormatBool(t)
	case nil:
		n.Tag, n.Value = "!!null", "null"
	}
	return n, nil
}

// jsonSyntaxError turns an error of encoding/json into a *ConfigFileError with the line and
// column of a *json.SyntaxError's offset.
func jsonSyntaxError(data []byte, err error) error {
	e := &ConfigFileError{Problem: "not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
		// Offset counts the bytes read, the offending one included; at the end of the
		// input, the mistake is the end.
		off := int(se.Offset) - 1
		if errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(se.Error(), "unexpected end of JSON input") {
			off = len(data)
		}
		e.Line, e.Column = position(data, off)
		if strings.Contains(se.Error(), "looking for beginning of") && lastNonBlank(data, int(se.Offset)-1) == ',' {
			e.Problem += " (a comma before a closing bracket or brace: JSON allows no trailing comma)"
		}
	}
	return e
}

// lastNonBlank returns the last byte of data before offset that is not white space, or 0.
func lastNonBlank(data []byte, offset int) byte {
	for i := min(offset, len(data)) - 1; i >= 0; i-- {
		if c := data[i]; c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c
		}
	}
	return 0
}

// position returns the line and column (1-based; the column in characters) of data[offset].
func position(data []byte, offset int) (line, column int) {
	offset = max(0, min(offset, len(data)))
	before := data[:offset]
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return bytes.Count(before, []byte("\n")) + 1, utf8.RuneCount(before[lineStart:]) + 1
}

// resolve follows an alias to its anchor.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping decodes a mapping node field by field: unknown and repeated keys are errors.
func (d *fileDecoder) mapping(n *yaml.Node, path string, fields fieldDecoders) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return d.errAt(n, path, "want a mapping (key: value), got %s", kindName(n))
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return d.errAt(k, path, "want a field name, got %s", kindName(k))
		}
		p := join(path, k.Value)
		if prev := seen[k.Value]; prev != nil {
			line, _ := d.pos(prev)
			return d.errAt(k, p, "given twice (first at line %d)", line)
		}
		seen[k.Value] = k
		dec, ok := fields[k.Value]
		if !ok {
			return d.errAt(k, p, "unknown field%s", suggest(k.Value, fields))
		}
		d.nodes[p] = k
		if err := dec(v, p); err != nil {
			return err
		}
	}
	return nil
}

// suggest returns " (did you mean X?)" for the known field X nearest to key (fewest edits,
// ignoring case; a field that contains key or is contained in it counts as two edits away),
// and the list of known fields too when even the nearest is more than a third of key's
// length (at least 2 edits) away.
func suggest(key string, fields fieldDecoders) string {
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	if len(key) > 64 { // no field name is that long; and editDistance is quadratic
		return fmt.Sprintf(" (known fields: %s)", strings.Join(names, ", "))
	}
	best, bestD := "", -1
	lk := strings.ToLower(key)
	for _, f := range names {
		lf := strings.ToLower(f)
		dist := editDistance(lk, lf)
		if min(len(lk), len(lf)) >= 4 && (strings.Contains(lf, lk) || strings.Contains(lk, lf)) {
			dist = min(dist, 2)
		}
		if bestD < 0 || dist < bestD {
			best, bestD = f, dist
		}
	}
	if bestD <= max(2, len(key)/3) {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return fmt.Sprintf(" (did you mean %s? known fields: %s)", best, strings.Join(names, ", "))
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing (null)"
		}
		return q(n.Value)
	}
	return "nothing"
}

func (d *fileDecoder) scalar(n *yaml.Node, path, want string) (*yaml.Node, error) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return nil, d.errAt(n, path, "want %s, got %s", want, kindName(n))
	}
	return n, nil
}

func (d *fileDecoder) str(n *yaml.Node, path string) (string, error) {
	s, err := d.scalar(n, path, "a string")
	if err != nil {
		return "", err
	}
	if s.Tag != "!!str" {
		return "", d.errAt(s, path, "want a string, got %s (quote it)", kindName(s))
	}
	return s.Value, nil
}

func (d *fileDecoder) boolean(n *yaml.Node, path string) (bool, error) {
	s, err := d.scalar(n, path, "true or false")
	if err != nil {
		return false, err
	}
	switch {
	case s.Tag != "!!bool" && (s.Value == "true" || s.Value == "false"):
		return false, d.errAt(s, path, "want true or false, got the string %s (write it without quotes)", q(s.Value))
	case s.Tag == "!!bool" && s.Value == "true":
		return true, nil
	case s.Tag == "!!bool" && s.Value == "false":
		return false, nil
	}
	return false, d.errAt(s, path, "want true or false, got %s", q(s.Value))
}

// quotedNumber is the hint of an error about a number written as a string.
func quotedNumber(s *yaml.Node) string {
	if s.Tag != "!!str" {
		return ""
	}
	if _, err := strconv.ParseFloat(s.Value, 64); err != nil {
		return ""
	}
	return " (a string: write the number without quotes)"
}

func (d *fileDecoder) uint(n *yaml.Node, path string, lo, hi uint64) (uint64, error) {
	s, err := d.scalar(n, path, "a whole number")
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s.Value, 10, 32)
	if err != nil || v < lo || v > hi || s.Tag != "!!int" {
		return 0, d.errAt(s, path, "want a whole number from %d to %d, got %s%s", lo, hi, q(s.Value), quotedNumber(s))
	}
	return v, nil
}

// duration reads a Go duration ("2s", "300ms", "1m30s"; "0" is zero). Negative values are
// an error unless off is not empty: then the word off means -1.
func (d *fileDecoder) duration(n *yaml.Node, path string, off string) (time.Duration, error) {
	s, err := d.scalar(n, path, `a duration such as "2s"`)
	if err != nil {
		return 0, err
	}
	if off != "" && s.Value == "off" {
		return -1, nil
	}
	v, err := time.ParseDuration(s.Value)
	if err != nil {
		return 0, d.errAt(s, path, "invalid duration %s (write e.g. 2s, 300ms, 1m30s)", q(s.Value))
	}
	if v < 0 {
		if off != "" {
			return 0, d.errAt(s, path, "negative duration %s (write off to %s)", q(s.Value), off)
		}
		return 0, d.errAt(s, path, "negative duration %s", q(s.Value))
	}
	return v, nil
}

func (d *fileDecoder) groups(n *yaml.Node, path string) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return d.errAt(n, path, "want a mapping of group names to groups, got %s", kindName(n))
	}
	if groups := len(n.Content) / 2; groups > maxGroups {
		return d.errAt(n, path, "%d groups: at most %d are accepted", groups, maxGroups)
	}
	d.options.MultiEndpoints = map[string]*multiendpoint.MultiEndpointOptions{}
	fields := fieldDecoders{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name := resolve(n.Content[i]).Value
		fields[name] = func(v *yaml.Node, p string) error { return d.group(name, v, p) }
	}
	return d.mapping(n, path, fields)
}

func (d *fileDecoder) group(name string, n *yaml.Node, path string) error {
	g := &multiendpoint.MultiEndpointOptions{}
	d.options.MultiEndpoints[name] = g
	err := d.mapping(n, path, fieldDecoders{
		"endpoints": func(n *yaml.Node, p string) error {
			n = resolve(n)
			if n.Kind != yaml.SequenceNode {
				return d.errAt(n, p, "want a list of endpoints, got %s", kindName(n))
			}
			if len(n.Content) > maxGroupEndpoints {
				return d.errAt(n, p, "%d endpoints: a group has at most %d", len(n.Content), maxGroupEndpoints)
			}
			for i, e := range n.Content {
				ep := fmt.Sprintf("%s[%d]", p, i)
				s, err := d.str(e, ep)
				if err != nil {
					return err
				}
				if d.endpoints == nil {
					d.endpoints = map[string]bool{}
				}
				if d.endpoints[s] = true; len(d.endpoints) > maxEndpoints {
					return d.errAt(resolve(e), ep, "more than %d distinct endpoints in all groups together", maxEndpoints)
				}
				d.nodes[ep] = resolve(e)
				g.Endpoints = append(g.Endpoints, s)
			}
			return nil
		},
		"recoveryTimeout": func(n *yaml.Node, p string) (err error) {
			g.RecoveryTimeout, err = d.duration(n, p, "")
			return err
		},
		"switchingDelay": func(n *yaml.Node, p string) (err error) {
			g.SwitchingDelay, err = d.duration(n, p, "")
			return err
		},
		"directedReads": func(n *yaml.Node, p string) error { return d.directedReads(name, n, p) },
		"hedging":       func(n *yaml.Node, p string) error { return d.hedging(name, n, p) },
	})
	if err == nil && d.nodes[join(path, "endpoints")] == nil {
		return d.errAt(resolve(n), join(path, "endpoints"), "required field missing")
	}
	return err
}

// directedReads reads a group's directedReads into Settings.DirectedReads (directedreads.go):
// includeReplicas (with autoFailoverDisabled) or excludeReplicas, each a list of
// {location, type} selections.
func (d *fileDecoder) directedReads(group string, n *yaml.Node, path string) error {
	var include, exclude []*spannerpb.DirectedReadOptions_ReplicaSelection
	var noFailover bool
	selections := func(dst *[]*spannerpb.DirectedReadOptions_ReplicaSelection) func(*yaml.Node, string) error {
		return func(n *yaml.Node, p string) error {
			n = resolve(n)
			if n.Kind != yaml.SequenceNode {
				return d.errAt(n, p, "want a list of replica selections ({location: us-west2, type: READ_ONLY}), got %s", kindName(n))
			}
			*dst = []*spannerpb.DirectedReadOptions_ReplicaSelection{} // present, even if empty
			for i, e := range n.Content {
				sel := &spannerpb.DirectedReadOptions_ReplicaSelection{}
				err := d.mapping(e, fmt.Sprintf("%s[%d]", p, i), fieldDecoders{
					"location": func(n *yaml.Node, p string) (err error) {
						sel.Location, err = d.str(n, p)
						return err
					},
					"type": func(n *yaml.Node, p string) error {
						v, err := d.str(n, p)
						if err != nil {
							return err
						}
						switch v {
						case "READ_ONLY":
							sel.Type = spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY
						case "READ_WRITE":
							sel.Type = spannerpb.DirectedReadOptions_ReplicaSelection_READ_WRITE
						default:
							return d.errAt(resolve(n), p, "want READ_ONLY or READ_WRITE, got %s", q(v))
						}
						return nil
					},
				})
				if err != nil {
					return err
				}
				*dst = append(*dst, sel)
			}
			return nil
		}
	}
	err := d.mapping(n, path, fieldDecoders{
		"includeReplicas": selections(&include),
		"excludeReplicas": selections(&exclude),
		"autoFailoverDisabled": func(n *yaml.Node, p string) (err error) {
			noFailover, err = d.boolean(n, p)
			return err
		},
	})
	if err != nil {
		return err
	}
	o := &spannerpb.DirectedReadOptions{}
	switch {
	case include != nil && exclude != nil:
		return d.errAt(resolve(n), path, "give includeReplicas or excludeReplicas, not both")
	case exclude != nil && d.nodes[join(path, "autoFailoverDisabled")] != nil:
		return d.errAt(d.nodes[join(path, "autoFailoverDisabled")], join(path, "autoFailoverDisabled"),
			"applies only to includeReplicas")
	case include != nil:
		o.Replicas = &spannerpb.DirectedReadOptions_IncludeReplicas_{IncludeReplicas: &spannerpb.DirectedReadOptions_IncludeReplicas{
			ReplicaSelections: include, AutoFailoverDisabled: noFailover}}
	case exclude != nil:
		o.Replicas = &spannerpb.DirectedReadOptions_ExcludeReplicas_{ExcludeReplicas: &spannerpb.DirectedReadOptions_ExcludeReplicas{
			ReplicaSelections: exclude}}
	}
	if problem := checkDirectedReadOptions(o); problem != "" {
		return d.errAt(resolve(n), path, "group %s: %s", q(group), problem)
	}
	if d.settings.DirectedReads == nil {
		d.settings.DirectedReads = map[string]*spannerpb.DirectedReadOptions{}
	}
	d.settings.DirectedReads[group] = o
	return nil
}

func (d *fileDecoder) endpointOptions(n *yaml.Node, path string) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return d.errAt(n, path, "want a mapping of endpoints to their options, got %s", kindName(n))
	}
	if entries := len(n.Content) / 2; entries > maxEndpointOptions {
		return d.errAt(n, path, "%d entries: at most %d are accepted", entries, maxEndpointOptions)
	}
	d.settings.EndpointOptions = map[string]EndpointOptions{}
	type namedBy struct {
		key        *yaml.Node // the endpoint's key in the file
		normalized string
	}
	named := map[string]namedBy{} // name -> the endpoint that has it
	fields := fieldDecoders{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := resolve(n.Content[i])
		fields[key.Value] = func(v *yaml.Node, p string) error {
			// An endpoint that no group lists is accepted, as in Settings.EndpointOptions
			// (parseEndpointOptions): its options apply once a group lists it, so an
			// endpoint taken out of its groups keeps its options in the file.
			ne, problem := normalizeEndpoint(key.Value)
			if problem != "" {
				return d.errAt(key, p, "%s", problem)
			}
			var eo EndpointOptions
			err := d.mapping(v, p, fieldDecoders{
				"authority": func(n *yaml.Node, p string) (err error) {
					if eo.Authority, err = d.str(n, p); err == nil {
						if problem := checkAuthority(eo.Authority); problem != "" {
							err = d.errAt(resolve(n), p, "%s: %s", q(eo.Authority), problem)
						}
					}
					return err
				},
				"name": func(n *yaml.Node, p string) (err error) {
					if eo.Name, err = d.str(n, p); err != nil {
						return err
					}
					if problem := checkEndpointName(eo.Name); problem != "" {
						return d.errAt(resolve(n), p, "%s: %s", q(eo.Name), problem)
					}
					if other, taken := named[eo.Name]; taken && other.normalized != ne {
						line, _ := d.pos(other.key)
						return d.errAt(resolve(n), p, "%s is also the name of endpoint %s (line %d); names must be unique",
							q(eo.Name), bounded.Text(other.key.Value, maxQuoted), line)
					}
					named[eo.Name] = namedBy{key, ne}
					return nil
				},
			})
			d.settings.EndpointOptions[key.Value] = eo
			return err
		}
	}
	return d.mapping(n, path, fields)
}

func (d *fileDecoder) settingsSection(n *yaml.Node, path string) error {
	s := &d.settings
	dur := func(dst *time.Duration, off string) func(*yaml.Node, string) error {
		return func(n *yaml.Node, p string) (err error) {
			*dst, err = d.duration(n, p, off)
			return err
		}
	}
	return d.mapping(n, path, fieldDecoders{
		"reconnectMaxDelay": dur(&s.ReconnectMaxDelay, ""),
		"minConnectTimeout": dur(&s.MinConnectTimeout, ""),
		"keepaliveTime":     dur(&s.KeepaliveTime, "turn keepalive off"),
		"keepaliveTimeout":  dur(&s.KeepaliveTimeout, ""),
		"keepaliveWithoutCalls": func(n *yaml.Node, p string) (err error) {
			s.KeepaliveWithoutCalls, err = d.boolean(n, p)
			return err
		},
		"drainTimeout": dur(&s.DrainTimeout, ""),
		"switchingJitter": func(n *yaml.Node, p string) error {
			sc, err := d.scalar(n, p, "a number from 0 to 1")
			if err != nil {
				return err
			}
			v, err := strconv.ParseFloat(sc.Value, 64)
			if err != nil || !(v >= 0 && v <= 1) || (sc.Tag != "!!float" && sc.Tag != "!!int") {
				return d.errAt(sc, p, "want a number from 0 to 1 (a fraction of SwitchingDelay), got %s%s", q(sc.Value), quotedNumber(sc))
			}
			s.SwitchingJitter = v
			return nil
		},
		"health": func(n *yaml.Node, p string) error { return d.healthSection(n, p) },
	})
}

// healthSection reads settings.health into Settings.Health (health.go).
func (d *fileDecoder) healthSection(n *yaml.Node, path string) error {
	h := &d.settings.Health
	dur := func(dst *time.Duration) func(*yaml.Node, string) error {
		return func(n *yaml.Node, p string) (err error) {
			*dst, err = d.duration(n, p, "")
			return err
		}
	}
	count := func(dst *int, hi uint64) func(*yaml.Node, string) error {
		return func(n *yaml.Node, p string) error {
			v, err := d.uint(n, p, 0, hi)
			*dst = int(v)
			return err
		}
	}
	flag := func(dst *bool) func(*yaml.Node, string) error {
		return func(n *yaml.Node, p string) (err error) {
			*dst, err = d.boolean(n, p)
			return err
		}
	}
	return d.mapping(n, path, fieldDecoders{
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
		"brownout": func(n *yaml.Node, p string) error {
			b := &h.Brownout
			return d.mapping(n, p, fieldDecoders{
				"disabled": flag(&b.Disabled),
				"ratio": func(n *yaml.Node, p string) error {
					sc, err := d.scalar(n, p, "a number of at least 1")
					if err != nil {
						return err
					}
					v, err := strconv.ParseFloat(sc.Value, 64)
					if err != nil || !(v >= 1 && !math.IsInf(v, 1)) || (sc.Tag != "!!float" && sc.Tag != "!!int") {
						return d.errAt(sc, p, "want a number of at least 1 (how many times slower than the fallback), got %s%s", q(sc.Value), quotedNumber(sc))
					}
					b.Ratio = v
					return nil
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
	case ce.Group != "" && d.nodes["multiEndpoints."+ce.Group] != nil:
		path = "multiEndpoints." + ce.Group
	case ce.Endpoint != "":
		path = "endpoints." + ce.Endpoint
	}
	fe := &ConfigFileError{Field: path, Problem: strings.TrimPrefix(ce.Error(), ErrInvalidConfig.Error()+": "), Err: ce}
	fe.Line, fe.Column = d.pos(d.nodes[path])
	return nil, fe
}
