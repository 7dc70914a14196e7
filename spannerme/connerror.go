package spannerme

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

// ConnError is a connection error of an endpoint's pool: why a connection attempt failed, or
// that a ready connection was closed. It is history (PoolStatus.LastError keeps the most
// recent one), not a call's error.
type ConnError struct {
	// Kind classifies the error.
	Kind ConnErrorKind `json:"kind"`
	// Message is gRPC's (or the name resolver's) description of the error.
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
	// ConnTLS: the TLS handshake failed: certificate not trusted, wrong server name, a TLS
	// alert, or a server that does not speak TLS.
	ConnTLS ConnErrorKind = "tls"
	// ConnHandshake: the HTTP/2 handshake failed after the connection was made (the server
	// closed it, or did not speak HTTP/2, e.g. a TLS server dialed in plaintext).
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

// errConnClosed is the message of a ConnClosed error.
var errConnClosed = errors.New("a ready connection was closed (GOAWAY from the server, reset, or keepalive timeout)")

// classifyConnError returns the kind of a connection attempt's error, as gRPC reports it to
// its load balancer (a transport ConnectionError wrapping the dialer's or the handshake's
// error).
func classifyConnError(err error) ConnErrorKind {
	var dnsErr *net.DNSError
	var recordErr tls.RecordHeaderError
	var verifyErr *tls.CertificateVerificationError
	var alertErr tls.AlertError
	var authorityErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var netErr net.Error
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	case err == nil:
		return ConnOther
	case errors.Is(err, errNoAddresses), errors.As(err, &dnsErr):
		return ConnDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return ConnRefused
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return ConnUnreachable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return ConnReset
	case errors.As(err, &recordErr), errors.As(err, &verifyErr), errors.As(err, &alertErr),
		errors.As(err, &authorityErr), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return ConnTLS
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT),
		errors.As(err, &netErr) && netErr.Timeout(), strings.Contains(msg, "deadline exceeded"), strings.Contains(msg, "i/o timeout"),
		// gRPC closes the connection when the attempt's deadline passes during the HTTP/2
		// handshake; the read of the server's preface then fails so.
		errors.Is(err, net.ErrClosed), strings.Contains(msg, "use of closed network connection"):
		return ConnTimeout
	case strings.Contains(msg, "tls:"), strings.Contains(msg, "x509:"), strings.Contains(msg, "authentication handshake failed"):
		return ConnTLS
	case strings.Contains(msg, "no such host"), strings.Contains(msg, "dns:"):
		return ConnDNS
	case strings.Contains(msg, "connection refused"):
		return ConnRefused
	case strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"):
		return ConnReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(msg, "preface"),
		strings.Contains(msg, "settings frame"), strings.Contains(msg, "EOF"), strings.Contains(msg, "http2"):
		return ConnHandshake
	}
	return ConnOther
}
