package spannerme

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// ErrInvalidConfig is wrapped by every configuration error returned by NewGCPMultiEndpoint,
// UpdateMultiEndpoints and the client constructors; test for it with errors.Is. The error's
// text names the offending group and endpoint.
var ErrInvalidConfig = multiendpoint.ErrInvalidConfig

// ErrClosed is returned by UpdateMultiEndpoints and NewClient after Close (and on a
// zero-value GCPMultiEndpoint). Calls made then, those of every Spanner client over the
// GCPMultiEndpoint included, fail with a gRPC status CANCELED carrying the same text, which
// the Spanner client does not retry: a closed GCPMultiEndpoint does not reopen.
var ErrClosed = errors.New("spannerme: GCPMultiEndpoint is closed")

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

// permanentConnError reports whether a connection error of kind k is one that retrying the
// connection does not fix: a plaintext server dialed with TLS, or a certificate that fails
// verification (not trusted, for another name, expired), fails the same way at every attempt
// until the client's or the server's transport settings change (pool.ClassifyConnError gives
// only those KindTLS, by their crypto/tls and crypto/x509 types). Every other kind may heal
// by itself (a server restarting, a name being published, a network blip, a TLS alert such
// as internal_error), so calls wait for it; see docs/failure-semantics.md.
func permanentConnError(k pool.ConnErrorKind) bool { return k == pool.KindTLS }

// waitEndedError is the error of a call whose context ended while it waited for the pool p,
// of group me, to connect: the context's code (DEADLINE_EXCEEDED or CANCELED, as
// status.FromContextError gives it), with a message naming the endpoint, the group, the
// pool's state and its last connection error since it was last ready.
func waitEndedError(ctx context.Context, me *multiendpoint.MultiEndpoint, p *pool.Pool) error {
	cause := "no connection attempt has failed yet"
	if c, ok := p.DownCause(); ok {
		cause = fmt.Sprintf("last connection error: %s: %s", c.Kind, c.Message)
	}
	return status.Errorf(status.FromContextError(ctx.Err()).Code(), "spannerme: %v while waiting for endpoint %s of group %q to connect (%s; %s)",
		ctx.Err(), p.Endpoint(), me.Name(), p.State(), cause)
}

// notConnectedError returns err, an error of a call sent to the pool p of group me, with
// the endpoint, the group and the pool's connection error added to its message when it is
// UNAVAILABLE and p is not ready: gRPC fails such a call fast with a message that names
// neither ("all SubConns are in TransientFailure", from grpcgcp's picker). The code and
// the details are kept, so the Spanner client retries it as before. Any other err is
// returned unchanged.
func notConnectedError(err error, me *multiendpoint.MultiEndpoint, p *pool.Pool) error {
	if p.State() == connectivity.Ready {
		return err
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return err
	}
	c, ok := p.DownCause()
	if !ok {
		return err
	}
	sp := st.Proto()
	sp.Message = fmt.Sprintf("spannerme: endpoint %s of group %q is not connected (last connection error: %s: %s): %s",
		p.Endpoint(), me.Name(), c.Kind, c.Message, sp.GetMessage())
	return status.ErrorProto(sp)
}

func configErr(group, endpoint string, index int, format string, args ...any) error {
	return &ConfigError{Group: group, Endpoint: endpoint, Index: index, Problem: fmt.Sprintf(format, args...)}
}
