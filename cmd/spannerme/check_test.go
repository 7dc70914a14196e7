package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
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

// The database step proves the database on the real emulator: check exits 0 for the
// database that exists and 1 for one that does not, whether its instance exists or not,
// although the GetSession of the spanner step is answered (NOT_FOUND for the session) in
// every case. --json carries the step.
func TestCheckDatabaseStepEmulator(t *testing.T) {
	emu := spannermetest.StartEmulatorTB(t, greetingsDDL)
	e := spannermetest.NewEndpointTB(t, emu.Addr())
	cfg := writeConfig(t, fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}}\n", e.Addr()))
	checkJSON := func(database string) (report, int) {
		t.Helper()
		out, _, code := cli(t, nil, "check", "--config", cfg, "--database", database, "--plaintext", "--no-auth", "--json")
		var rep report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("--json: %v", err)
		}
		if len(rep.Groups) != 1 || len(rep.Groups[0].Endpoints) != 1 || len(rep.Groups[0].Endpoints[0].Steps) != len(steps) {
			t.Fatalf("report %+v; want one group of one endpoint with %d steps", rep, len(steps))
		}
		return rep, code
	}
	step := func(rep report, name string) stepResult {
		for _, s := range rep.Groups[0].Endpoints[0].Steps {
			if s.Step == name {
				return s
			}
		}
		t.Fatalf("no step %q in %+v", name, rep.Groups[0].Endpoints[0].Steps)
		return stepResult{}
	}

	rep, code := checkJSON(emu.Database())
	if db := step(rep, stepDatabase); code != exitOK || !rep.OK || db.Status != statusOK || db.LatencyMS <= 0 ||
		!strings.Contains(db.Detail, "SELECT 1 answered 1; session deleted") {
		t.Errorf("existing database: exit %d, ok %v, database step %+v; want 0, true and SELECT 1 answered", code, rep.OK, db)
	}
	for _, missing := range []string{
		"projects/nope/instances/nope/databases/nope",
		"projects/test-project/instances/test-instance/databases/nope",
	} {
		rep, code := checkJSON(missing)
		sp, db := step(rep, stepSpanner), step(rep, stepDatabase)
		if code != exitFailed || rep.OK || sp.Status != statusOK || db.Status != statusFailed ||
			!strings.Contains(db.Error, "the database does not exist: CreateSession: NotFound") {
			t.Errorf("%s: exit %d, ok %v, spanner step %+v, database step %+v; want 1, false, the spanner step ok and the database step failed with NotFound",
				missing, code, rep.OK, sp, db)
		}
	}
	// The table says it too.
	out, _, code := cli(t, nil, "check", "--config", cfg, "--database", "projects/nope/instances/nope/databases/nope", "--plaintext", "--no-auth")
	if want := e.Addr() + ": database: the database does not exist"; code != exitFailed || !strings.Contains(out, want) || !strings.Contains(out, "FAILED: no working endpoint in group d.") {
		t.Errorf("table: exit %d; want 1 and %q", code, want)
	}
}

// A configuration path that is a named pipe with no writer: check refuses it at once, naming
// its kind, with exit status 2, well within its --timeout (opening a FIFO used to wait for a
// writer for good).
func TestCheckRefusesAFIFO(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no named pipes in the file system")
	}
	fifo := filepath.Join(t.TempDir(), "spannerme.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	binary(t) // built before the clock starts
	start := time.Now()
	out, errOut, code := cli(t, nil, "check", "--config", fifo, "--database", "projects/p/instances/i/databases/d", "--timeout", "2s")
	took := time.Since(start)
	t.Logf("check of a FIFO: exit %d after %v", code, took)
	if code != exitBadArgs || out != "" || !strings.Contains(errOut, fifo+": not a regular file but a named pipe (FIFO)") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and the FIFO named", code, out, errOut)
	}
	if took > 2*time.Second {
		t.Errorf("check took %v, want less than its --timeout 2s", took)
	}
}
