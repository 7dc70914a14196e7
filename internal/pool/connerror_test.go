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
		{"TLS record", fmt.Errorf("transport: authentication handshake failed: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), KindTLS},
		{"unknown authority", fmt.Errorf("transport: authentication handshake failed: %w", x509.UnknownAuthorityError{}), KindTLS},
		{"wrong host", fmt.Errorf("x: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}), KindTLS},
		{"TLS alert", fmt.Errorf("x: %w", tls.AlertError(40)), KindTLS},
		{"TLS text", errors.New("transport: authentication handshake failed: tls: bad certificate"), KindTLS},
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
