package bounded

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{"short", "abc", 3, "abc"},
		{"empty", "", 0, ""},
		{"cut", "abcdef", 3, "abc…[cut: 6 bytes in all]"},
		{"cut at zero", "abc", 0, "…[cut: 3 bytes in all]"},
		{"negative n", "abc", -5, "…[cut: 3 bytes in all]"},
		{"not inside a character", "aéé", 2, "a…[cut: 5 bytes in all]"},
		{"invalid bytes", "\xff\xff\xff\xff\xff\xff", 2, "\xff\xff…[cut: 6 bytes in all]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(tc.s, tc.n); got != tc.want {
				t.Errorf("Text(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{"short", "a\nb", 10, `"a\nb"`},
		{"cut", "-----BEGIN PRIVATE KEY-----\nMII", 10, `"-----BEGIN"…[cut: 31 bytes in all]`},
		{"not inside a character", "ééé", 3, `"é"…[cut: 6 bytes in all]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quote(tc.s, tc.n); got != tc.want {
				t.Errorf("Quote(%q, %d) = %s, want %s", tc.s, tc.n, got, tc.want)
			}
		})
	}
}

// Whatever the input, the result holds at most n bytes of it, valid UTF-8 in stays valid,
// and the marker is there exactly when something was cut.
func TestTextBound(t *testing.T) {
	long := strings.Repeat("日本語 text ", 1000)
	marker := fmt.Sprintf("…[cut: %d bytes in all]", len(long))
	for n := range 40 {
		got := Text(long, n)
		kept, cut := strings.CutSuffix(got, marker)
		if !cut || len(kept) > n || !utf8.ValidString(got) || !strings.HasPrefix(long, kept) {
			t.Fatalf("Text(long, %d) = %q", n, got)
		}
	}
}

func TestError(t *testing.T) {
	base := &fs.PathError{Op: "open", Path: strings.Repeat("x", 100), Err: fs.ErrNotExist}
	err := Error(base, 20)
	marker := fmt.Sprintf("…[cut: %d bytes in all]", len(base.Error()))
	if len(err.Error()) > 20+len(marker) || !strings.HasSuffix(err.Error(), marker) {
		t.Errorf("Error(...).Error() = %q", err.Error())
	}
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) {
		t.Errorf("the cut error hides what it wraps: %v", err)
	}
	if Error(nil, 1) != nil {
		t.Error("Error(nil) is not nil")
	}
	short := errors.New("short")
	if Error(short, 10) != short {
		t.Error("a short error was wrapped")
	}
}
