package configfile

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// decodeSample decodes {name: string, count: 1..9, ratio: number >= 1, wait: duration} from
// data and returns the first mistake.
func decodeSample(data string, isJSON bool) error {
	d, root, err := Parse([]byte(data), isJSON)
	if err != nil {
		return err
	}
	return d.Mapping(root, "", Fields{
		"name":  func(n *Node, p string) error { _, err := d.Str(n, p); return err },
		"count": func(n *Node, p string) error { _, err := d.Uint(n, p, 1, 9); return err },
		"ratio": func(n *Node, p string) error {
			_, err := d.Number(n, p, "a number of at least 1", " (a ratio)", func(v float64) bool { return v >= 1 })
			return err
		},
		"wait": func(n *Node, p string) error {
			v, err := d.Duration(n, p, "")
			if err == nil && v != 2*time.Second {
				return d.ErrAt(n, p, "decoded %v", v)
			}
			return err
		},
	})
}

// Every mistake is an *Error placed at its line and column, naming the field; YAML and JSON
// read the same way.
func TestDecoderPlacesMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, data   string
		json         bool
		line, column int
		field, want  string // want: a part of Problem; "" for no error
	}{
		{"valid YAML", "name: a\ncount: 3\nratio: 1.5\nwait: 2s\n", false, 0, 0, "", ""},
		{"valid JSON", `{"name": "a", "count": 3, "ratio": 2, "wait": "2s"}`, true, 0, 0, "", ""},
		{"unknown field, nearest named", "name: a\ncuont: 3\n", false, 2, 1, "cuont", "did you mean count?"},
		{"given twice", "name: a\nname: b\n", false, 2, 1, "name", "given twice (first at line 1)"},
		{"quoted number is a string", "count: \"3\"\n", false, 1, 8, "count", "write the number without quotes"},
		{"out of range", "count: 10\n", false, 1, 8, "count", "from 1 to 9"},
		{"number detail", "ratio: 0.5\n", false, 1, 8, "ratio", "a number of at least 1 (a ratio)"},
		{"bad duration", "wait: soon\n", false, 1, 7, "wait", "invalid duration"},
		{"tab indentation", "name:\n\t a\n", false, 2, 1, "", "tabs are not allowed"},
		{"JSON trailing comma", "{\"name\": \"a\",}", true, 1, 14, "", "trailing comma"},
		{"JSON position of a wrong type", "{\n  \"count\": true\n}", true, 2, 12, "count", "from 1 to 9"},
		{"empty", "  \n", false, 0, 0, "", "empty"},
		{"two YAML documents", "name: a\n---\nname: b\n", false, 2, 1, "", "more than one YAML document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeSample(tc.data, tc.json)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want an *Error", err, err)
			}
			if e.Line != tc.line || e.Column != tc.column || e.Field != tc.field || !strings.Contains(e.Problem, tc.want) {
				t.Fatalf("got line %d column %d field %q problem %q; want %d, %d, %q, containing %q",
					e.Line, e.Column, e.Field, e.Problem, tc.line, tc.column, tc.field, tc.want)
			}
		})
	}
}

// Nested aliases that expand past MaxNodes are refused before any decoding (a "billion
// laughs" file), and so is a file over MaxSize bytes.
func TestParseBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 8; i++ {
		p := "*a" + string(rune('0'+i-1))
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [" + strings.Repeat(p+", ", 9) + p + "]\n")
	}
	if _, _, err := Parse([]byte(b.String()), false); err == nil || !strings.Contains(err.Error(), "more than 100000 values") {
		t.Errorf("nested aliases: got %v, want the values limit", err)
	}
	big := "name: " + strings.Repeat("a", MaxSize) + "\n"
	if _, _, err := Parse([]byte(big), false); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("%d bytes: got %v, want the size limit", len(big), err)
	}
}
