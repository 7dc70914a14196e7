package configfile

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mkfifo makes a named pipe at path, or skips the test where the system has none.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("no named pipes in the file system")
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
}

// A named pipe without a writer is refused at once, naming its kind, and so are a
// directory and a symlink to a named pipe; a regular file and a symlink to one are read.
func TestReadFileRefusesAnythingButARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "regular.yaml")
	if err := os.WriteFile(regular, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	regularLink := filepath.Join(dir, "regular-link.yaml")
	if err := os.Symlink(regular, regularLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{
		{fifo, "a named pipe (FIFO)"},
		{link, "a named pipe (FIFO)"},
		{dir, "a directory"},
		{"/dev/null", "a character device"},
	} {
		done := make(chan error, 1)
		go func() { _, _, err := ReadFile(tc.path); done <- err }()
		select {
		case err := <-done:
			var fe *Error
			if !errors.As(err, &fe) || !strings.Contains(fe.Problem, "not a regular file but "+tc.kind) {
				t.Errorf("ReadFile(%s) = %v; want an *Error naming %s", tc.path, err, tc.kind)
			}
		case <-time.After(10 * time.Second):
			// The goroutine is left blocked: the test has failed anyway.
			t.Fatalf("ReadFile(%s) still blocked after 10s", tc.path)
		}
	}
	for _, p := range []string{regular, regularLink} {
		data, fi, err := ReadFile(p)
		if err != nil || string(data) != "a: 1\n" || fi.Size() != 5 {
			t.Errorf("ReadFile(%s) = %q, %v, %v", p, data, fi, err)
		}
	}
	if _, _, err := ReadFile(filepath.Join(dir, "none.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestReadFileRefusesALargerFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(p, make([]byte, MaxSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	var fe *Error
	if _, _, err := ReadFile(p); !errors.As(err, &fe) || !strings.Contains(fe.Problem, "larger than 1048576 bytes") {
		t.Errorf("ReadFile of %d bytes: %v", MaxSize+1, err)
	}
}

// ReadFileContext returns when its context ends, with an error wrapping the context's.
func TestReadFileContextEndsWithItsContext(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, _, err := ReadFileContext(context.Background(), p); err != nil || string(data) != "a: 1\n" {
		t.Errorf("ReadFileContext = %q, %v", data, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := ReadFileContext(ctx, p); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadFileContext with an ended context: %v, want context.Canceled", err)
	}
}
