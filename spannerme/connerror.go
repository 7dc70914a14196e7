package spannerme

import (
	"time"
)

// ConnError is a connection error of an endpoint's pool: why a connection attempt failed, or
// that a ready connection was closed. It is history (PoolStatus.LastError keeps the most
// recent one), not a call's error.
type ConnError struct {
	// Kind classifies the error.
	Kind ConnErrorKind `json:"kind"`
	// Message is gRPC's (or the name resolver's) description of the error, which may quote
	// the server: at most 512 bytes of it, ending with "…[cut: N bytes in all]" when cut.
	Message string `json:"message"`
	// At is when the error was seen.
	At time.Time `json:"at"`
}

// Error returns the kind and the message.
func (e *ConnError) Error() string { return string(e.Kind) + ": " + e.Message }

// ConnErrorKind classifies a connection error. It is a short lowercase word, usable as a
// metric attribute or a log value.
type ConnErrorKind string

// The kinds of connection errors.
const (
	// ConnDNS: the endpoint's name did not resolve (no such host, no address, resolver
	// error).
	ConnDNS ConnErrorKind = "dns"
	// ConnRefused: the connection was refused (nothing listens on the address: ECONNREFUSED).
	ConnRefused ConnErrorKind = "refused"
	// ConnUnreachable: no route to the address (ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL).
	ConnUnreachable ConnErrorKind = "unreachable"
	// ConnTimeout: the connection attempt (TCP, TLS or HTTP/2 handshake) did not complete
	// within its deadline (Settings.MinConnectTimeout, or gRPC's backoff if longer): the
	// address accepts nothing, or accepts TCP and never answers.
	ConnTimeout ConnErrorKind = "timeout"
	// ConnTLS: the TLS handshake failed in a way that retrying does not fix: the server does
	// not speak TLS (a plaintext endpoint dialed with TLS), or its certificate failed
	// verification (not trusted, for another name, expired). Calls may fail fast on it
	// (docs/failure-semantics.md, "Errors that name their cause"). Other TLS failures are
	// ConnHandshake.
	ConnTLS ConnErrorKind = "tls"
	// ConnHandshake: the TLS or HTTP/2 handshake failed after the connection was made, in a
	// way that may heal: the server closed the connection, answered the TLS handshake with an
	// alert (such as internal_error), failed it otherwise, or did not speak HTTP/2 (e.g. a
	// TLS server dialed in plaintext).
	ConnHandshake ConnErrorKind = "handshake"
	// ConnReset: the connection was reset by the peer during the attempt (ECONNRESET,
	// ECONNABORTED, EPIPE).
	ConnReset ConnErrorKind = "reset"
	// ConnClosed: a ready connection was closed: the server sent GOAWAY (shutdown, maximum
	// connection age), the connection was reset, or a keepalive ping went unanswered. gRPC
	// tells its load balancer only that the connection ended, not which of these it was.
	ConnClosed ConnErrorKind = "closed"
	// ConnOther: anything else; Message says what.
	ConnOther ConnErrorKind = "other"
)
