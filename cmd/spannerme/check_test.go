package main

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// notGRPC listens on 127.0.0.1 and answers every connection as an HTTP/1.1 server would, in
// plaintext, and keeps it open until the client closes it: an endpoint that accepts TCP but
// is neither TLS nor gRPC.
func notGRPC(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex // guards conns
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
				_, _ = io.Copy(io.Discard, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// The gRPC step of an endpoint whose connection fails says why, as gRPC knows it, not only
// that the connection is in TRANSIENT_FAILURE.
func TestCheckGRPCStepSaysWhy(t *testing.T) {
	addr := notGRPC(t)
	cfg := writeConfig(t, fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}}\n", addr))
	out, _, code := cli(t, nil, "check", "--config", cfg, "--database", "projects/p/instances/i/databases/d", "--plaintext", "--no-auth")
	if code != exitFailed {
		t.Errorf("exit %d, want 1", code)
	}
	prefix := addr + ": grpc: the connection failed (TRANSIENT_FAILURE): "
	if i := strings.Index(out, prefix); i < 0 || !strings.Contains(out[i+len(prefix):], "server preface") {
		t.Errorf("output lacks %q followed by gRPC's reason (the server preface)", prefix)
	}
}

// A TLS step that fails because the server speaks plaintext suggests --plaintext, not an
// authority: the authority hint is for certificate errors only.
func TestCheckTLSHints(t *testing.T) {
	addr := notGRPC(t)
	cfg := writeConfig(t, fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}}\n", addr))
	out, _, code := cli(t, nil, "check", "--config", cfg, "--database", "projects/p/instances/i/databases/d", "--no-auth")
	if code != exitFailed {
		t.Errorf("exit %d, want 1", code)
	}
	tlsLine := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, addr+": tls: ") {
			tlsLine = l
		}
	}
	if tlsLine == "" || strings.Contains(tlsLine, "authority") || !strings.Contains(tlsLine, "--plaintext") {
		t.Errorf("TLS error %q; want a hint at --plaintext and none at an authority", tlsLine)
	}
	if strings.Contains(out, "tls: tls:") {
		t.Errorf("the step's name is printed twice:\n%s", out)
	}
}
