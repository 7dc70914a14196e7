package main

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable returns s for a terminal: every control character (C0, DEL, C1: escape sequences
// that set a window title or move the cursor, tabs and newlines that break a table's row) and
// every Unicode format character (bidirectional overrides among them) written as a Go escape
// (\x1b, \u202e), and each byte of invalid UTF-8 as \xNN. Text from a server, a database or a
// configuration file goes through it before it is printed.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// terminal is a writer that passes newlines and tabs (the commands' own layout) and writes
// every other ASCII control byte as \xNN: the last guard, behind printable, against text that
// would drive the terminal.
type terminal struct{ w io.Writer }

func (t terminal) Write(p []byte) (int, error) {
	clean := true
	for _, c := range p {
		if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return t.w.Write(p)
	}
	var b strings.Builder
	for _, c := range p {
		if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			fmt.Fprintf(&b, `\x%02x`, c)
		} else {
			b.WriteByte(c)
		}
	}
	if _, err := io.WriteString(t.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}
