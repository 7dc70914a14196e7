package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

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
	return serverSaying(t, "\x1b]0;pwned\x07\x1b[32mOK\x1b[0m\r\x1b[2K"+strings.Repeat("x", 10000))
}

// serverSaying is a plaintext gRPC server on loopback that fails every call with message.
func serverSaying(t *testing.T, message string) (addr, said string) {
	t.Helper()
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

// jsonSafe escapes C1 controls and format characters, above U+FFFF too, and keeps the JSON
// valid with the same values.
func TestJSONSafe(t *testing.T) {
	in := "C1 \u009b31m bidi \u202eevil tag \U000e0041 bom \ufeff sep \u2028 ok é 日本"
	b, err := json.Marshal(map[string]string{in: in})
	if err != nil {
		t.Fatal(err)
	}
	out := jsonSafe(b)
	for _, raw := range []string{"\u009b", "\u202e", "\U000e0041", "\ufeff", "\u2028"} {
		if bytes.Contains(out, []byte(raw)) {
			t.Errorf("jsonSafe left %q raw: %s", raw, out)
		}
	}
	for _, want := range []string{`\u009b`, `\u202e`, `\udb40\udc41`, `\ufeff`, "é 日本"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("jsonSafe output lacks %s: %s", want, out)
		}
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil || got[in] != in {
		t.Errorf("jsonSafe output decodes to %q, %v; want the same values", got, err)
	}
}

// checkEscaped fails unless s holds only valid UTF-8 and no character that escaped reports,
// but for newlines and tabs when layout is set.
func checkEscaped(t *testing.T, what, s string, layout bool) {
	t.Helper()
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\ufffd") {
			t.Fatalf("%s holds an invalid byte at %d: %q", what, i, s)
		}
		if escaped(r) && !(layout && (r == '\n' || r == '\t')) {
			t.Fatalf("%s holds %U raw at %d: %q", what, r, i, s)
		}
	}
}

// FuzzTerminalText: whatever the text, what the commands print of it holds no control or
// format character and no invalid UTF-8, and jsonSafe's output is valid JSON that decodes to
// what encoding/json's does.
func FuzzTerminalText(f *testing.F) {
	for _, s := range []string{"plain", "\x1b]0;title\x07", "C1 \u009b31m", "bidi \u202eevil \u2066x\u2069", "bad \xff\xc2 byte",
		"tag \U000e0041", "\u2028\u2029", "a\tb\nc\r", "\xe2\x80", "\ufffd", `"\u009b"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkEscaped(t, "printable", printable(s), false)
		var b strings.Builder
		if _, err := (terminal{&b}).Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		checkEscaped(t, "the terminal writer's output", b.String(), true)
		raw, err := json.MarshalIndent(map[string][]string{s: {s, s + "x"}}, "", "\t")
		if err != nil {
			t.Fatal(err)
		}
		safe := jsonSafe(raw)
		checkEscaped(t, "jsonSafe", string(safe), true)
		var want, got map[string][]string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(safe, &got); err != nil {
			t.Fatalf("jsonSafe output is not valid JSON: %v: %s", err, safe)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("jsonSafe output decodes to %q, want %q", got, want)
		}
	})
}

// check --json against a server whose text carries U+009B (CSI, a C1 control) and U+202E
// (RLO, a bidirectional override), with a group whose name carries them too: stdout holds
// no raw byte of either, and parses as JSON with the same text.
func TestCheckJSONEscapesC1AndBidi(t *testing.T) {
	const csi, rlo = "\u009b", "\u202e"
	addr, _ := serverSaying(t, "fine"+csi+"31m "+rlo+"txt.exe")
	group := "g" + csi + "2J" + rlo
	cfg := writeConfig(t, fmt.Sprintf("default: \"g\\u009b2J\\u202e\"\nmultiEndpoints: {\"g\\u009b2J\\u202e\": {endpoints: ['%s']}}\n", addr))
	out, errOut, code := cli(t, nil, "check", "--json", "--config", cfg, "--database", "projects/p/instances/i/databases/d", "--plaintext", "--no-auth")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d", code, exitFailed)
	}
	for _, raw := range []string{csi, rlo} {
		if n := strings.Count(out, raw) + strings.Count(errOut, raw); n != 0 {
			t.Errorf("%d raw %U in the output", n, []rune(raw)[0])
		}
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if len(rep.Groups) != 1 || rep.Groups[0].Name != group {
		t.Fatalf("groups %+v; want the one group, named %q", rep.Groups, group)
	}
	var texts []string
	for _, s := range rep.Groups[0].Endpoints[0].Steps {
		texts = append(texts, s.Error)
	}
	if joined := strings.Join(texts, " "); !strings.Contains(joined, "fine"+csi+"31m "+rlo+"txt.exe") {
		t.Errorf("the server's text does not decode back from the JSON: %q", joined)
	}
	if !strings.Contains(out, `\u009b`) || !strings.Contains(out, `\u202e`) {
		t.Errorf("the output does not show the characters as JSON escapes:\n%s", out)
	}
}
