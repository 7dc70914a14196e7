package configfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A file that is one value or a list is not a configuration: the error names what it is and
// its length, and holds none of its bytes.
func TestRootNamesKindAndLengthAndQuotesNothing(t *testing.T) {
	for _, tc := range []struct{ name, in, kind, secret string }{
		{"access token", "ya29.a0AfB_byC1x2y3z4w5v6u7t8s9r0q1p2o3n4m5l6\n", "one text value", "ya29.a0AfB_byC1x2y3z4w5v6u7t8s9r0q1p2o3n4m5l6"},
		{"env line", "DB_PASSWORD=hunter2\n", "one text value", "hunter2"},
		{"PIN", "482913\n", "one number", "482913"},
		{"list", "- hunter2\n- swordfish\n", "a list of 2 items", "hunter2"},
		{"JSON string", `"hunter2"`, "one text value", "hunter2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, root, err := Parse([]byte(tc.in), false)
			if err == nil {
				err = d.Root(root)
			}
			var fe *Error
			want := fmt.Sprintf("not a configuration file: its content (%d bytes) is %s", len(tc.in), tc.kind)
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v; want one saying %q", err, want)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("the error quotes the file: %v", err)
			}
		})
	}
	d, root, err := Parse([]byte("a: 1\n"), false)
	if err != nil || d.Root(root) != nil {
		t.Errorf("a mapping: %v, %v", err, d.Root(root))
	}
}

// An alias to an anchor that does not exist is placed by its line; the parser's quote of its
// name is dropped (a file holding one secret that starts with '*').
func TestUnknownAnchorIsNotQuoted(t *testing.T) {
	_, _, err := Parse([]byte("*hunter2secret\n"), false)
	var fe *Error
	if !errors.As(err, &fe) || strings.Contains(err.Error(), "hunter2secret") || !strings.Contains(err.Error(), "unknown anchor referenced") {
		t.Errorf("Parse = %v; want an error without the anchor's name", err)
	}
}
