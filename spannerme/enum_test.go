package spannerme

import (
	"errors"
	"testing"
)

// Every enum writes and reads its names, writes a value without a name as Type(n), and
// refuses a name it does not have.
func TestEnumTextForms(t *testing.T) {
	type textual interface {
		String() string
		MarshalText() ([]byte, error)
	}
	for _, tc := range []struct {
		v    textual
		want string
		read func([]byte) (textual, error)
	}{
		{Available, "Available", func(b []byte) (textual, error) { var v EndpointState; err := v.UnmarshalText(b); return v, err }},
		{EndpointState(7), "EndpointState(7)", nil},
		{Recovery, "recovery", func(b []byte) (textual, error) { var v SwitchReason; err := v.UnmarshalText(b); return v, err }},
		{SwitchReason(0), "SwitchReason(0)", nil},
		{ReasonTimeouts, "timeouts", func(b []byte) (textual, error) { var v EjectionReason; err := v.UnmarshalText(b); return v, err }},
		{EjectionReason(0), "", func(b []byte) (textual, error) { var v EjectionReason; err := v.UnmarshalText(b); return v, err }},
		{EndpointReadmitted, "readmitted", func(b []byte) (textual, error) { var v HealthEventKind; err := v.UnmarshalText(b); return v, err }},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.v, got, tc.want)
		}
		if tc.read == nil {
			continue
		}
		b, _ := tc.v.MarshalText()
		back, err := tc.read(b)
		if err != nil || back.String() != tc.want {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %q", b, back, err, tc.want)
		}
		if _, err := tc.read([]byte("no such name")); err == nil || errors.Is(err, ErrInvalidConfig) {
			t.Errorf("UnmarshalText of an unknown name: %v, want an error", err)
		}
	}
	var s SwitchReason
	if err := s.UnmarshalText(nil); err == nil {
		t.Error(`SwitchReason reads "" as a value; it has no empty name`)
	}
}
