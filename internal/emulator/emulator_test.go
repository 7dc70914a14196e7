package emulator_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(emulator.StopSharedAfter(m),
		// Started by the init of go.opencensus.io/stats/view, which the
		// Spanner client imports; it lives as long as the process.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// schema returns the testdata schema or fails the test.
func schema(t *testing.T) []string {
	t.Helper()
	ddl, err := fixture.Schema()
	if err != nil {
		t.Fatal(err)
	}
	return ddl
}

// newClient connects a Spanner client to db on emu, closed at cleanup.
func newClient(t *testing.T, emu *emulator.Emulator, db string) *spanner.Client {
	t.Helper()
	c, err := fixture.NewClient(t.Context(), emu.Addr(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestStartSeedQueryTransaction(t *testing.T) {
	start := time.Now()
	emu := emulator.StartTB(t, emulator.Options{DDL: schema(t), DatabaseID: "smoke"})
	t.Logf("emulator at %s ready (instance and database created) in %v", emu.Addr(), time.Since(start))

	if got, want := emu.DatabasePath(), "projects/test-project/instances/test-instance/databases/smoke"; got != want {
		t.Errorf("DatabasePath() = %q, want %q", got, want)
	}
	if host, _, err := net.SplitHostPort(emu.Addr()); err != nil || host != "127.0.0.1" {
		t.Errorf("Addr() = %q, want 127.0.0.1:port", emu.Addr())
	}

	ctx := t.Context()
	client := newClient(t, emu, emu.DatabasePath())
	accounts, err := fixture.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	if err := fixture.Seed(ctx, client); err != nil {
		t.Fatal(err)
	}
	if n, err := fixture.CountRows(ctx, client, fixture.TableAccounts); err != nil || n != int64(len(accounts)) {
		t.Fatalf("CountRows(Accounts) = %d, %v; want %d", n, err, len(accounts))
	}
	total, err := fixture.TotalBalance(ctx, client)
	if err != nil {
		t.Fatal(err)
	}

	from, to := accounts[1].AccountID, accounts[2].AccountID
	if err := fixture.Transfer(ctx, client, "order-1", from, to, 150, "test"); err != nil {
		t.Fatal(err)
	}
	row, err := client.Single().ReadRow(ctx, fixture.TableAccounts, spanner.Key{from}, []string{"Balance"})
	if err != nil {
		t.Fatal(err)
	}
	var bal int64
	if err := row.Column(0, &bal); err != nil || bal != accounts[1].Balance-150 {
		t.Errorf("balance of %s after transfer = %d, %v; want %d", from, bal, err, accounts[1].Balance-150)
	}
	if got, err := fixture.TotalBalance(ctx, client); err != nil || got != total {
		t.Errorf("TotalBalance after transfer = %d, %v; want %d", got, err, total)
	}
	err = fixture.Transfer(ctx, client, "order-2", from, to, 1<<40, "test")
	if !errors.Is(err, fixture.ErrInsufficientFunds) {
		t.Errorf("Transfer of too much = %v, want ErrInsufficientFunds", err)
	}
	err = fixture.Transfer(ctx, client, "order-1", from, to, 1, "test")
	if spanner.ErrCode(err) != codes.AlreadyExists {
		t.Errorf("Transfer with a used order ID = %v, want AlreadyExists", err)
	}
	if n, err := fixture.CountRows(ctx, client, fixture.TableOrders); err != nil || n != 1 {
		t.Errorf("CountRows(Orders) = %d, %v; want 1", n, err)
	}

	// A streaming read over several batches of Events.
	const events, payload = 2500, 700
	if err := fixture.FillEvents(ctx, client, events, payload); err != nil {
		t.Fatal(err)
	}
	if err := fixture.VerifyEvents(ctx, client, events, payload); err != nil {
		t.Error(err)
	}
}

func TestSharedDatabases(t *testing.T) {
	emu := emulator.Shared(t)
	if again := emulator.Shared(t); again != emu {
		t.Fatalf("second Shared() = %p, want the first, %p", again, emu)
	}
	ddl := schema(t)
	viaMutations := emu.NewDatabase(t, ddl)
	viaDML := emu.NewDatabase(t, ddl)
	if viaMutations == viaDML {
		t.Fatalf("NewDatabase returned %q twice", viaDML)
	}
	ctx := t.Context()

	c1 := newClient(t, emu, viaMutations)
	if err := fixture.Seed(ctx, c1); err != nil {
		t.Fatal(err)
	}
	// seed.sql is also valid Spanner DML: it gives the same rows.
	c2 := newClient(t, emu, viaDML)
	stmts, err := fixture.SeedStatements()
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		for _, s := range stmts {
			if _, err := tx.Update(ctx, spanner.Statement{SQL: s}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want, err := fixture.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*spanner.Client{c1, c2} {
		got := readAccounts(t, c)
		if len(got) != len(want) {
			t.Fatalf("read %d accounts, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("account %d = %+v, want %+v", i, got[i], want[i])
			}
		}
	}

	id := viaDML[strings.LastIndex(viaDML, "/")+1:]
	if _, err := emu.CreateDatabase(ctx, id, nil); status.Code(err) != codes.AlreadyExists {
		t.Errorf("CreateDatabase(%q) again = %v, want AlreadyExists", id, err)
	}
	if _, err := emu.CreateDatabase(ctx, "bad-ddl", []string{"CREATE TABLE T (x NOPE) PRIMARY KEY (x)"}); err == nil {
		t.Error("CreateDatabase with bad DDL succeeded")
	}
}

// readAccounts returns all Accounts rows in key order.
func readAccounts(t *testing.T, c *spanner.Client) []fixture.Account {
	t.Helper()
	var out []fixture.Account
	it := c.Single().Read(t.Context(), fixture.TableAccounts, spanner.AllKeys(), []string{"AccountId", "Region", "Balance"})
	err := it.Do(func(r *spanner.Row) error {
		var a fixture.Account
		if err := r.ToStruct(&a); err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCloseIsIdempotentAndStops(t *testing.T) {
	emu := emulator.StartTB(t, emulator.Options{})
	if err := emu.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := emu.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	if conn, err := net.DialTimeout("tcp", emu.Addr(), time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Close", emu.Addr())
	}
	if _, err := emu.CreateDatabase(t.Context(), "late", nil); !errors.Is(err, emulator.ErrNotRunning) {
		t.Errorf("CreateDatabase after Close = %v, want ErrNotRunning", err)
	}
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "emulator_main")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env     string
		want    string
		wantErr bool
	}{
		{env: exe, want: exe},
		{env: filepath.Join(dir, "missing"), wantErr: true},
		{env: plain, wantErr: runtime.GOOS != "windows"},
		{env: dir, wantErr: true},
	} {
		t.Setenv(emulator.EnvBinary, tc.env)
		got, err := emulator.FindBinary()
		if tc.wantErr {
			if !errors.Is(err, emulator.ErrBinaryNotFound) || !strings.Contains(err.Error(), tc.env) {
				t.Errorf("%s=%s: FindBinary() = %q, %v; want ErrBinaryNotFound naming the path", emulator.EnvBinary, tc.env, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s=%s: FindBinary() = %q, %v; want %q", emulator.EnvBinary, tc.env, got, err, tc.want)
		}
	}
}

func TestStartErrors(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("uses shell scripts as fake emulators")
	}
	t.Run("missing binary", func(t *testing.T) {
		_, err := emulator.Start(t.Context(), emulator.Options{Binary: filepath.Join(t.TempDir(), "nope")})
		if !errors.Is(err, emulator.ErrBinaryNotFound) {
			t.Errorf("Start() = %v, want ErrBinaryNotFound", err)
		}
	})
	t.Run("exits at once", func(t *testing.T) {
		bin := script(t, "echo 'boom: unknown flag' >&2\nexit 3\n")
		_, err := emulator.Start(t.Context(), emulator.Options{Binary: bin})
		if err == nil || !strings.Contains(err.Error(), "boom: unknown flag") || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("Start() = %v, want an error with the output and exit status", err)
		}
	})
	t.Run("never serves", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "pids")
		// The script and a child of it; both must be gone when Start returns.
		bin := script(t, "sleep 60 &\necho $$ $! > "+pidFile+"\necho started\nwait\n")
		begin := time.Now()
		_, err := emulator.Start(t.Context(), emulator.Options{Binary: bin, StartupTimeout: 500 * time.Millisecond})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "started") {
			t.Errorf("Start() = %v, want DeadlineExceeded with the output", err)
		}
		if d := time.Since(begin); d > 5*time.Second {
			t.Errorf("Start took %v with a 500ms StartupTimeout", d)
		}
		pids, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range strings.Fields(string(pids)) {
			waitGone(t, pid)
		}
	})
	t.Run("negative timeout", func(t *testing.T) {
		bin := script(t, "exit 0\n")
		if _, err := emulator.Start(t.Context(), emulator.Options{Binary: bin, StartupTimeout: -time.Second}); err == nil {
			t.Error("Start with a negative StartupTimeout succeeded")
		}
	})
}

func TestStartRetriesAfterBindRace(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("uses a shell script in front of the emulator")
	}
	real, err := emulator.FindBinary()
	if err != nil {
		emulator.StartTB(t, emulator.Options{}) // skips, or fails under CI
	}
	// The first launch loses its port as if another process took it; the
	// second runs the real emulator.
	marker := filepath.Join(t.TempDir(), "lost-once")
	bin := script(t, "if [ ! -e "+marker+" ]; then\n  touch "+marker+"\n"+
		"  echo 'E0000 server.cc:318] Failed to bind to address: (Address already in use)' >&2\n  exit 1\nfi\n"+
		"exec '"+real+"' \"$@\"\n")
	emu := emulator.StartTB(t, emulator.Options{Binary: bin})
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the first launch did not run: %v", err)
	}
	if strings.Contains(emu.Output(), "Failed to bind") {
		t.Errorf("output of the running emulator comes from the failed launch:\n%s", emu.Output())
	}
}

// script writes an executable shell script with body and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake_emulator")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitGone fails the test unless process pid has exited (or is a zombie
// waiting for its reaper) within 5s.
func waitGone(t *testing.T, pid string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if exec.Command("kill", "-0", pid).Run() != nil {
			return
		}
		if stat, err := os.ReadFile("/proc/" + pid + "/stat"); err == nil {
			if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("process %s still running", pid)
}

// TestMissingBinary runs this test binary again with the emulator binary
// missing: the test helpers must skip loudly, or fail when CI=true.
func TestMissingBinary(t *testing.T) {
	if os.Getenv("EMULATOR_MISSING_HELPER") == "1" {
		emulator.Shared(t)
		emulator.StartTB(t, emulator.Options{})
		t.Fatal("the helpers did not stop the test")
	}
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{ci: "", want: "SKIPPING: Cloud Spanner emulator not found"},
		{ci: "true", wantFail: true, want: "FAILING (CI=true): Cloud Spanner emulator not found"},
	} {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMissingBinary$", "-test.v")
		cmd.Env = append(os.Environ(), "EMULATOR_MISSING_HELPER=1", "CI="+tc.ci, emulator.EnvBinary+"=/nonexistent/emulator_main")
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail || !strings.Contains(string(out), tc.want) {
			t.Errorf("CI=%q: exit error %v, output:\n%s\nwant failure %v and %q", tc.ci, err, out, tc.wantFail, tc.want)
		}
	}
}
