package main

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// escaped reports whether r is never printed as itself: a control character (C0, DEL, C1:
// escape sequences that set a window title or move the cursor, tabs and newlines that break a
// table's row), a Unicode format character (the bidirectional overrides and isolates, zero
// width characters, the byte order mark, tags), or a line or paragraph separator. U+FFFD
// decoded from an invalid byte is handled by the callers.
func escaped(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// printable returns s for a terminal: every character that escaped reports written as a Go
// escape (\x1b, \x9b, \u202e), and each byte of invalid UTF-8 as \xNN. Text from a server, a
// database or a configuration file goes through it before it is printed.
func printable(s string) string { return escapeText(s, false) }

// escapeText is printable, passing newlines and tabs when layout is set.
func escapeText(s string, layout bool) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || escaped(r) {
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
		case layout && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case escaped(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// jsonSafe returns JSON text (encoding/json's output) with every character that escaped
// reports but JSON's white space (newline, tab, carriage return: encoding/json writes them
// only between tokens), and every byte of invalid UTF-8, written as a JSON escape: \u009b, \u202e, a
// surrogate pair above U+FFFF, \ufffd for an invalid byte. Outside strings JSON has only
// ASCII, so such characters are inside strings, and the result is valid JSON with the same
// values. encoding/json escapes the C0 controls, U+2028 and U+2029 already, not the C1
// controls nor the format characters (a bidirectional override).
func jsonSafe(b []byte) []byte {
	i := 0
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if (r == utf8.RuneError && n <= 1) || jsonEscaped(r) {
			break
		}
		i += n
	}
	if i == len(b) {
		return b
	}
	out := append(make([]byte, 0, len(b)+32), b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out = append(out, `\ufffd`...)
		case jsonEscaped(r) && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		case jsonEscaped(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// jsonEscaped reports whether jsonSafe escapes r: escaped, but JSON's white space.
func jsonEscaped(r rune) bool { return escaped(r) && r != '\n' && r != '\t' && r != '\r' }

// terminal is a writer that passes newlines and tabs (the commands' own layout) and writes
// every other character that printable escapes as printable does: the last guard, behind
// printable and jsonSafe, against text that would drive the terminal. Each Write is escaped
// on its own: a character split across two Writes is written as its bytes, \xNN.
type terminal struct{ w io.Writer }

func (t terminal) Write(p []byte) (int, error) {
	s := escapeText(string(p), true)
	if len(s) == len(p) { // unchanged: escaping only lengthens
		return t.w.Write(p)
	}
	if _, err := io.WriteString(t.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
