package emulator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
)

// StartTB starts a private emulator for one test (or benchmark) and closes it
// in tb.Cleanup. When the binary is not found it skips the test with a loud
// message, or fails it when the environment variable CI is true; any other
// start error fails the test. Startup is bounded by opts.StartupTimeout and
// by tb.Context.
func StartTB(tb testing.TB, opts Options) *Emulator {
	tb.Helper()
	e, err := Start(tb.Context(), opts)
	if err != nil {
		failStart(tb, err)
	}
	tb.Cleanup(func() {
		if err := e.Close(); err != nil {
			tb.Errorf("closing %s: %v", e.addr, err)
		}
	})
	return e
}

// NewDatabase creates a fresh database ("db-1", "db-2", ... per emulator) with
// the schema ddl, for one test, and returns its path. It fails the test on
// error. The database lives until the emulator is closed.
func (e *Emulator) NewDatabase(tb testing.TB, ddl []string) string {
	tb.Helper()
	id := fmt.Sprintf("db-%d", e.dbSeq.Add(1))
	path, err := e.CreateDatabase(tb.Context(), id, ddl)
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// sharedRun is one start of the shared emulator; done is closed once emu and
// err are set.
type sharedRun struct {
	done chan struct{}
	emu  *Emulator
	err  error
}

// shared is the state of Shared and StopShared.
var shared struct {
	mu  sync.Mutex // guards run; never held while starting or stopping
	run *sharedRun // nil until the first Shared, and after StopShared
}

// Shared returns the test binary's shared emulator, starting it on the first
// call (with the zero [Options]: a database [DefaultDatabaseID] without
// tables); tests get their own databases with [Emulator.NewDatabase] or
// [Emulator.CreateDatabase]. A failed start is not retried: every later call
// reports the same error. Missing binary: skip, or fail under CI=true, as in
// [StartTB].
//
// Tests must not Close the shared emulator; TestMain stops it with
// [StopShared] or [StopSharedAfter]. Safe for concurrent use.
func Shared(tb testing.TB) *Emulator {
	tb.Helper()
	shared.mu.Lock()
	run := shared.run
	first := run == nil
	if first {
		run = &sharedRun{done: make(chan struct{})}
		shared.run = run
	}
	shared.mu.Unlock()

	if first {
		// Not tb.Context: the emulator outlives the test that started it.
		run.emu, run.err = Start(context.Background(), Options{})
		close(run.done)
	} else {
		<-run.done
	}
	if run.err != nil {
		failStart(tb, run.err)
	}
	return run.emu
}

// StopShared closes the shared emulator, if [Shared] started one, and waits
// for it to exit; the next Shared starts a new one. It returns Close's error.
// Call it from TestMain after m.Run, or use [StopSharedAfter].
func StopShared() error {
	shared.mu.Lock()
	run := shared.run
	shared.run = nil
	shared.mu.Unlock()
	if run == nil {
		return nil
	}
	<-run.done
	if run.emu == nil {
		return nil
	}
	return run.emu.Close()
}

// TestingM is what [StopSharedAfter] needs of *testing.M; goleak.TestingM is
// the same interface.
type TestingM interface{ Run() int }

type stopSharedAfter struct{ m TestingM }

func (s stopSharedAfter) Run() int {
	code := s.m.Run()
	if err := StopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "emulator: stopping the shared emulator: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// StopSharedAfter returns m with a Run that calls [StopShared] after m.Run,
// so that goleak.VerifyTestMain(emulator.StopSharedAfter(m)) checks for
// leaks after the emulator is gone. An error from StopShared is printed and
// turns a passing exit code into 1.
func StopSharedAfter(m TestingM) TestingM { return stopSharedAfter{m} }

// skipNotice makes sure the missing-binary notice reaches stderr once per
// test binary even without -v, where skip messages are not shown.
var skipNotice sync.Once

// failStart ends the test after a failed start: Skip when the binary is
// missing (Fatal instead under CI=true), Fatal otherwise.
func failStart(tb testing.TB, err error) {
	tb.Helper()
	if !errors.Is(err, ErrBinaryNotFound) {
		tb.Fatal(err)
	}
	const how = "Cloud Spanner emulator not found: set " + EnvBinary +
		" to the path of emulator_main, or install it with `gcloud components install cloud-spanner-emulator`"
	if inCI() {
		tb.Fatalf("FAILING (CI=%s): %s: %v", os.Getenv("CI"), how, err)
	}
	msg := fmt.Sprintf("SKIPPING: %s: %v", how, err)
	skipNotice.Do(func() { fmt.Fprintln(os.Stderr, "emulator: "+msg) })
	tb.Skip(msg)
}

// inCI reports whether the environment variable CI holds a true value
// ("true", "1", ... as strconv.ParseBool reads it).
func inCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// RequireBinary returns the emulator binary's path ([FindBinary]) for a test that starts
// the emulator another way (a command under test): when it is missing, the test is skipped
// with a loud message, or fails under CI=true, as [StartTB] does.
func RequireBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := FindBinary()
	if err != nil {
		failStart(tb, err)
	}
	return bin
}
