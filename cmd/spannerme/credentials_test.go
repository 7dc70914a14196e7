package main

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
)

// connCounter listens on 127.0.0.1 and counts the connections it accepts (and closes).
type connCounter struct {
	addr string
	mu   sync.Mutex // guards n
	n    int
}

func startConnCounter(t *testing.T) *connCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &connCounter{addr: ln.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			c.n++
			c.mu.Unlock()
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return c
}

func (c *connCounter) accepted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// --plaintext without --no-auth would send the credentials' token in plaintext: both
// commands refuse it before dialing (exit 2), so a plaintext server on loopback sees no
// connection, let alone an authorization header.
func TestPlaintextNeedsNoAuth(t *testing.T) {
	srv := startConnCounter(t)
	cfg := writeConfig(t, fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}}\n", srv.addr))
	db := "projects/p/instances/i/databases/d"
	for _, args := range [][]string{
		{"check", "--config", cfg, "--database", db, "--plaintext"},
		{"check", "--config", cfg, "--database", db, "--plaintext", "--json"},
		{"query", "--config", cfg, "--database", db, "--plaintext", "--sql", "SELECT 1"},
	} {
		out, errOut, code := cli(t, nil, args...)
		if code != exitBadArgs || !strings.Contains(errOut, "--plaintext without --no-auth") || out != "" {
			t.Errorf("spannerme %q: exit %d, stdout %q, stderr %q; want exit %d and the refusal", args, code, out, errOut, exitBadArgs)
		}
	}
	if n := srv.accepted(); n != 0 {
		t.Errorf("the plaintext server accepted %d connections; want none", n)
	}
}
