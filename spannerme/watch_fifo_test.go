package spannerme

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// renameFIFOOver makes a named pipe beside path and renames it over path.
func renameFIFOOver(t *testing.T, path string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("no named pipes in the file system")
	}
	tmp := path + ".fifo~"
	if err := syscall.Mkfifo(tmp, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A named pipe renamed over the watched file is refused at its first read, naming its kind,
// and does not hold the watcher: the re-reads every Resync (1s) refuse it again at once, and
// a valid file renamed over it 10s later is applied one settle interval after the read that
// first sees it; Close returns at once. The watcher's timers run on a fake clock, so the
// issue's 10s cost no real time; the file system is real.
func TestWatchRefusesAFIFOAndAppliesTheFileRenamedOverIt(t *testing.T) {
	clk := clock.NewFake(time.Time{})
	f := newWatchFixtureOn(t, filepath.Join(t.TempDir(), "spannerme.yaml"),
		WatchOptions{Debounce: settleDebounce, Settle: settleInterval, Resync: time.Second}, clk)
	initial := f.w.Status()

	renameFIFOOver(t, f.path)
	waitPending(t, clk, 2) // the Resync timer and the debounce of the rename
	start := time.Now()
	clk.Advance(settleDebounce)
	s := f.w.Status()
	var fe *ConfigFileError
	if !errors.As(s.LastError, &fe) || !strings.Contains(fe.Problem, "not a regular file but a named pipe (FIFO)") || fe.File != f.path {
		t.Fatalf("status %+v after the FIFO's first read; want a *ConfigFileError naming the FIFO", s)
	}
	took := time.Since(start)
	t.Logf("the FIFO refused %v after its debounce fired: %v", took, s.LastError)
	if took > 2*time.Second {
		t.Errorf("refusing the FIFO took %v, want at most 2s", took)
	}
	if s.Hash != initial.Hash || s.Pending != nil {
		t.Errorf("status %+v; want the first configuration in force and no edit waiting", s)
	}
	if n := strings.Count(f.log.String(), "named pipe"); n != 1 {
		t.Errorf("the FIFO was logged %d times, want once:\n%s", n, f.log.String())
	}

	// 10s of Resync reads, each refusing the FIFO at once (a read that blocked would hold
	// Advance here for good).
	firstAt := s.LastErrorAt
	for range 10 {
		start := time.Now()
		clk.Advance(time.Second)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("a Resync read of the FIFO took %v", took)
		}
	}
	if s := f.w.Status(); !s.LastErrorAt.After(firstAt) || !errors.As(s.LastError, &fe) {
		t.Fatalf("status %+v; want the FIFO refused again by the Resync reads", s)
	}

	next := watchConfigYAML("", f.eps[1].Addr())
	writeByRename(t, f.path, next)
	eventually(t, 20*time.Second, "the rename's debounce timer", func() bool {
		due, ok := clk.NextDue()
		return ok && due.Before(clk.Now().Add(settleDebounce+time.Millisecond))
	})
	clk.Advance(settleDebounce)
	seen := clk.Now()
	if s := f.w.Status(); s.Hash == hashOf(next) || s.Pending == nil || s.Pending.Hash != hashOf(next) {
		t.Fatalf("status %+v at the first read of the valid file; want it waiting to settle", s)
	}
	clk.Advance(settleInterval)
	s = f.w.Status()
	if s.Hash != hashOf(next) || s.LastError != nil || !s.AppliedAt.Equal(seen.Add(settleInterval)) || s.Pending != nil {
		t.Fatalf("status %+v; want the valid file applied at %v, one settle interval after its first read", s, seen.Add(settleInterval))
	}
	f.servedBy(t, "two")
	t.Logf("the valid file applied at %v (fake clock), its first read at %v", s.AppliedAt.Format("15:04:05.000"), seen.Format("15:04:05.000"))

	start = time.Now()
	if err := f.w.Close(); err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	t.Logf("Close took %v", took)
	if took > time.Second {
		t.Errorf("Close took %v, want at most 1s", took)
	}
}

// blockingRead is a watcher's read function whose reads wait for release while blocked
// is set: a file system that does not answer.
type blockingRead struct {
	blocked atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newBlockingRead() *blockingRead {
	return &blockingRead{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blockingRead) read(path string) ([]byte, os.FileInfo, error) {
	if b.blocked.Load() {
		b.entered <- struct{}{}
		<-b.release
	}
	return configfile.ReadFile(path)
}

func (b *blockingRead) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-b.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no read started within 20s")
	}
}

// A read that does not return fails after ReadTimeout with an error that says so; while it
// is stuck every read fails at once (one goroutine waits on the file system, not one per
// read); once it returns, the file is read again and applied.
func TestWatchReadTimeout(t *testing.T) {
	b := newBlockingRead()
	f := newWatchFixtureWith(t, filepath.Join(t.TempDir(), "spannerme.yaml"),
		WatchOptions{Debounce: 20 * time.Millisecond, Settle: 50 * time.Millisecond, Resync: -1, ReadTimeout: 200 * time.Millisecond},
		clock.Real, b.read)
	released := false
	defer func() {
		if !released {
			close(b.release)
		}
	}()
	b.blocked.Store(true)
	writeByRename(t, f.path, watchConfigYAML("", f.eps[2].Addr()))
	b.waitEntered(t)
	f.waitStatus(t, "the stuck read's timeout", func(s ConfigStatus) bool {
		return s.LastError != nil && strings.Contains(s.LastError.Error(), "reading the file took longer than 200ms (WatchOptions.ReadTimeout)")
	})
	next := watchConfigYAML("", f.eps[1].Addr())
	writeByRename(t, f.path, next)
	f.waitStatus(t, "the next read refused at once", func(s ConfigStatus) bool {
		return s.LastError != nil && strings.Contains(s.LastError.Error(), "an earlier read of the file has not returned yet")
	})
	if len(b.entered) != 0 {
		t.Errorf("%d more reads started while one was stuck", len(b.entered))
	}
	b.blocked.Store(false)
	close(b.release)
	released = true
	f.waitApplied(t, next)
	f.servedBy(t, "two")
}

// Close returns within 1s while a read is stuck, and nothing is applied after it.
func TestWatchCloseDoesNotWaitForAStuckRead(t *testing.T) {
	b := newBlockingRead()
	f := newWatchFixtureWith(t, filepath.Join(t.TempDir(), "spannerme.yaml"),
		WatchOptions{Debounce: 20 * time.Millisecond, Settle: 50 * time.Millisecond, Resync: -1, ReadTimeout: time.Hour},
		clock.Real, b.read)
	before := f.w.Status()
	b.blocked.Store(true)
	writeByRename(t, f.path, watchConfigYAML("", f.eps[1].Addr()))
	b.waitEntered(t)
	start := time.Now()
	if err := f.w.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("Close took %v with a read stuck", took)
	if took > time.Second {
		t.Errorf("Close took %v with a read stuck, want at most 1s", took)
	}
	close(b.release)
	// The stuck read returns into a closed watcher: it schedules nothing, applies nothing.
	eventually(t, 20*time.Second, "the stuck read to return", func() bool { return !f.w.reader.Reading() })
	if s := f.w.Status(); s.Hash != before.Hash || s.Applied != before.Applied || s.Pending != nil {
		t.Errorf("status %+v after Close; want it unchanged", s)
	}
}
