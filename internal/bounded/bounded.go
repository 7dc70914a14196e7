// Package bounded cuts text that comes from outside the process (a configuration file's
// content, a server's error message) to a stated length before it is stored, logged or shown,
// with a marker that says it was cut and how long it was.
package bounded

import (
	"strconv"
	"unicode/utf8"
)

// ServerText is the most bytes of a server's (or gRPC's) error text that is kept: in a
// pool's last connection error, in an ejection's detail, and in what the command line
// prints of a failed step.
const ServerText = 512

// Text returns s if it is at most n bytes long; otherwise its first n bytes or fewer (cut at
// a character boundary), followed by the marker "…[cut: L bytes in all]", where L is
// len(s). n <= 0 is treated as 0. It is linear in n, whatever the length of s.
func Text(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return head(s, n) + marker(len(s))
}

// Quote returns strconv.Quote(s) when s is at most n bytes long; otherwise the quoted form
// of its first n bytes or fewer (cut at a character boundary), followed by the marker
// "…[cut: L bytes in all]" outside the quotes. It is linear in n, whatever the length of s.
func Quote(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return strconv.Quote(head(s, n)) + marker(len(s))
}

// Error returns err with its text cut by Text to n bytes; errors.Is and errors.As see err
// through it (Unwrap). A nil err, or one whose text is at most n bytes, is returned as is.
func Error(err error, n int) error {
	if err == nil || len(err.Error()) <= n {
		return err
	}
	return &cutError{err: err, text: Text(err.Error(), n)}
}

type cutError struct {
	err  error
	text string
}

func (e *cutError) Error() string { return e.text }
func (e *cutError) Unwrap() error { return e.err }

// head returns the longest prefix of s of at most n bytes that does not end inside a
// character (an invalid byte counts as one character).
func head(s string, n int) string {
	n = max(n, 0)
	if n >= len(s) {
		return s
	}
	for i := n; i >= 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n] // no character starts near n: invalid bytes, cut anywhere
}

func marker(total int) string { return "…[cut: " + strconv.Itoa(total) + " bytes in all]" }
