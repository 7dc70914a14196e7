package spannerme

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// The settle rule of WatchConfig, on a fake clock: the file system events are real (they
// arrive on the watcher's goroutine and start its debounce timer), every timer is the fake
// clock's, and each read runs inside the test's Advance.

const (
	settleDebounce = 20 * time.Millisecond
	settleInterval = time.Second
)

func newSettleFixture(t *testing.T, path string) (*watchFixture, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Time{})
	f := newWatchFixtureOn(t, path, WatchOptions{Debounce: settleDebounce, Settle: settleInterval, Resync: -1}, clk)
	return f, clk
}

// waitPending waits, within a deadline, until clk has n timers pending: the watcher's
// goroutine has seen the file system events of a write and started its debounce timer.
func waitPending(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	eventually(t, 20*time.Second, "timers pending", func() bool { return clk.Pending() == n })
}

// A writer that writes the file in place and pauses 400 ms mid-file: the first half, a
// valid configuration that routes to another port, is read but never applied; the whole
// file is, once two reads a settle interval apart find it the same.
func TestWatchNeverAppliesAHalfWrittenFile(t *testing.T) {
	f, clk := newSettleFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	initial := f.w.Status()
	full := "default: g\nmultiEndpoints:\n  g:\n    endpoints:\n      - " + f.eps[1].Addr() + "\n    recoveryTimeout: 2s\n"
	addr := f.eps[1].Addr()
	half := full[:strings.Index(full, addr)+strings.LastIndex(addr, ":")+2] // the port cut after its first digit
	if _, err := ParseConfig([]byte(half)); err != nil {
		t.Fatalf("the half-written file is not a valid configuration, so the test proves nothing: %v", err)
	}
	notApplied := func(when string) {
		t.Helper()
		if s := f.w.Status(); s.Hash != initial.Hash || s.Applied != initial.Applied || s.LastError != nil {
			t.Fatalf("%s: status %+v; want the first configuration in force and no error", when, s)
		}
	}

	writeFile(t, f.path, half)
	waitPending(t, clk, 1)
	clk.Advance(settleDebounce) // read: the half is the candidate
	notApplied("after the first read")
	clk.Advance(400 * time.Millisecond) // the writer pauses
	notApplied("during the pause")

	fh, err := os.OpenFile(f.path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteString(full[len(half):]); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	waitPending(t, clk, 2) // the settle timer of the half, and the debounce of the rest
	clk.Advance(settleDebounce)
	notApplied("after reading the whole file once")

	clk.Advance(settleInterval)
	s := f.w.Status()
	if s.Hash != hashOf(full) || s.Applied != initial.Applied+1 {
		t.Fatalf("status %+v; want the whole file applied, and nothing else", s)
	}
	f.servedBy(t, "two")
}

// A file replaced atomically, by rename or by a ConfigMap's symlink swap, is applied one
// settle interval after the read that first sees it.
func TestWatchAppliesAnAtomicReplaceWithinOneSettleInterval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (path string, write func(content string))
	}{
		{"rename", func(t *testing.T) (string, func(string)) {
			path := filepath.Join(t.TempDir(), "spannerme.yaml")
			return path, func(content string) { writeByRename(t, path, content) }
		}},
		{"ConfigMap symlink swap", func(t *testing.T) (string, func(string)) {
			m := &configMap{dir: t.TempDir()}
			m.publish(t, "spannerme.yaml", watchConfigYAML("", "127.0.0.1:1"))
			return filepath.Join(m.dir, "spannerme.yaml"), func(content string) { m.publish(t, "spannerme.yaml", content) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, write := tc.setup(t)
			f, clk := newSettleFixture(t, path)
			next := watchConfigYAML("", f.eps[2].Addr())
			write(next)
			waitPending(t, clk, 1)
			clk.Advance(settleDebounce)
			if s := f.w.Status(); s.Hash == hashOf(next) {
				t.Fatal("applied on its first read, before the settle interval")
			}
			clk.Advance(settleInterval)
			if s := f.w.Status(); s.Hash != hashOf(next) || s.LastError != nil {
				t.Fatalf("status %+v one settle interval after the first read; want the new file applied", s)
			}
			f.servedBy(t, "three")
		})
	}
}

// A refused file (here one whose YAML aliases expand past the limit) keeps the previous
// configuration; read again unchanged, it is refused at once, without being parsed or
// settled again, and not logged again.
func TestWatchRefusesTheSameFileWithoutParsingItAgain(t *testing.T) {
	f, clk := newSettleFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	initial := f.w.Status()
	bomb := aliasGroupsYAML(40 << 10)
	writeFile(t, f.path, bomb)
	waitPending(t, clk, 1)
	clk.Advance(settleDebounce)
	clk.Advance(settleInterval)
	s := f.w.Status()
	var fe *ConfigFileError
	if !errors.As(s.LastError, &fe) || !strings.Contains(fe.Problem, "aliases expanded") || s.Hash != initial.Hash {
		t.Fatalf("status %+v; want the alias expansion refused and the first configuration in force", s)
	}
	refusedAt := s.LastErrorAt

	// The same content again (a new modification time): refused at its first read.
	writeFile(t, f.path, bomb)
	waitPending(t, clk, 1)
	clk.Advance(settleDebounce)
	s = f.w.Status()
	// Settling would make it a candidate, with no error yet: the error seen again now is
	// the refusal without a parse.
	if !s.LastErrorAt.After(refusedAt) || !errors.As(s.LastError, &fe) || s.Hash != initial.Hash {
		t.Fatalf("status %+v; want the same error, seen again at its first read", s)
	}
	if n := strings.Count(f.log.String(), "configuration edit rejected"); n != 1 {
		t.Errorf("the refused file was logged %d times, want once:\n%s", n, f.log.String())
	}
	f.servedBy(t, "one")

	// After a good file, the refused content is refused again, at its first read, with its
	// error back in the status.
	good := watchConfigYAML("", f.eps[1].Addr())
	writeFile(t, f.path, good)
	waitPending(t, clk, 1)
	clk.Advance(settleDebounce)
	clk.Advance(settleInterval)
	if s := f.w.Status(); s.Hash != hashOf(good) || s.LastError != nil {
		t.Fatalf("status %+v; want the good file applied", s)
	}
	writeFile(t, f.path, bomb)
	waitPending(t, clk, 1)
	clk.Advance(settleDebounce)
	if s := f.w.Status(); !errors.As(s.LastError, &fe) || !strings.Contains(fe.Problem, "aliases expanded") || s.Hash != hashOf(good) {
		t.Fatalf("status %+v; want the refused content's error again and the good file in force", s)
	}
}
