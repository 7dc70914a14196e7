package spannerme

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// watchConfigYAML is a configuration file with one group "g" of the given endpoints.
func watchConfigYAML(extra string, endpoints ...string) string {
	return fmt.Sprintf("default: g\nmultiEndpoints:\n  g:\n    endpoints: [%s]\n%s", strings.Join(endpoints, ", "), extra)
}

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// writeFile writes content to path as editors that save in place do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeByRename writes content to path as editors that save by rename do (vim, most IDEs).
func writeByRename(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp~"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// watchFixture is a GCPMultiEndpoint over three named endpoints, watched from a file that
// first lists the first one.
type watchFixture struct {
	gme  *GCPMultiEndpoint
	w    *ConfigWatcher
	eps  []endpoint
	path string
	log  *syncBuffer
}

func newWatchFixture(t *testing.T, path string) *watchFixture {
	t.Helper()
	return newWatchFixtureOn(t, path, WatchOptions{Debounce: 20 * time.Millisecond, Settle: 50 * time.Millisecond, Resync: -1}, clock.Real)
}

// newWatchFixtureOn is newWatchFixture with opts (its Logger is the fixture's) and the
// watcher's clock clk.
func newWatchFixtureOn(t *testing.T, path string, opts WatchOptions, clk clock.Clock) *watchFixture {
	t.Helper()
	return newWatchFixtureWith(t, path, opts, clk, configfile.ReadFile)
}

// newWatchFixtureWith is newWatchFixtureOn with the watcher's function that reads the file.
func newWatchFixtureWith(t *testing.T, path string, opts WatchOptions, clk clock.Clock, readFn func(string) ([]byte, os.FileInfo, error)) *watchFixture {
	t.Helper()
	f := &watchFixture{path: path, log: &syncBuffer{}}
	for _, name := range []string{"one", "two", "three"} {
		f.eps = append(f.eps, startEndpoint(t, name))
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		writeFile(t, path, watchConfigYAML("", f.eps[0].Addr()))
	}
	fc, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := fc.Settings
	settings.Logger = fastSettings(nil).Logger
	f.gme = newGME(t, fc.Options, settings)
	opts.Logger = slog.New(slog.NewTextHandler(f.log, nil))
	f.w, err = watchConfigWith(f.gme, path, opts, clk, readFn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// waitStatus polls the watcher's status until cond holds, within a deadline.
func (f *watchFixture) waitStatus(t *testing.T, what string, cond func(ConfigStatus) bool) ConfigStatus {
	t.Helper()
	var s ConfigStatus
	eventually(t, 20*time.Second, what, func() bool {
		s = f.w.Status()
		return cond(s)
	})
	return s
}

func (f *watchFixture) waitApplied(t *testing.T, content string) ConfigStatus {
	t.Helper()
	h := hashOf(content)
	return f.waitStatus(t, "the configuration "+h[:8]+" applied", func(s ConfigStatus) bool { return s.Hash == h && s.LastError == nil })
}

// servedBy checks that calls go to the endpoint named want.
func (f *watchFixture) servedBy(t *testing.T, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitServedBy(t, ctx, f.gme, want, 15*time.Second)
}

func TestWatchAppliesFirstAndPublishesStatus(t *testing.T) {
	f := newWatchFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	content, _ := os.ReadFile(f.path)
	s := f.w.Status()
	if s.Path != f.path || s.Hash != hashOf(string(content)) || s.Applied != 1 || s.AppliedAt.IsZero() || s.LastError != nil || len(s.RestartNeeded) != 0 {
		t.Errorf("status after WatchConfig = %+v", s)
	}
	if gs := f.gme.Status().Config; gs == nil || gs.Hash != s.Hash || gs.Applied != 1 {
		t.Errorf("gme.Status().Config = %+v, want the watcher's status", gs)
	}
	f.servedBy(t, "one")
}

// TestWatchRapidEdits: many edits in a row, in place and by rename, end with the last one
// in force.
func TestWatchRapidEdits(t *testing.T) {
	f := newWatchFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	var last string
	for i := range 30 {
		last = watchConfigYAML(fmt.Sprintf("    recoveryTimeout: %dms\n", i), f.eps[i%3].Addr(), f.eps[(i+1)%3].Addr())
		if i%2 == 0 {
			writeFile(t, f.path, last)
		} else {
			writeByRename(t, f.path, last)
		}
	}
	s := f.waitApplied(t, last) // 29: eps[2] first, then eps[0]
	if s.Applied > 31 {
		t.Errorf("%d configurations applied for 30 edits", s.Applied)
	}
	f.servedBy(t, "three")
	if g := groupOf(f.gme, "g"); g.RecoveryTimeout != 29*time.Millisecond || len(g.Endpoints) != 2 {
		t.Errorf("group after the last edit: %+v", g)
	}
	t.Logf("30 edits, %d applied", s.Applied-1)
}

// TestWatchInvalidEditKeepsPrevious: an invalid edit is logged and reported, traffic stays
// on the configuration in force; the next valid edit is applied.
func TestWatchInvalidEditKeepsPrevious(t *testing.T) {
	f := newWatchFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	good := f.w.Status()
	f.servedBy(t, "one")

	bad := watchConfigYAML("    recoveryTime: 2s\n", f.eps[1].Addr())
	writeFile(t, f.path, bad)
	s := f.waitStatus(t, "the invalid edit reported", func(s ConfigStatus) bool { return s.LastError != nil })
	var fe *ConfigFileError
	if !errors.As(s.LastError, &fe) || fe.Line != 5 || fe.Field != "multiEndpoints.g.recoveryTime" || fe.File != f.path {
		t.Errorf("LastError = %v, want a *ConfigFileError at line 5 naming the field and file", s.LastError)
	}
	if s.Hash != good.Hash || s.Applied != good.Applied || s.LastErrorAt.IsZero() {
		t.Errorf("status after an invalid edit = %+v; want the previous configuration in force", s)
	}
	if gs := f.gme.Status().Config; gs == nil || !errors.Is(gs.LastError, ErrInvalidConfig) {
		t.Errorf("gme.Status().Config = %+v, want the edit's error", gs)
	}
	if !strings.Contains(f.log.String(), "configuration edit rejected") {
		t.Errorf("the rejection was not logged:\n%s", f.log.String())
	}
	for range 5 {
		if got, err := call(context.Background(), f.gme); err != nil || got != "one" {
			t.Fatalf("after an invalid edit a call was served by %q, %v; want one", got, err)
		}
	}
	if g := groupOf(f.gme, "g"); len(g.Endpoints) != 1 || g.Endpoints[0].Endpoint != f.eps[0].Addr() {
		t.Errorf("the invalid edit changed the group: %+v", g)
	}

	// So is a configuration that NewGCPMultiEndpoint's validation rejects.
	dup := watchConfigYAML("", f.eps[1].Addr(), f.eps[1].Addr())
	writeFile(t, f.path, dup)
	f.waitStatus(t, "the duplicate endpoint reported", func(s ConfigStatus) bool {
		return s.LastError != nil && strings.Contains(s.LastError.Error(), "duplicate endpoint")
	})

	next := watchConfigYAML("", f.eps[1].Addr())
	writeFile(t, f.path, next)
	s = f.waitApplied(t, next)
	if s.Applied != good.Applied+1 {
		t.Errorf("Applied = %d, want %d", s.Applied, good.Applied+1)
	}
	f.servedBy(t, "two")
}

// TestWatchConfigMapSymlinkSwap: a Kubernetes ConfigMap volume: the file is a symlink
// through "..data", which kubelet replaces atomically by renaming a new symlink over it.
// configMap is a directory that kubelet's AtomicWriter publishes a ConfigMap's file in.
type configMap struct {
	dir string
	ts  int // versions published
}

// publish writes content as the file name of the ConfigMap, as kubelet does: a new
// timestamped directory, a "..data" symlink swapped atomically to it, and name a symlink
// through "..data".
func (m *configMap) publish(t *testing.T, name, content string) {
	t.Helper()
	m.ts++
	dir, version := m.dir, fmt.Sprintf("..2026_01_01_00_00_%02d.%d", m.ts, m.ts)
	if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, version, name), content)
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, name)); errors.Is(err, fs.ErrNotExist) {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatchConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	m := &configMap{dir: dir}
	publish := func(content string) {
		t.Helper()
		m.publish(t, "spannerme.yaml", content)
	}
	// The fixture starts the endpoints, so the first version names a placeholder (a port
	// that refuses); the first real version follows.
	publish(watchConfigYAML("", "127.0.0.1:1"))
	f := newWatchFixture(t, filepath.Join(dir, "spannerme.yaml"))
	first := watchConfigYAML("", f.eps[0].Addr())
	publish(first)
	f.waitApplied(t, first)
	f.servedBy(t, "one")

	second := watchConfigYAML("", f.eps[2].Addr())
	publish(second)
	f.waitApplied(t, second)
	f.servedBy(t, "three")
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // ..data, one version directory, the file's symlink
		t.Errorf("directory after the swap: %v", entries)
	}
}

// TestWatchFileDeletedAndRecreated: while the file is missing the configuration in force
// stays and the read error is reported; a new file is applied.
func TestWatchFileDeletedAndRecreated(t *testing.T) {
	f := newWatchFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	good := f.w.Status()
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	s := f.waitStatus(t, "the missing file reported", func(s ConfigStatus) bool { return s.LastError != nil })
	if !errors.Is(s.LastError, fs.ErrNotExist) || s.Hash != good.Hash {
		t.Errorf("status with the file missing = %+v", s)
	}
	if got, err := call(context.Background(), f.gme); err != nil || got != "one" {
		t.Errorf("with the file missing a call was served by %q, %v; want one", got, err)
	}
	// Recreated with the same content: nothing to apply, the error clears.
	content := watchConfigYAML("", f.eps[0].Addr())
	writeFile(t, f.path, content)
	s = f.waitStatus(t, "the error cleared", func(s ConfigStatus) bool { return s.LastError == nil })
	if s.Applied != good.Applied {
		t.Errorf("the same content was applied again: Applied %d -> %d", good.Applied, s.Applied)
	}
	// Deleted and recreated with new content.
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	next := watchConfigYAML("", f.eps[1].Addr(), f.eps[0].Addr())
	writeFile(t, f.path, next)
	f.waitApplied(t, next)
	f.servedBy(t, "two")
}

func TestWatchRestartNeeded(t *testing.T) {
	f := newWatchFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	next := watchConfigYAML("poolSize: 2\nsessionAffinity: true\nsettings:\n  drainTimeout: 1s\n  keepaliveTime: 120s\n",
		f.eps[1].Addr())
	writeFile(t, f.path, next)
	s := f.waitApplied(t, next)
	want := []string{"settings.drainTimeout", "poolSize", "sessionAffinity"}
	if !slices.Equal(s.RestartNeeded, want) {
		t.Errorf("RestartNeeded = %v, want %v", s.RestartNeeded, want)
	}
	if !strings.Contains(f.log.String(), "take effect only when the GCPMultiEndpoint is created again") {
		t.Errorf("not logged:\n%s", f.log.String())
	}
	f.servedBy(t, "two") // the groups were applied all the same
}

func TestWatchConfigErrors(t *testing.T) {
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "127.0.0.1:1")}), fastSettings(nil))
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "default: g\n")
	if w, err := WatchConfig(gme, bad, WatchOptions{}); !errors.Is(err, ErrInvalidConfig) || w != nil {
		t.Errorf("WatchConfig(invalid file) = %v, %v", w, err)
	}
	if _, err := WatchConfig(gme, filepath.Join(dir, "missing.yaml"), WatchOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WatchConfig(missing file) = %v", err)
	}
	if w, err := WatchConfig(nil, bad, WatchOptions{}); err == nil || w != nil {
		t.Errorf("WatchConfig(nil) = %v, %v", w, err)
	}
	if s := gme.Status().Config; s != nil {
		t.Errorf("a failed WatchConfig published a status: %+v", s)
	}
	// After Close of the GCPMultiEndpoint, an edit fails to apply and is reported.
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, watchConfigYAML("", "127.0.0.1:1"))
	w, err := WatchConfig(gme, good, WatchOptions{Debounce: time.Millisecond, Settle: 10 * time.Millisecond, Resync: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	gme.Close()
	writeFile(t, good, watchConfigYAML("", "127.0.0.1:2"))
	eventually(t, 20*time.Second, "ErrClosed reported", func() bool { return errors.Is(w.Status().LastError, ErrClosed) })
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// WatchConfig's first reading has no configuration in force to keep and no edit to reject:
// a missing file, an invalid one and one that cannot be applied are returned as WatchConfig's
// error, and nothing is logged ("configuration edit rejected; the previous configuration
// stays in force" would be false).
func TestWatchConfigFirstReadingErrorIsReturnedNotLogged(t *testing.T) {
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "127.0.0.1:1")}), fastSettings(nil))
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "default: g\n")
	closed := filepath.Join(dir, "good.yaml")
	writeFile(t, closed, watchConfigYAML("", "127.0.0.1:1"))
	for _, tc := range []struct {
		name, path string
		gme        *GCPMultiEndpoint
		want       error
	}{
		{"missing file", filepath.Join(dir, "missing.yaml"), gme, fs.ErrNotExist},
		{"invalid file", bad, gme, ErrInvalidConfig},
		{"closed GCPMultiEndpoint", closed, &GCPMultiEndpoint{}, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			w, err := WatchConfig(tc.gme, tc.path, WatchOptions{Resync: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if w != nil {
				w.Close()
			}
			if !errors.Is(err, tc.want) || w != nil {
				t.Fatalf("WatchConfig = %v, %v; want nil, an error wrapping %v", w, err, tc.want)
			}
			if logs.String() != "" {
				t.Errorf("the first reading's error was logged as well as returned:\n%s", logs.String())
			}
		})
	}
}

// An edit made while WatchConfig reads and applies the file the first time is applied: the
// directory is watched before the first reading, so no edit falls between the two (with
// Resync off, nothing else would ever find it). The edit is made from inside the first
// reload's dial of a new endpoint's pool.
func TestWatchConfigEditDuringFirstReading(t *testing.T) {
	one, two, three := startEndpoint(t, "one"), startEndpoint(t, "two"), startEndpoint(t, "three")
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	writeFile(t, path, watchConfigYAML("", two.Addr()))
	edited := watchConfigYAML("", three.Addr())
	var editOnce sync.Once
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, one.Addr())})
	o.DialFunc = func(ctx context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		if target == two.Addr() { // the first reading applies the file
			editOnce.Do(func() { writeByRename(t, path, edited) })
		}
		return grpc.NewClient(target, opts...)
	}
	gme := newGME(t, o, fastSettings(nil))
	w, err := WatchConfig(gme, path, WatchOptions{Debounce: 20 * time.Millisecond, Settle: 50 * time.Millisecond, Resync: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	h := hashOf(edited)
	eventually(t, 20*time.Second, "the edit made during the first reading applied", func() bool { return w.Status().Hash == h })
	waitServedBy(t, context.Background(), gme, "three", 15*time.Second)
}

// A bad file that stays bad is logged once, not at every re-read (Resync, or events that do
// not change it); the status keeps the error and when it was last seen. A different error
// is logged again. The edits are saved by rename: with a 1ms debounce a re-read could
// otherwise catch an in-place write half done (an empty file, a third error).
func TestWatchRepeatedErrorLoggedOnce(t *testing.T) {
	one := startEndpoint(t, "one")
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	writeFile(t, path, watchConfigYAML("", one.Addr()))
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, one.Addr())}), fastSettings(nil))
	var logs syncBuffer
	w, err := WatchConfig(gme, path, WatchOptions{Debounce: time.Millisecond, Settle: 10 * time.Millisecond, Resync: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rejected := func() int { return strings.Count(logs.String(), "configuration edit rejected") }
	writeByRename(t, path, watchConfigYAML("    recoveryTime: 2s\n", one.Addr()))
	eventually(t, 20*time.Second, "the bad edit reported", func() bool { return w.Status().LastError != nil })
	for range 3 { // three more re-reads of the same bad file
		seen := w.Status().LastErrorAt
		eventually(t, 20*time.Second, "a re-read", func() bool { return w.Status().LastErrorAt.After(seen) })
	}
	if n := rejected(); n != 1 {
		t.Errorf("the same bad file was logged %d times, want once:\n%s", n, logs.String())
	}
	writeByRename(t, path, watchConfigYAML("    switchingDelay: soon\n", one.Addr()))
	eventually(t, 20*time.Second, "the other error logged", func() bool { return rejected() == 2 })
	if s := w.Status(); !strings.Contains(fmt.Sprint(s.LastError), "soon") {
		t.Errorf("LastError = %v, want the new error", s.LastError)
	}
}

// WatchConfig on a zero-value GCPMultiEndpoint (which is closed) fails with ErrClosed, as
// UpdateMultiEndpoints does, instead of panicking on its nil observer or nil logger.
func TestWatchConfig_ZeroValueGCPMultiEndpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	if err := os.WriteFile(path, []byte("default: g\nmultiEndpoints:\n  g:\n    endpoints: [\"127.0.0.1:1\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := WatchConfig(&GCPMultiEndpoint{}, path, WatchOptions{})
	if w != nil {
		w.Close()
	}
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("WatchConfig on a zero-value GCPMultiEndpoint: %v, want ErrClosed", err)
	}
}
