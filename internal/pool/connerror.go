package pool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// ConnError is a connection error of a pool: why a connection attempt failed, or that a
// ready connection was closed.
type ConnError struct {
	Kind    ConnErrorKind
	Message string // gRPC's (or the name resolver's) description of the error
	At      time.Time
}

// ConnErrorKind classifies a connection error: a short lowercase word. The public
// spannerme.ConnErrorKind documents each kind.
type ConnErrorKind string

// The kinds of connection errors.
const (
	KindDNS         ConnErrorKind = "dns"
	KindRefused     ConnErrorKind = "refused"
	KindUnreachable ConnErrorKind = "unreachable"
	KindTimeout     ConnErrorKind = "timeout"
	KindTLS         ConnErrorKind = "tls"
	KindHandshake   ConnErrorKind = "handshake"
	KindReset       ConnErrorKind = "reset"
	KindClosed      ConnErrorKind = "closed"
	KindOther       ConnErrorKind = "other"
	// KindUnknown: no error was recorded (Observer.Down, FirstAttemptFailed).
	KindUnknown ConnErrorKind = "unknown"
)

// errConnClosed is the message of a KindClosed error.
var errConnClosed = errors.New("a ready connection was closed (GOAWAY from the server, reset, or keepalive timeout)")

// ClassifyConnError returns the kind of a connection attempt's error, as gRPC reports it to
// its load balancer (a transport ConnectionError wrapping the dialer's or the handshake's
// error).
//
// KindTLS, the one kind that retrying cannot fix (calls fail fast on it: spannerme's
// permanentConnError), is given only to what docs/failure-semantics.md lists: a peer that
// does not speak TLS (tls.RecordHeaderError: its first bytes are no TLS record) and a server
// certificate that fails verification (*tls.CertificateVerificationError, or the x509
// UnknownAuthorityError, HostnameError or CertificateInvalidError it wraps: not trusted, for
// another name, expired). Every other TLS failure may heal and is KindHandshake: an alert
// the server answered with (crypto/tls reports it as a *net.OpError whose Op is "remote
// error"; tls.AlertError is QUIC's form), such as internal_error (RFC 8446 §6.2: unrelated
// to the peer or the configuration), and the handshake errors crypto/tls gives no type.
//
// These are recognised by type: gRPC keeps the handshake's error in the ConnectionError it
// hands the balancer (grpc-go v1.85, internal/transport: ConnectionError.Unwrap returns it;
// credentials/tls.go returns crypto/tls's error unwrapped), and crypto/tls wraps with
// Unwrap too, so errors.As finds them (TestHandshakeErrorsReachTheBalancerWithTheirTypes).
// The messages are read only for an error whose chain has no type (a DialFunc, dialer or
// transport credentials that format the error into text): then only the messages of those
// types count as KindTLS, and any other "tls:" text is KindHandshake.
func ClassifyConnError(err error) ConnErrorKind {
	var dnsErr *net.DNSError
	var recordErr tls.RecordHeaderError
	var verifyErr *tls.CertificateVerificationError
	var authorityErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var opErr *net.OpError
	var alertErr tls.AlertError
	var netErr net.Error
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	case err == nil:
		return KindOther
	case errors.Is(err, errNoAddresses), errors.As(err, &dnsErr):
		return KindDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return KindUnreachable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return KindReset
	case errors.As(err, &recordErr), errors.As(err, &verifyErr),
		errors.As(err, &authorityErr), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return KindTLS
	case errors.As(err, &opErr) && opErr.Op == "remote error", errors.As(err, &alertErr):
		return KindHandshake
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT),
		errors.As(err, &netErr) && netErr.Timeout(), strings.Contains(msg, "deadline exceeded"), strings.Contains(msg, "i/o timeout"),
		// gRPC closes the connection when the attempt's deadline passes during the HTTP/2
		// handshake; the read of the server's preface then fails so.
		errors.Is(err, net.ErrClosed), strings.Contains(msg, "use of closed network connection"):
		return KindTimeout
	// Text only from here: no type in the chain said what the error is.
	case strings.Contains(msg, "first record does not look like a TLS handshake"), // tls.RecordHeaderError
		strings.Contains(msg, "tls: failed to verify certificate"), // *tls.CertificateVerificationError
		strings.Contains(msg, "x509: certificate"):                 // the x509 verification errors
		return KindTLS
	case strings.Contains(msg, "no such host"), strings.Contains(msg, "dns:"):
		return KindDNS
	case strings.Contains(msg, "connection refused"):
		return KindRefused
	case strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"):
		return KindReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(msg, "preface"),
		strings.Contains(msg, "settings frame"), strings.Contains(msg, "EOF"), strings.Contains(msg, "http2"),
		// gRPC wraps every error of the TLS handshake in "authentication handshake failed";
		// what is left of them (an alert, an error crypto/tls gives no type) may heal.
		strings.Contains(msg, "tls:"), strings.Contains(msg, "authentication handshake failed"):
		return KindHandshake
	}
	return KindOther
}
