package configfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The syntax of a file: YAML's or JSON's, read into one node tree, bounded.

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
	e := &Error{Problem: fmt.Sprintf("more than %d values (mappings, lists, keys and scalars; aliases expanded): the limit of a configuration file", limit)}
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

// quotedAnchor is the quoted anchor name in the parser's "unknown anchor 'x' referenced" and
// "anchor 'x' value contains itself".
var quotedAnchor = regexp.MustCompile(`anchor '.*' (referenced|value)`)

// yamlSyntaxError turns the parser's error ("yaml: line 3: ...") into a *Error.
// When the parser stopped at a character that cannot start a token or at a tab, and a line
// indented with a tab is the error's line or the next one (the parser's line can be the one
// before), the error is that tab: YAML forbids tabs in indentation (YAML 1.2.2, section 6.1,
// https://yaml.org/spec/1.2.2/#61-indentation-spaces), and the parser's words do not say so.
func yamlSyntaxError(data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	// The parser quotes an anchor's name, whole: a file that is one secret starting with
	// '*' (an alias) would be echoed. The line still places it.
	msg = quotedAnchor.ReplaceAllString(msg, "anchor $1")
	e := &Error{Problem: "not valid YAML: " + msg}
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
// column when an error needs it). Errors are *Error with the line and column of the
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
	if fe := (*Error)(nil); errors.As(err, &fe) {
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
		return nil, &Error{Line: line, Column: column,
			Problem: "more than " + strconv.Itoa(MaxNodes) + " values (objects, arrays, keys and scalars): the limit of a configuration file"}
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

// jsonSyntaxError turns an error of encoding/json into a *Error with the line and
// column of a *json.SyntaxError's offset.
func jsonSyntaxError(data []byte, err error) error {
	e := &Error{Problem: "not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
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
