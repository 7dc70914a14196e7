package browser

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// CHROMIUM_BIN wins when set: an executable there is found, a missing one is an error
// wrapping ErrNotFound that names it.
func TestFindHonoursEnv(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "my-chromium")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinary, fake)
	if p, err := Find(); err != nil || p != fake {
		t.Errorf("Find() = %q, %v; want %s", p, err, fake)
	}
	t.Setenv(EnvBinary, "/nonexistent/chromium")
	if _, err := Find(); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "/nonexistent/chromium") {
		t.Errorf("Find() with a missing CHROMIUM_BIN: %v; want ErrNotFound naming it", err)
	}
}

// Unset, it searches PATH for Names.
func TestFindSearchesPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "chromium-browser"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvBinary, "")
	t.Setenv("PATH", dir)
	if p, err := Find(); err != nil || p != filepath.Join(dir, "chromium-browser") {
		t.Errorf("Find() = %q, %v; want chromium-browser in %s", p, err, dir)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := Find(); !errors.Is(err, ErrNotFound) {
		t.Errorf("Find() on an empty PATH: %v; want ErrNotFound", err)
	}
}
