// Package configfile is the strict, bounded decoder under spannerme's configuration file:
// it reads YAML (go.yaml.in/yaml/v3) or JSON (encoding/json) into one node tree, refuses
// what is too large before anything is built from it, and gives the schema (which lives
// with the types it fills, in spannerme) typed readers that place every mistake at its line
// and column and name the field: unknown fields with the nearest known one, fields given
// twice, values of the wrong type (a quoted number is a string), bad durations. It knows
// nothing of groups or endpoints.
package configfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
)

// Node is a value of the file: a YAML node, which a JSON file is read into as well.
type Node = yaml.Node

// The limits of a file and of what an error echoes of it (spannerme's docs/configuration.md,
// "Limits", states them). With them, decoding is linear in the file's size and its memory
// is bounded.
const (
	// MaxSize bounds a file, in bytes.
	MaxSize = 1 << 20
	// MaxNodes bounds the values of a file: every mapping, list, key and scalar counts one
	// (a YAML alias counts as the values of its anchor).
	MaxNodes = 100_000
	// MaxQuoted bounds, in bytes, how much of a value an error quotes (Q).
	MaxQuoted = 80
)

// Error is a mistake in a file: where it is and what is wrong.
type Error struct {
	// Line and Column locate the mistake (1-based); 0 when unknown (Column of a syntax
	// error) or the mistake is the whole file's.
	Line, Column int
	// Field is the path of the offending field, e.g. "multiEndpoints.default.endpoints[1]";
	// "" for the whole file.
	Field string
	// Problem says what is wrong.
	Problem string
}

// Error returns "line L column C: FIELD: PROBLEM", leaving out what is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
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

// Q quotes a value from the file for an error, bounded to MaxQuoted bytes.
func Q(s string) string { return bounded.Quote(s, MaxQuoted) }

// Decoder reads one file's node tree. It records where each decoded field is (Node), to
// place mistakes found after decoding. Not safe for concurrent use.
type Decoder struct {
	// data is the file's content, to place an error in a JSON file (jsonTree).
	data  []byte
	nodes map[string]*Node
}

// Fields decode the fields of one mapping, by key: each gets the field's value and its path.
type Fields map[string]func(n *Node, path string) error

// Parse checks data's syntax and size and returns its decoder and root node: JSON when
// isJSON or when data's first character other than white space is '{' (encoding/json, RFC
// 8259: no trailing commas, no comments), else YAML, one document, where a tab used for
// indentation is an error that says so. Errors: *Error, for an empty file too, or one over
// MaxSize bytes or MaxNodes values. Its time and memory are linear in len(data).
func Parse(data []byte, isJSON bool) (*Decoder, *Node, error) {
	if len(data) > MaxSize {
		return nil, nil, &Error{Problem: fmt.Sprintf("larger than %d bytes (%d)", MaxSize, len(data))}
	}
	d := &Decoder{data: data, nodes: map[string]*Node{}}
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return nil, nil, &Error{Problem: "the file is empty"}
	}
	if isJSON || t[0] == '{' {
		root, err := jsonTree(data, MaxNodes)
		if fe := (*Error)(nil); !isJSON && errors.As(err, &fe) {
			fe.Problem += " (the file starts with '{', so it is read as JSON)"
		}
		return d, root, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, yamlSyntaxError(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, d.ErrAt(&extra, "", "more than one YAML document")
	} else if err != io.EOF {
		return nil, nil, yamlSyntaxError(data, err)
	}
	if err := checkYAMLTree(&doc, MaxNodes); err != nil {
		return nil, nil, err
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	return d, root, nil
}

// ErrAt returns an *Error at n (anywhere in the file for nil) for the field at path.
func (d *Decoder) ErrAt(n *Node, path, format string, args ...any) error {
	e := &Error{Field: path, Problem: fmt.Sprintf(format, args...)}
	e.Line, e.Column = d.Pos(n)
	return e
}

// Pos returns the line and column of n (0, 0 for nil). A node of a JSON file holds its byte
// offset (jsonNode): its position is computed here, for the one error that reports it, so
// that decoding stays linear.
func (d *Decoder) Pos(n *Node) (line, column int) {
	switch {
	case n == nil:
		return 0, 0
	case n.Column < 0:
		return position(d.data, n.Line)
	}
	return n.Line, n.Column
}

// Node returns the key of the field at path that Mapping decoded, or nil.
func (d *Decoder) Node(path string) *Node { return d.nodes[path] }

// SetNode records n as the node of the field at path (a list element, say), for Node.
func (d *Decoder) SetNode(path string, n *Node) { d.nodes[path] = n }

// Number reads a number (not a quoted one) for which ok holds; want describes what is
// wanted, and detail (e.g. " (a fraction of X)") adds to it when the value is out of range.
func (d *Decoder) Number(n *Node, path, want, detail string, ok func(float64) bool) (float64, error) {
	sc, err := d.Scalar(n, path, want)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseFloat(sc.Value, 64)
	if err != nil || !ok(v) || (sc.Tag != "!!float" && sc.Tag != "!!int") {
		return 0, d.ErrAt(sc, path, "want %s%s, got %s%s", want, detail, Q(sc.Value), QuotedNumber(sc))
	}
	return v, nil
}

// Resolve follows an alias to its anchor.
func Resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Root checks that root, the node Parse returned, is a mapping of fields. Content that is
// one value (an access token, "DB_PASSWORD=hunter2", a PEM key: a path pointed at the wrong
// file) or a list is not a configuration file: the *Error names what it is and the file's
// length, and quotes none of it.
func (d *Decoder) Root(root *Node) error {
	n := Resolve(root)
	if n != nil && n.Kind == yaml.MappingNode {
		return nil
	}
	return &Error{Problem: fmt.Sprintf("not a configuration file: its content (%d bytes) is %s, not a mapping of fields "+
		"(default, multiEndpoints, ...); none of it is quoted here", len(d.data), contentKind(n))}
}

// contentKind says what a file's root node is, without its value.
func contentKind(n *Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.SequenceNode:
		if len(n.Content) == 1 {
			return "a list of 1 item"
		}
		return fmt.Sprintf("a list of %d items", len(n.Content))
	case n.Kind != yaml.ScalarNode:
		return "nothing but comments"
	case n.Tag == "!!null":
		return "nothing (null)"
	case n.Tag == "!!bool":
		return "one true or false value"
	case n.Tag == "!!int" || n.Tag == "!!float":
		return "one number"
	}
	return "one text value"
}

// Mapping decodes a mapping node field by field: unknown and repeated keys are errors.
func (d *Decoder) Mapping(n *yaml.Node, path string, fields Fields) error {
	n = Resolve(n)
	if n.Kind != yaml.MappingNode {
		return d.ErrAt(n, path, "want a mapping (key: value), got %s", KindName(n))
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := Resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return d.ErrAt(k, path, "want a field name, got %s", KindName(k))
		}
		p := Join(path, k.Value)
		if prev := seen[k.Value]; prev != nil {
			line, _ := d.Pos(prev)
			return d.ErrAt(k, p, "given twice (first at line %d)", line)
		}
		seen[k.Value] = k
		dec, ok := fields[k.Value]
		if !ok {
			return d.ErrAt(k, p, "unknown field%s", suggest(k.Value, fields))
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
func suggest(key string, fields Fields) string {
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

// KindName says what n is, for an error: "a mapping", "a list", "nothing (null)" or its
// quoted value.
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing (null)"
		}
		return Q(n.Value)
	}
	return "nothing"
}

// Scalar returns n as a scalar that is not null; want describes what is wanted, for the
// error.
func (d *Decoder) Scalar(n *yaml.Node, path, want string) (*yaml.Node, error) {
	n = Resolve(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return nil, d.ErrAt(n, path, "want %s, got %s", want, KindName(n))
	}
	return n, nil
}

// Str reads a string: a number or true/false must be quoted to be one.
func (d *Decoder) Str(n *yaml.Node, path string) (string, error) {
	s, err := d.Scalar(n, path, "a string")
	if err != nil {
		return "", err
	}
	if s.Tag != "!!str" {
		return "", d.ErrAt(s, path, "want a string, got %s (quote it)", KindName(s))
	}
	return s.Value, nil
}

// Bool reads true or false, unquoted.
func (d *Decoder) Bool(n *yaml.Node, path string) (bool, error) {
	s, err := d.Scalar(n, path, "true or false")
	if err != nil {
		return false, err
	}
	switch {
	case s.Tag != "!!bool" && (s.Value == "true" || s.Value == "false"):
		return false, d.ErrAt(s, path, "want true or false, got the string %s (write it without quotes)", Q(s.Value))
	case s.Tag == "!!bool" && s.Value == "true":
		return true, nil
	case s.Tag == "!!bool" && s.Value == "false":
		return false, nil
	}
	return false, d.ErrAt(s, path, "want true or false, got %s", Q(s.Value))
}

// QuotedNumber is the hint of an error about a number written as a string.
func QuotedNumber(s *yaml.Node) string {
	if s.Tag != "!!str" {
		return ""
	}
	if _, err := strconv.ParseFloat(s.Value, 64); err != nil {
		return ""
	}
	return " (a string: write the number without quotes)"
}

// Uint reads a whole number from lo to hi, unquoted.
func (d *Decoder) Uint(n *yaml.Node, path string, lo, hi uint64) (uint64, error) {
	s, err := d.Scalar(n, path, "a whole number")
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s.Value, 10, 32)
	if err != nil || v < lo || v > hi || s.Tag != "!!int" {
		return 0, d.ErrAt(s, path, "want a whole number from %d to %d, got %s%s", lo, hi, Q(s.Value), QuotedNumber(s))
	}
	return v, nil
}

// Duration reads a Go duration ("2s", "300ms", "1m30s"; "0" is zero). Negative values are
// an error unless off is not empty: then the word off means -1.
func (d *Decoder) Duration(n *yaml.Node, path string, off string) (time.Duration, error) {
	s, err := d.Scalar(n, path, `a duration such as "2s"`)
	if err != nil {
		return 0, err
	}
	if off != "" && s.Value == "off" {
		return -1, nil
	}
	v, err := time.ParseDuration(s.Value)
	if err != nil {
		return 0, d.ErrAt(s, path, "invalid duration %s (write e.g. 2s, 300ms, 1m30s)", Q(s.Value))
	}
	if v < 0 {
		if off != "" {
			return 0, d.ErrAt(s, path, "negative duration %s (write off to %s)", Q(s.Value), off)
		}
		return 0, d.ErrAt(s, path, "negative duration %s", Q(s.Value))
	}
	return v, nil
}
