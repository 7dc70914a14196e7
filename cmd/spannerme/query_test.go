package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/testutil"
)

// acceptsWithin reports whether ln accepts a connection within d: one a client opened
// before (the kernel queues it until it is accepted, even after the client exited) or opens
// meanwhile.
func acceptsWithin(t *testing.T, ln *net.TCPListener, d time.Duration) bool {
	t.Helper()
	if err := ln.SetDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("accept: %v", err)
		}
		return false
	}
	c.Close()
	return true
}

// query and check refuse an unknown group and a malformed database path with exit status 2
// before dialing any endpoint: the endpoint's listener accepts no connection. A query with
// good input dials the same listener, so it would have seen a dial.
func TestQueryRefusesBadInputBeforeDialing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.(*net.TCPListener)
	defer ln.Close()
	cfg := writeConfig(t, fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}, west: {endpoints: ['%[1]s']}}\n", ln.Addr()))
	db := "projects/p/instances/i/databases/d"
	flags := []string{"--config", cfg, "--plaintext", "--no-auth", "--timeout", "2s"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"query", "--database", db, "--group", "eats", "--sql", "SELECT 1"}, flags...), `--group "eats" is not a group of ` + cfg},
		{append([]string{"query", "--database", "x", "--group", "west", "--sql", "SELECT 1"}, flags...), `--database "x" is not projects/P/instances/I/databases/D`},
		{append([]string{"check", "--database", "x"}, flags...), `--database "x" is not projects/P/instances/I/databases/D`},
	} {
		out, errOut, code := cli(t, nil, tc.args...)
		if code != exitBadArgs || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("spannerme %q: exit %d, stdout %q, stderr %q; want 2, nothing, and %q", tc.args, code, out, errOut, tc.want)
		}
		if acceptsWithin(t, ln, 300*time.Millisecond) {
			t.Errorf("spannerme %q dialed the endpoint", tc.args)
		}
	}

	// Good input: the query dials (and fails, the listener being no Spanner).
	if _, _, code := cli(t, nil, append([]string{"query", "--database", db, "--group", "west", "--sql", "SELECT 1"}, flags...)...); code != exitFailed {
		t.Errorf("query with good input: exit %d, want 1", code)
	}
	if !acceptsWithin(t, ln, 10*time.Second) {
		t.Fatal("the query with good input did not dial the endpoint: the listener would not see a dial")
	}
}

// A query through a group whose endpoint refuses connections stops within 5s of its start
// (--connect-timeout, 3s by default, under --timeout's 30s) and says what check would: the
// endpoint and "connection refused". It says nothing about the other group, whose endpoint
// is as dead: the query does not use it.
func TestQueryOnClosedPortSaysWhyWithin5s(t *testing.T) {
	used, other := testutil.ClosedAddr(t), testutil.ClosedAddr(t)
	cfg := writeConfig(t, fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}, other: {endpoints: ['%s']}}\n", used, other))
	start := time.Now()
	_, errOut, code := cli(t, nil, "query", "--config", cfg, "--database", "projects/p/instances/i/databases/d",
		"--plaintext", "--no-auth", "--sql", "SELECT 1")
	took := time.Since(start)
	if code != exitFailed {
		t.Errorf("exit %d, want 1", code)
	}
	if took > 5*time.Second {
		t.Errorf("query took %v, want at most 5s", took)
	}
	for _, want := range []string{"no endpoint of group \"d\" was available", "0 " + used + ": Unavailable", "refused: ", "connection refused", "spannerme check"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if strings.Contains(errOut, other) || strings.Contains(errOut, "other") {
		t.Errorf("stderr mentions the group the query does not use (%s)", other)
	}
}

// Dialed in plaintext, a server that answers with something other than HTTP/2 (here
// HTTP/1.1) fails with gRPC's "http2: frame too large" or a server-preface error: check's
// gRPC step and query both add a hint at a TLS server, an HTTP/1 server or a wrong port.
func TestCLIHintsAtWrongPort(t *testing.T) {
	addr := notGRPC(t)
	cfg := writeConfig(t, fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}}\n", addr))
	flags := []string{"--config", cfg, "--database", "projects/p/instances/i/databases/d", "--plaintext", "--no-auth"}
	const hint = "hint: the server on this port does not speak gRPC in plaintext"
	out, _, code := cli(t, nil, append([]string{"check"}, flags...)...)
	if code != exitFailed || !strings.Contains(out, hint) {
		t.Errorf("check: exit %d; output lacks %q", code, hint)
	}
	_, errOut, code := cli(t, nil, append([]string{"query", "--sql", "SELECT 1"}, flags...)...)
	if code != exitFailed || !strings.Contains(errOut, hint) {
		t.Errorf("query: exit %d; stderr lacks %q", code, hint)
	}
}
