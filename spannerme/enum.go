package spannerme

import (
	"fmt"
	"strconv"
	"time"
)

// enumText gives an enum type E its text forms, from its names indexed by value: String's
// and MarshalText's, and UnmarshalText's reading of them. A value without a name is written
// as typ(n). An empty name is never read, unless emptyIsZero: then "" reads as the zero
// value, whose name it is.
type enumText[E ~int] struct {
	typ, what   string // "EndpointState"; "endpoint state", for errors
	names       []string
	emptyIsZero bool
}

func (t enumText[E]) String(v E) string {
	if v >= 0 && int(v) < len(t.names) && (t.names[v] != "" || t.emptyIsZero) {
		return t.names[v]
	}
	return t.typ + "(" + strconv.Itoa(int(v)) + ")"
}

// Unmarshal sets *v to the value named b. Error: "spannerme: unknown <what> ..." if no value
// has that name.
func (t enumText[E]) Unmarshal(b []byte, v *E) error {
	for i, n := range t.names {
		if n == string(b) && (n != "" || t.emptyIsZero) {
			*v = E(i)
			return nil
		}
	}
	return fmt.Errorf("spannerme: unknown %s %q", t.what, b)
}

func parseDurationOrZero(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
