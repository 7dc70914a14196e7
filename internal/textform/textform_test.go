package textform

import (
	"testing"
	"time"
)

type color int

var colors = Enum[color]{Type: "color", What: "color", Names: []string{1: "red", 2: "green"}}

func TestEnumRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		v    color
		text string
		back bool // the text reads back as v
	}{
		{1, "red", true}, {2, "green", true}, {0, "color(0)", false}, {7, "color(7)", false}, {-1, "color(-1)", false},
	} {
		if got := colors.String(tc.v); got != tc.text {
			t.Errorf("String(%d) = %q, want %q", tc.v, got, tc.text)
		}
		var c color = 9
		err := colors.Unmarshal([]byte(tc.text), &c)
		if tc.back && (err != nil || c != tc.v) {
			t.Errorf("Unmarshal(%q) = %d, %v; want %d", tc.text, c, err, tc.v)
		}
		if !tc.back && (err == nil || c != 9) {
			t.Errorf("Unmarshal(%q) = %d, %v; want an error and no change", tc.text, c, err)
		}
	}
	if err := colors.Unmarshal(nil, new(color)); err == nil {
		t.Error(`"" read as a color without EmptyIsZero`)
	}
	zero := Enum[color]{Names: []string{""}, EmptyIsZero: true}
	c := color(3)
	if err := zero.Unmarshal(nil, &c); err != nil || c != 0 || zero.String(0) != "" {
		t.Errorf(`EmptyIsZero: "" read as %d, %v; String(0) = %q`, c, err, zero.String(0))
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "1.5s": 1500 * time.Millisecond, "0s": 0} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseDuration("soon"); err == nil {
		t.Error(`ParseDuration("soon"): no error`)
	}
}
