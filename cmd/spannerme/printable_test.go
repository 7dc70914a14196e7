package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, ünïcode, 日本", "plain text, ünïcode, 日本"},
		{"\x1b]0;title\x07", `\x1b]0;title\x07`},
		{"\x1b[32mOK\x1b[0m", `\x1b[32mOK\x1b[0m`},
		{"tab\there\nnewline\rcr", `tab\x09here\x0anewline\x0dcr`},
		{"C1 \u009b31m", `C1 \x9b31m`},
		{"bidi \u202eevil", `bidi \u202eevil`},
		{"bad \xff byte", `bad \xff byte`},
		{"del \x7f", `del \x7f`},
	} {
		if got := printable(tc.in); got != tc.want {
			t.Errorf("printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTerminalWriter(t *testing.T) {
	var b bytes.Buffer
	if _, err := fmt.Fprint(terminal{&b}, "a\tb\nc\x1b[2Jd\x7f"); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "a\tb\nc\\x1b[2Jd\\x7f"; got != want {
		t.Errorf("written %q, want %q", got, want)
	}
}

// hostileServer is a plaintext gRPC server on loopback that fails every call with text meant
// for a terminal: a window title, a fake green "OK", a cursor move; and 10 KB of it.
func hostileServer(t *testing.T) (addr, message string) {
	t.Helper()
	message = "\x1b]0;pwned\x07\x1b[32mOK\x1b[0m\r\x1b[2K" + strings.Repeat("x", 10000)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.Internal, message)
	}))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String(), message
}

// What a server says reaches the table cut and with its control characters escaped: the
// output holds no control character but newlines.
func TestCheckTableHoldsNoControlCharacters(t *testing.T) {
	addr, _ := hostileServer(t)
	cfg := writeConfig(t, fmt.Sprintf("default: \"g\\e[31m\"\nmultiEndpoints: {\"g\\e[31m\": {endpoints: ['%s']}}\n", addr))
	out, errOut, code := cli(t, nil, "check", "--config", cfg, "--database", "projects/p/instances/i/databases/d", "--plaintext", "--no-auth")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d", code, exitFailed)
	}
	for _, s := range []string{out, errOut} {
		for i, c := range s {
			if (c < 0x20 && c != '\n') || (c >= 0x7f && c < 0xa0) {
				t.Fatalf("output holds control character %q at %d:\n%s", c, i, s)
			}
		}
	}
	if !strings.Contains(out, `\x1b]0;pwned\x07\x1b[32mOK`) || !strings.Contains(out, `g\x1b[31m`) {
		t.Errorf("the server's text or the group's name is not shown escaped:\n%s", out)
	}
	if strings.Contains(out, strings.Repeat("x", 600)) || !strings.Contains(out, "…[cut: ") {
		t.Errorf("the server's 10 KB of text is not cut:\n%s", out)
	}
}
