// Package textform gives spannerme's public enum and duration values their text forms, as
// String, MarshalText and UnmarshalText (and so JSON) write and read them.
package textform

import (
	"fmt"
	"strconv"
	"time"
)

// Enum gives an enum type E its text forms, from its names indexed by value: String's and
// MarshalText's, and UnmarshalText's reading of them. A value without a name is written as
// Type(n). An empty name is never read, unless EmptyIsZero: then "" reads as the zero value,
// whose name it is. Safe for concurrent use once built.
type Enum[E ~int] struct {
	// Type is the type's name ("EndpointState"); What names it for errors ("endpoint state").
	Type, What  string
	Names       []string
	EmptyIsZero bool
}

// String returns v's name, or Type(n) for a value without one.
func (t Enum[E]) String(v E) string {
	if v >= 0 && int(v) < len(t.Names) && (t.Names[v] != "" || t.EmptyIsZero) {
		return t.Names[v]
	}
	return t.Type + "(" + strconv.Itoa(int(v)) + ")"
}

// Unmarshal sets *v to the value named b. Error: "spannerme: unknown <What> ..." if no value
// has that name; *v is then unchanged.
func (t Enum[E]) Unmarshal(b []byte, v *E) error {
	for i, n := range t.Names {
		if n == string(b) && (n != "" || t.EmptyIsZero) {
			*v = E(i)
			return nil
		}
	}
	return fmt.Errorf("spannerme: unknown %s %q", t.What, b)
}

// ParseDuration reads a duration as time.Duration's String writes it ("1.5s"); "" is zero.
// Errors: time.ParseDuration's.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
