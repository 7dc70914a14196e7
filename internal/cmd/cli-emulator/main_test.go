package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// build builds the package at path (relative to the module root) into dir.
func build(t *testing.T, ctx context.Context, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Join("..", "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// make emulator's command, as a user runs it: it prints flags with which spannerme check
// exits 0 and spannerme query reads the seeded rows; on an interrupt it stops the emulator
// (its port refuses connections) and removes the configuration file, exiting 0.
func TestEmulatorForCLI(t *testing.T) {
	emulator.RequireBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	self, cli := build(t, ctx, dir, "./internal/cmd/cli-emulator"), build(t, ctx, dir, "./cmd/spannerme")

	cmd := exec.CommandContext(ctx, self)
	cmd.Dir = filepath.Join("..", "..", "..") // the repository, as make runs it
	cmd.Env = append(os.Environ(), "SPANNER_EMULATOR_HOST=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	var flags []string
	var printed strings.Builder
	for flags == nil && lines.Scan() {
		printed.WriteString(lines.Text() + "\n")
		if f, ok := strings.CutPrefix(lines.Text(), "FLAGS: "); ok {
			flags = strings.Fields(f)
		}
	}
	if flags == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("no FLAGS line; stdout:\n%s\nstderr:\n%s", printed.String(), stderr.String())
	}
	t.Logf("printed:\n%s", printed.String())
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	var config, addr string
	for i, f := range flags {
		if f == "--config" && i+1 < len(flags) {
			config = flags[i+1]
		}
	}
	if s := printed.String(); strings.Contains(s, "Cloud Spanner emulator on ") {
		addr = strings.TrimSuffix(strings.Fields(s[strings.Index(s, "Cloud Spanner emulator on "):])[4], ":")
	}

	if config == "" || addr == "" {
		t.Fatalf("found no configuration file (%q) or emulator address (%q) in what it printed", config, addr)
	}
	for _, args := range [][]string{
		append([]string{"check"}, flags...),
		append(append([]string{"query"}, flags...), "--sql", "SELECT COUNT(*) FROM Accounts"),
	} {
		run := exec.CommandContext(ctx, cli, args...)
		run.Env = append(os.Environ(), "SPANNER_EMULATOR_HOST=")
		out, err := run.CombinedOutput()
		if err != nil {
			t.Errorf("spannerme %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "query" && !strings.Contains(string(out), "(1 rows;") {
			t.Errorf("query output lacks its row:\n%s", out)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after an interrupt: %v, want exit 0; stderr:\n%s", err, stderr.String())
	}
	if _, err := os.Stat(config); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("configuration file %s still there after exit (%v)", config, err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the emulator at %q still accepts connections after exit", addr)
	}
}
