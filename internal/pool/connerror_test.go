package pool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

// handshakeErr wraps err as gRPC's transport does an error of the TLS handshake (its
// ConnectionError is internal: %w stands for its Unwrap).
func handshakeErr(err error) error {
	return fmt.Errorf("connection error: desc = \"transport: authentication handshake failed: %w\"", err)
}

// remoteAlert is what crypto/tls returns for an alert the server sent: a *net.OpError "remote
// error" around its unexported alert type, whose text is text.
func remoteAlert(text string) error { return &net.OpError{Op: "remote error", Err: errors.New(text)} }

func TestClassifyConnError(t *testing.T) {
	opErr := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want ConnErrorKind
	}{
		{"refused", opErr(os.NewSyscallError("connect", syscall.ECONNREFUSED)), KindRefused},
		{"refused, text only", errors.New(`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), KindRefused},
		{"no such host", opErr(&net.DNSError{Err: "no such host", Name: "nowhere", IsNotFound: true}), KindDNS},
		{"no address", errNoAddresses, KindDNS},
		{"resolver text", errors.New("dns: A record lookup error: lookup x on 10.0.0.1:53: no such host"), KindDNS},
		{"unreachable", opErr(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), KindUnreachable},
		{"reset", opErr(os.NewSyscallError("read", syscall.ECONNRESET)), KindReset},
		{"deadline", fmt.Errorf("transport: %w", context.DeadlineExceeded), KindTimeout},
		{"os deadline", opErr(os.ErrDeadlineExceeded), KindTimeout},
		{"TLS handshake timeout", errors.New("transport: authentication handshake failed: context deadline exceeded"), KindTimeout},
		// Retrying cannot fix these: KindTLS, by type.
		{"plaintext peer", handshakeErr(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), KindTLS},
		{"certificate verification", handshakeErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), KindTLS},
		{"unknown authority", handshakeErr(x509.UnknownAuthorityError{}), KindTLS},
		{"wrong host", fmt.Errorf("x: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}), KindTLS},
		{"expired", handshakeErr(&tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Cert: &x509.Certificate{}, Reason: x509.Expired}}), KindTLS},
		// They may heal: KindHandshake, by type.
		{"internal_error alert", handshakeErr(remoteAlert("tls: internal error")), KindHandshake},
		{"handshake_failure alert", handshakeErr(remoteAlert("tls: handshake failure")), KindHandshake},
		{"alert from the server rejecting the client's certificate", handshakeErr(remoteAlert("tls: bad certificate")), KindHandshake},
		{"QUIC alert", fmt.Errorf("x: %w", tls.AlertError(80)), KindHandshake},
		{"the type decides, not the text", handshakeErr(remoteAlert("x509: certificate signed by unknown authority")), KindHandshake},
		// No type in the chain: the text, of those same types only.
		{"plaintext peer, text only", errors.New("transport: authentication handshake failed: tls: first record does not look like a TLS handshake"), KindTLS},
		{"certificate verification, text only", errors.New("transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"), KindTLS},
		{"wrong host, text only", errors.New("x509: certificate is valid for server, not other.example"), KindTLS},
		{"alert, text only", errors.New("transport: authentication handshake failed: remote error: tls: internal error"), KindHandshake},
		{"TLS error without a type", errors.New("transport: authentication handshake failed: tls: server selected unsupported protocol version 300"), KindHandshake},
		{"no ALPN", errors.New("transport: authentication handshake failed: credentials: cannot check peer: missing selected ALPN property"), KindHandshake},
		{"closed during the TLS handshake", errors.New(`connection error: desc = "transport: authentication handshake failed: EOF"`), KindHandshake},
		{"reset during the TLS handshake", errors.New("transport: authentication handshake failed: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"), KindReset},
		{"preface EOF", fmt.Errorf("error reading server preface: %w", io.EOF), KindHandshake},
		{"closed by the attempt's deadline", fmt.Errorf("error reading server preface: %w", &net.OpError{Op: "raw-read", Err: net.ErrClosed}), KindTimeout},
		{"not HTTP/2", errors.New("error reading server preface: http2: frame too large"), KindHandshake},
		{"preface text", errors.New("connection closed before server preface received"), KindHandshake},
		{"other", errors.New("something else"), KindOther},
		{"nil", nil, KindOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassifyConnError(tc.err); got != tc.want {
				t.Errorf("ClassifyConnError(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
