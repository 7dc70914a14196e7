package spannerme

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
)

// ErrInvalidConfig is wrapped by every configuration error returned by NewGCPMultiEndpoint,
// UpdateMultiEndpoints and the client constructors; test for it with errors.Is. The error's
// text names the offending group and endpoint.
var ErrInvalidConfig = multiendpoint.ErrInvalidConfig

// ErrClosed is returned by UpdateMultiEndpoints and NewClient after Close (and on a
// zero-value GCPMultiEndpoint). Calls made then, those of every Spanner client over the
// GCPMultiEndpoint included, fail with a gRPC status CANCELED carrying the same text, which
// the Spanner client does not retry: a closed GCPMultiEndpoint does not reopen. For such a
// call's error (a *spanner.Error from a Spanner client), errors.Is(err, ErrClosed) is true and
// spanner.ErrCode(err) is codes.Canceled.
var ErrClosed = errors.New("spannerme: GCPMultiEndpoint is closed")

// errClosedCall is returned to calls made after Close (route.ClosedCall): CANCELED, the code
// gRPC uses for a call on a closed ClientConn, with ErrClosed's text, and errors.Is(err,
// ErrClosed) true through the Spanner client's wrapping.
var errClosedCall = route.ClosedCall(ErrClosed)

// ConfigError describes one configuration mistake; use errors.As to get it. It wraps
// ErrInvalidConfig. Its text names the group and the endpoint, as in
// `invalid MultiEndpoint configuration: group "east": endpoint 1 "psc-west2:443": duplicate
// endpoint (same as "psc-west2:443" at position 0)`.
type ConfigError struct {
	// Group is the group (MultiEndpoint) name; "" when the mistake is not in a group.
	Group string
	// Endpoint is the offending endpoint as given, if the mistake concerns one.
	Endpoint string
	// Index is the endpoint's position in the group's list, or -1 when the mistake is not
	// in a list.
	Index int
	// Problem says what is wrong, e.g. "duplicate endpoint (same as ...)"; for a setting,
	// it starts with the setting's name.
	Problem string
}

// Error returns ErrInvalidConfig's text, then the group, the endpoint and the problem.
func (e *ConfigError) Error() string {
	return multiendpoint.ConfigErrorText(e.Group, e.Endpoint, e.Index, e.Problem)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// fromStateMachine returns err, an error of internal/multiendpoint, with its *ConfigError
// converted to this package's; any other error unchanged.
func fromStateMachine(err error) error {
	var ce *multiendpoint.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	return &ConfigError{Group: ce.Group, Endpoint: ce.Endpoint, Index: ce.Index, Problem: ce.Problem}
}

func configErr(group, endpoint string, index int, format string, args ...any) error {
	return &ConfigError{Group: group, Endpoint: endpoint, Index: index, Problem: fmt.Sprintf(format, args...)}
}

// ConfigFileError is a mistake in a configuration file: where it is and what is wrong. Use
// errors.As to get it. It wraps ErrInvalidConfig, and Err when not nil.
type ConfigFileError struct {
	// File is the path given to LoadConfig; "" for ParseConfig.
	File string
	// Line and Column locate the mistake (1-based); 0 when unknown (Column of a syntax
	// error) or the mistake is the whole file's.
	Line, Column int
	// Field is the path of the offending field, e.g. "multiEndpoints.default.recoveryTimeout"
	// or "multiEndpoints.default.endpoints[1]"; "" for the whole file.
	Field string
	// Problem says what is wrong.
	Problem string
	// Err is the *ConfigError of a mistake found by the same validation as
	// NewGCPMultiEndpoint's, or nil.
	Err error
}

func (e *ConfigFileError) Error() string {
	if e.File == "" { // placed by line and column alone, as the decoder words it
		return "spannerme configuration: " + (&configfile.Error{Line: e.Line, Column: e.Column, Field: e.Field, Problem: e.Problem}).Error()
	}
	var b strings.Builder
	b.WriteString("spannerme configuration: ")
	switch {
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	default:
		b.WriteString(e.File + ": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

// Unwrap returns ErrInvalidConfig and Err.
func (e *ConfigFileError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidConfig, e.Err}
	}
	return []error{ErrInvalidConfig}
}

// The limits of what a ConfigFileError holds: its Field holds at most maxErrorField bytes
// and its Problem at most maxErrorProblem; what is cut ends with a marker ("…[cut: N bytes in
// all]"). A value of the file is quoted with at most configfile.MaxQuoted bytes of it.
const (
	maxErrorField   = 256
	maxErrorProblem = 512
)
