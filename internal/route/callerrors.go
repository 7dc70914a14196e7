package route

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// The errors of a call whose endpoint is not connected: each names the endpoint, the group
// and the pool's last connection error (docs/failure-semantics.md, "Errors that name their
// cause").

// permanentConnError reports whether a connection error of kind k is one that retrying the
// connection does not fix: a plaintext server dialed with TLS, or a certificate that fails
// verification (not trusted, for another name, expired), fails the same way at every attempt
// until the client's or the server's transport settings change (pool.ClassifyConnError gives
// only those KindTLS, by their crypto/tls and crypto/x509 types). Every other kind may heal
// by itself (a server restarting, a name being published, a network blip, a TLS alert such
// as internal_error), so calls wait for it; see docs/failure-semantics.md.
func permanentConnError(k pool.ConnErrorKind) bool { return k == pool.KindTLS }

// WaitEnded is the error of a call whose context ended while it waited for the pool p,
// of group me, to connect: the context's code (DEADLINE_EXCEEDED or CANCELED, as
// status.FromContextError gives it), with a message naming the endpoint, the group, the
// pool's state and its last connection error since it was last ready.
func WaitEnded(ctx context.Context, me *multiendpoint.MultiEndpoint, p *pool.Pool) error {
	cause := "no connection attempt has failed yet"
	if c, ok := p.DownCause(); ok {
		cause = fmt.Sprintf("last connection error: %s: %s", c.Kind, c.Message)
	}
	return status.Errorf(status.FromContextError(ctx.Err()).Code(), "spannerme: %v while waiting for endpoint %s of group %q to connect (%s; %s)",
		ctx.Err(), p.Endpoint(), me.Name(), p.State(), cause)
}

// NotConnected returns err, an error of a call sent to the pool p of group me, with
// the endpoint, the group and the pool's connection error added to its message when it is
// UNAVAILABLE and p is not ready: gRPC fails such a call fast with a message that names
// neither ("all SubConns are in TransientFailure", from grpcgcp's picker). The code and
// the details are kept, so the Spanner client retries it as before. Any other err is
// returned unchanged.
func NotConnected(err error, me *multiendpoint.MultiEndpoint, p *pool.Pool) error {
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

// CannotConnect returns the error a call on group me, whose pool p is not ready, fails with at
// once instead of waiting for a connection: FAILED_PRECONDITION (which neither the Spanner
// client nor gax retries, so the Spanner client's session creation fails with it and the caller
// sees it) naming the group, each endpoint and its connection error, when no endpoint of me is
// available and every one of them has failed its connection attempts since it was last ready
// with an error that retrying does not fix (permanentConnError); snap holds the routing
// table in force (nil: closed), loaded only for such an error. Nil otherwise: the call waits, or goes to gRPC, as before. It allocates
// nothing unless p's own error is such an error (then it reads the group's status, under the
// group's lock).
func CannotConnect(snap *atomic.Pointer[Table], me *multiendpoint.MultiEndpoint, p *pool.Pool) error {
	if c, ok := p.DownCause(); !ok || !permanentConnError(c.Kind) {
		return nil
	}
	s := snap.Load()
	if s == nil {
		return nil
	}
	var causes []string
	for _, e := range me.Status().Endpoints {
		q := s.Pools[e.Endpoint]
		if q == nil || q.Available() {
			return nil
		}
		c, ok := q.DownCause()
		if !ok || !permanentConnError(c.Kind) {
			return nil
		}
		causes = append(causes, fmt.Sprintf("endpoint %s: %s: %s", e.Endpoint, c.Kind, c.Message))
	}
	if len(causes) == 0 {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"spannerme: group %q cannot connect, and retrying will not fix it (check the transport settings: TLS or plaintext, the authority, the certificates): %s",
		me.Name(), strings.Join(causes, "; "))
}

// ClosedCall returns the error of calls made after the GCPMultiEndpoint's Close: a gRPC
// status CANCELED (the code gRPC uses for a call on a closed ClientConn) with closed's text,
// for which errors.Is(err, closed) is true, also through the Spanner client's wrapping
// (*spanner.Error and apierror.APIError unwrap to it).
func ClosedCall(closed error) error {
	return closedCall{closed: closed, st: status.New(codes.Canceled, closed.Error())}
}

// closedCall is a gRPC status error (CANCELED) that is its sentinel for errors.Is.
type closedCall struct {
	closed error
	st     *status.Status
}

func (e closedCall) Error() string              { return e.st.Err().Error() }
func (e closedCall) GRPCStatus() *status.Status { return e.st }
func (e closedCall) Is(target error) bool       { return target == e.closed }
