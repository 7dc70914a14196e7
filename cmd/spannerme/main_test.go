package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/metadata"
	"cloud.google.com/go/spanner"
	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// binPath is where the command is built, once, for every test to run as a subprocess.
var (
	binDir   string
	buildErr error
	build    sync.Once
)

type removeAfter struct {
	m   *testing.M
	dir string
}

func (r removeAfter) Run() int {
	defer os.RemoveAll(r.dir)
	return r.m.Run()
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spannerme-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(removeAfter{m, dir}, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// binary builds the command (once per test binary) and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "spannerme")
	build.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// cli runs the built command with args and extra environment variables.
func cli(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	// Never redirected to an emulator by the caller's environment.
	cmd.Env = append(append(os.Environ(), "SPANNER_EMULATOR_HOST="), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running spannerme %v: %v", args, err)
	}
	t.Logf("spannerme %s -> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return out.String(), errOut.String(), code
}

// backend is one Spanner with a Greetings row and three fake PSC endpoints in front of it:
// group "default" is e[0], e[1]; group "west" is e[2], e[0].
type backend struct {
	database string
	e        []*spannermetest.Endpoint
	config   string // the configuration file's path
}

const greetingsDDL = "CREATE TABLE Greetings (Id INT64 NOT NULL, Text STRING(MAX)) PRIMARY KEY (Id)"

func newBackend(t *testing.T, addr, database string, direct *spanner.Client) *backend {
	t.Helper()
	if _, err := direct.Apply(t.Context(), []*spanner.Mutation{
		spanner.Insert("Greetings", []string{"Id", "Text"}, []any{1, "hello"}),
		spanner.Insert("Greetings", []string{"Id", "Text"}, []any{2, nil}),
	}); err != nil {
		t.Fatal(err)
	}
	b := &backend{database: database}
	for range 3 {
		b.e = append(b.e, spannermetest.NewEndpointTB(t, addr))
	}
	b.config = writeConfig(t, fmt.Sprintf("default: default\nmultiEndpoints:\n"+
		"  default: {endpoints: [%s, %s], recoveryTimeout: 200ms}\n"+
		"  west: {endpoints: [%s, %s], recoveryTimeout: 200ms}\n", b.e[0].Addr(), b.e[1].Addr(), b.e[2].Addr(), b.e[0].Addr()))
	return b
}

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spannerme.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func inMemory(t *testing.T) *backend {
	t.Helper()
	sp := spannermetest.NewSpannerTB(t, greetingsDDL)
	direct, err := sp.NewClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	return newBackend(t, sp.Addr(), sp.Database(), direct)
}

func (b *backend) check(t *testing.T, extra ...string) (string, string, int) {
	t.Helper()
	return cli(t, nil, append([]string{"check", "--config", b.config, "--database", b.database, "--plaintext", "--no-auth"}, extra...)...)
}

// squash collapses runs of spaces, so that checks do not depend on column widths.
func squash(s string) string {
	return regexp.MustCompile(` +`).ReplaceAllString(s, " ")
}

// line returns the table line of an endpoint in a group.
func line(out, group, endpoint string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == group && f[2] == endpoint {
			return l
		}
	}
	return ""
}

func TestCheckOneEndpointDown(t *testing.T) {
	b := inMemory(t)
	b.e[1].Down()
	out, _, code := b.check(t)
	if code != exitOK {
		t.Errorf("exit %d, want 0 (every group has a working endpoint)", code)
	}
	if !strings.HasPrefix(out, "GROUP") || !strings.Contains(out, "RESOLVE  TCP") {
		t.Errorf("no table header:\n%s", out)
	}
	for _, tc := range []struct{ group, endpoint, want string }{
		{"default", b.e[0].Addr(), "ok"}, {"default", b.e[1].Addr(), "FAILED"},
		{"west", b.e[2].Addr(), "ok"}, {"west", b.e[0].Addr(), "ok"},
	} {
		l := line(out, tc.group, tc.endpoint)
		if f := strings.Fields(l); len(f) != 10 || f[len(f)-1] != tc.want {
			t.Errorf("group %s endpoint %s: line %q, want result %s", tc.group, tc.endpoint, l, tc.want)
		}
	}
	for _, want := range []string{
		b.e[1].Addr() + ": tcp: dial tcp " + b.e[1].Addr() + ": connect: connection refused",
		"default (default) 1 of 2 endpoints working; calls would go to " + b.e[0].Addr(), "west 2 of 2 endpoints working; calls would go to " + b.e[2].Addr(),
		"OK: every group has a working endpoint.",
	} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The same as JSON.
	out, _, code = b.check(t, "--json")
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK {
		t.Fatalf("--json: exit %d, %v", code, err)
	}
	if !rep.OK || len(rep.Groups) != 2 || rep.Groups[0].Name != "default" || !rep.Groups[0].Default || rep.Groups[0].Working != 1 ||
		rep.Groups[0].First != b.e[0].Addr() || rep.Groups[0].FirstMS <= 0 {
		t.Fatalf("report %+v", rep)
	}
	up, down := rep.Groups[0].Endpoints[0], rep.Groups[0].Endpoints[1]
	wantUp := map[string]string{stepResolve: statusSkipped, stepTCP: statusOK, stepTLS: statusSkipped, stepGRPC: statusOK, stepSpanner: statusOK, stepDatabase: statusOK}
	wantDown := map[string]string{stepResolve: statusSkipped, stepTCP: statusFailed, stepTLS: statusSkipped, stepGRPC: statusSkipped, stepSpanner: statusSkipped, stepDatabase: statusSkipped}
	for i, s := range up.Steps {
		if s.Step != steps[i] || s.Status != wantUp[s.Step] || (s.Status == statusOK && s.LatencyMS <= 0) {
			t.Errorf("working endpoint, step %d: %+v", i, s)
		}
	}
	for _, s := range down.Steps {
		if s.Status != wantDown[s.Step] {
			t.Errorf("down endpoint, step %+v; want %s", s, wantDown[s.Step])
		}
	}
	if len(up.Steps) != len(steps) || len(down.Steps) != len(steps) {
		t.Fatalf("steps: %d and %d, want %d each", len(up.Steps), len(down.Steps), len(steps))
	}
	if !up.OK || down.OK || !strings.Contains(down.Steps[1].Error, "refused") || !strings.Contains(up.Steps[4].Detail, "NOT_FOUND") ||
		!strings.Contains(up.Steps[5].Detail, "SELECT 1 answered 1; session deleted") {
		t.Errorf("up %+v\ndown %+v", up, down)
	}
}

func TestCheckDefaultGroupDown(t *testing.T) {
	b := inMemory(t)
	b.e[0].Down()
	b.e[1].Blackhole() // accepts TCP, never answers: the gRPC step runs into the time limit
	out, _, code := b.check(t, "--timeout", "2s")
	if code != exitFailed {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{"default (default) 0 of 2 endpoints working", "west 1 of 2 endpoints working",
		"FAILED: no working endpoint in group default.", b.e[1].Addr() + ": grpc: not ready within the time limit"} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestCheckBadConfigFile(t *testing.T) {
	p := filepath.Join("..", "..", "testdata", "config-invalid.yaml")
	out, errOut, code := cli(t, nil, "check", "--config", p, "--database", "projects/p/instances/i/databases/d")
	if code != exitBadArgs || out != "" {
		t.Errorf("exit %d, stdout %q; want 2 and nothing", code, out)
	}
	if want := p + ":6:5: multiEndpoints.default.recoveryTime: unknown field (did you mean recoveryTimeout?)"; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q", want)
	}
	_, errOut, code = cli(t, nil, "check", "--config", filepath.Join(t.TempDir(), "none.yaml"), "--database", "projects/p/instances/i/databases/d")
	if code != exitBadArgs || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: exit %d, %q", code, errOut)
	}
}

func TestBadFlags(t *testing.T) {
	cfg := writeConfig(t, "default: d\nmultiEndpoints: {d: {endpoints: ['127.0.0.1:1']}}\n")
	db := "projects/p/instances/i/databases/d"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitBadArgs, "Usage:"},
		{[]string{"frobnicate"}, exitBadArgs, `unknown command "frobnicate"`},
		{[]string{"check", "--config", cfg}, exitBadArgs, `--database "" is not projects/P/instances/I/databases/D`},
		{[]string{"check", "--database", db}, exitBadArgs, "--config is required"},
		{[]string{"check", "--config", cfg, "--database", db, "--nope"}, exitBadArgs, "flag provided but not defined: -nope"},
		{[]string{"check", "--config", cfg, "--database", db, "extra"}, exitBadArgs, "unexpected arguments"},
		{[]string{"check", "--config", cfg, "--database", db, "--timeout", "0s"}, exitBadArgs, "--timeout must be positive"},
		{[]string{"query", "--config", cfg, "--database", db}, exitBadArgs, "--sql is required"},
		{[]string{"query", "--config", cfg, "--database", db, "--sql", "SELECT 1", "--group", "west"}, exitBadArgs, `--group "west" is not a group`},
		{[]string{"check", "-h"}, exitOK, "Exit status: 0 when every group"},
		{[]string{"help"}, exitOK, "Usage:"},
	} {
		out, errOut, code := cli(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("spannerme %q: exit %d, output %q; want exit %d and %q", tc.args, code, out+errOut, tc.code, tc.want)
		}
	}
}

func TestQuery(t *testing.T) {
	b := inMemory(t)
	q := func(group string) (string, int) {
		out, _, code := cli(t, nil, "query", "--config", b.config, "--database", b.database, "--plaintext", "--no-auth",
			"--group", group, "--sql", "SELECT Id, Text FROM Greetings ORDER BY Id")
		return out, code
	}
	out, code := q("west")
	if code != exitOK || !strings.Contains(squash(out), "Id Text\n1 hello\n2 NULL\n") {
		t.Errorf("exit %d, want 0 and the row", code)
	}
	if want := fmt.Sprintf("(2 rows; served by endpoint %s of group west", b.e[2].Addr()); !strings.Contains(out, want) {
		t.Errorf("output lacks %q", want)
	}
	// West's first endpoint down: its second serves, the Spanner client's retry of the
	// refused attempt sent there at once (retry elsewhere), whether or not the group has
	// switched yet.
	b.e[2].Down()
	out, code = q("west")
	if want := fmt.Sprintf("served by endpoint %s of group west, whose current endpoint is ", b.e[0].Addr()); code != exitOK || !strings.Contains(out, want) {
		t.Errorf("exit %d; output lacks %q", code, want)
	}
	_, errOut, code := cli(t, nil, "query", "--config", b.config, "--database", b.database, "--plaintext", "--no-auth", "--sql", "SELECT * FROM NoSuchTable")
	if code != exitFailed || !strings.Contains(errOut, "NoSuchTable") {
		t.Errorf("bad query: exit %d, %q", code, errOut)
	}
}

func TestCheckAndQueryEmulator(t *testing.T) {
	emu := spannermetest.StartEmulatorTB(t, greetingsDDL)
	direct, err := emu.NewClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	b := newBackend(t, emu.Addr(), emu.Database(), direct)
	b.e[2].Down()
	out, _, code := b.check(t)
	if code != exitOK || !strings.Contains(squash(out), "west 1 of 2 endpoints working") {
		t.Errorf("check against the emulator: exit %d", code)
	}
	out, _, code = cli(t, nil, "query", "--config", b.config, "--database", b.database, "--plaintext", "--no-auth", "--sql", "SELECT Text FROM Greetings")
	if code != exitOK || !strings.Contains(out, "hello") || !strings.Contains(out, "served by endpoint "+b.e[0].Addr()) {
		t.Errorf("query against the emulator: exit %d", code)
	}
}

// tlsProxy terminates TLS with a certificate for serverName only and forwards the bytes to
// backend in plaintext: a PSC endpoint reached by IP address.
func tlsProxy(t *testing.T, backend string, cert tls.Certificate) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex // guards conns
	conns := map[net.Conn]bool{}
	track := func(c net.Conn) {
		mu.Lock()
		conns[c] = true
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Go(func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				b, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				track(b)
				defer b.Close()
				go func() { _, _ = io.Copy(b, c); b.Close() }()
				_, _ = io.Copy(c, b)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestCheckTLSAuthority: an endpoint dialed by IP address passes the TLS step only with the
// name on its certificate as authority (googleapis/go-sql-spanner#546).
func TestCheckTLSAuthority(t *testing.T) {
	const serverName = "spanner.test.invalid"
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: serverName}, DNSNames: []string{serverName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := spannermetest.NewSpannerTB(t)
	addr := tlsProxy(t, sp.Addr(), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
	env := []string{"SSL_CERT_FILE=" + caFile} // the system roots of the subprocess: the test CA only

	group := fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}}\n", addr)
	withAuthority := writeConfig(t, group+fmt.Sprintf("endpoints: {'%s': {authority: %s}}\n", addr, serverName))
	out, _, code := cli(t, env, "check", "--config", withAuthority, "--database", sp.Database(), "--no-auth")
	if l := strings.Fields(line(out, "d", addr)); code != exitOK || len(l) != 10 || l[5] == "-" || l[5] == "FAILED" {
		t.Errorf("with the authority: exit %d, line %q; want 0 and a TLS latency", code, l)
	}
	out, _, code = cli(t, env, "check", "--config", writeConfig(t, group), "--database", sp.Database(), "--no-auth")
	if code != exitFailed || !strings.Contains(out, "certificate") || !strings.Contains(out, "needs an authority") {
		t.Errorf("without the authority: exit %d; want 1 and a certificate error with the hint", code)
	}
	// The same through the Spanner client: query works with the authority.
	out, _, code = cli(t, env, "query", "--config", withAuthority, "--database", sp.Database(), "--no-auth", "--sql", "SELECT 1 AS One")
	if code != exitOK || !strings.Contains(out, "One\n1\n") {
		t.Errorf("query over TLS with the authority: exit %d", code)
	}
}

// onGCEHelperEnv makes the test binary, run again by TestParseKeepsGCEDetectionForCredentials,
// parse the flags it names and report what the metadata package concludes afterwards.
const onGCEHelperEnv = "SPANNERME_TEST_ONGCE_HELPER"

// Application Default Credentials on Google Compute Engine and GKE come from the metadata
// server, which the credentials look-up asks only where metadata.OnGCE says it runs there.
// Parsing the flags must not settle OnGCE to false unless --no-auth says no credentials are
// needed, or the CLI could never authenticate on GCE. It is checked in a fresh process
// (OnGCE is decided once per process): after parsing, GCE_METADATA_HOST (which OnGCE trusts
// when it decides) must still count.
func TestParseKeepsGCEDetectionForCredentials(t *testing.T) {
	if args := os.Getenv(onGCEHelperEnv); args != "" {
		var c common
		fs := flag.NewFlagSet("check", flag.ContinueOnError)
		c.register(fs, time.Second)
		if _, err := c.parse(context.Background(), fs, strings.Fields(args), io.Discard); err != nil {
			fmt.Println("parse:", err)
			return
		}
		os.Setenv("GCE_METADATA_HOST", "127.0.0.1:1") // never asked: OnGCE trusts the variable
		fmt.Println("OnGCE:", metadata.OnGCE())
		return
	}
	cfg := writeConfig(t, "default: d\nmultiEndpoints: {d: {endpoints: ['127.0.0.1:1']}}\n")
	base := "--config " + cfg + " --database projects/p/instances/i/databases/d"
	for _, tc := range []struct {
		args, want string
	}{
		{base, "OnGCE: true"},                 // credentials: the metadata server may provide them
		{base + " --no-auth", "OnGCE: false"}, // no credentials: no metadata server is asked
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestParseKeepsGCEDetectionForCredentials$")
		cmd.Env = append(os.Environ(), onGCEHelperEnv+"="+tc.args, "GCE_METADATA_HOST=")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("after parsing %q: %v\n%s\nwant %q", tc.args, err, out, tc.want)
		}
	}
}
