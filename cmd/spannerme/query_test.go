package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
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
