package spannerme

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// WatchOptions tunes WatchConfig. The zero value is ready to use.
type WatchOptions struct {
	// Debounce is how long the file's directory must stay quiet after a change before the
	// file is read: an editor's or kubelet's several steps become one reload. Zero or
	// negative means 200ms.
	Debounce time.Duration
	// Resync is the interval of a re-read that does not wait for a file system event, which
	// catches changes the events missed (a symlink into another directory, an event queue
	// overflow). Zero means one minute; negative means never.
	Resync time.Duration
	// Settle is how long a changed file must stay the same before it is applied: a reload
	// applies content only when two reads Settle apart found the same size, modification
	// time and SHA-256, so that a file written in place is not applied half-written while
	// its writer pauses for less than Settle. A file replaced atomically (renamed over the
	// old one, or a Kubernetes ConfigMap's symlink swap) is applied Settle after the read
	// that first sees it. Zero or negative means 1s.
	Settle time.Duration
	// ReadTimeout bounds each read of the file: a read that has not finished by then (a
	// network or FUSE file system that does not answer) fails the reload with an error in
	// ConfigStatus.LastError, and until it finishes every later read fails at once, so that
	// at most one goroutine waits on the file system. Zero or negative means 10s.
	ReadTimeout time.Duration
	// Logger receives applied configurations (Info), rejected edits (Error), changes that
	// need a restart and edits that wait to settle for more than 5 Settle intervals (Warn).
	// Nil means the GCPMultiEndpoint's Settings.Logger.
	Logger *slog.Logger
}

// pendingWarnAfter is how many Settle intervals an edit may wait to settle before the
// watcher logs a warning (once per edit).
const pendingWarnAfter = 5

// ConfigWatcher applies a configuration file to a GCPMultiEndpoint each time the file
// changes (WatchConfig). Its methods are safe for concurrent use.
type ConfigWatcher struct {
	gme      *GCPMultiEndpoint
	path     string
	base     string // the file's name in its directory
	opts     WatchOptions
	log      *slog.Logger
	clk      clock.Clock
	fw       *fsnotify.Watcher
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	timerMu                  sync.Mutex // guards closed and the timers
	closed                   bool
	debounce, resync, settle clock.Timer
	reads                    sync.WaitGroup // reads in progress (read)

	// reader reads the file (configfile.ReadFile, or a test's) in a goroutine of its own, at
	// most one at a time, each bounded by ReadTimeout (readFile).
	reader configfile.Reader

	readMu sync.Mutex // one read at a time; guards candidate and refused
	// candidate is the changed content last read, not applied yet: it is applied once a
	// read Settle later finds it the same.
	candidate *configfile.Snapshot
	// refused is the SHA-256 of the last content refused by the parser, and refusedErr its
	// error: the same content read again is refused without being parsed again.
	refused    string
	refusedErr error
	// warned is set once the edit waiting to settle (status.Pending) has been logged.
	warned bool

	mu     sync.Mutex // guards status
	status ConfigStatus
}

// maxStatusError bounds the text of ConfigStatus.LastError (and of the log line), in bytes.
const maxStatusError = 1024

// WatchConfig reads the configuration file at path (LoadConfig), applies it to gme, and
// then applies it again each time it changes, until the ConfigWatcher's Close (gme.Close does
// not stop it: close the watcher first; its reloads after gme.Close fail with ErrClosed and
// change nothing). It runs one goroutine and one fsnotify watch, and its reads run on its
// timers' goroutines, one at a time. It watches the file's directory,
// so it sees editors that write a new file and rename it over the old one, a file deleted and
// created again, and Kubernetes ConfigMap volumes, where the file is a symlink through
// "..data", a symlink kubelet swaps atomically. Changes within WatchOptions.Debounce of each
// other make one reload, and a reload of content equal to the configuration in force does
// nothing. A changed file is applied only once it has stopped changing: two reads
// WatchOptions.Settle apart must find the same size, modification time and SHA-256
// (docs/configuration.md says how to write the file safely); meanwhile ConfigStatus.Pending
// shows the edit waiting, and one warning is logged when it has waited more than 5 Settle
// intervals (a file replaced more often than Settle is never applied). Content equal to the
// last content the parser refused is refused again without being parsed. Only a regular file
// (or a symlink to one) is read, opened without blocking: a named pipe, a directory, a device
// or a socket at the path is refused, naming its kind, and each read is bounded by
// WatchOptions.ReadTimeout.
//
// Each reload applies the groups, endpoints, durations and Default as UpdateMultiEndpoints
// does, with the file's EndpointOptions for pools it dials, and replaces the directed read
// policies, the hedging and the tiers (Settings.DirectedReads, Settings.Hedging,
// Settings.Tiers: the groups whose endpoints are a nested list) with the file's, for the
// calls that start after it. The
// file states the whole configuration, so a reload sets every group's RecoveryTimeout and
// SwitchingDelay as the file writes them, a duration absent meaning zero (its default), where
// UpdateMultiEndpoints keeps a kept group's value for a zero; values set by SetGroupTimeouts
// hold until the next reload that applies a changed file. What a running
// GCPMultiEndpoint cannot change (settings, pool size, session affinity, the options of an
// endpoint already dialed) is logged and listed in ConfigStatus.RestartNeeded. An edit that
// cannot be read, parsed, validated or applied changes nothing: the last good configuration
// stays in force, the error is logged and kept in ConfigStatus.LastError, and the next edit
// is tried as usual.
//
// The status is in ConfigWatcher.Status and in gme.Status().Config. Use one ConfigWatcher
// per GCPMultiEndpoint. Errors: a nil gme; those of LoadConfig and UpdateMultiEndpoints for
// the first reading; fsnotify's when the directory cannot be watched. Nothing runs then, and
// nothing is logged (the first reading's error is not a rejected edit: no configuration was
// in force).
func WatchConfig(gme *GCPMultiEndpoint, path string, opts WatchOptions) (*ConfigWatcher, error) {
	return watchConfig(gme, path, opts, clock.Real)
}

// watchConfig is WatchConfig with the clock of its timers and of the settle rule.
func watchConfig(gme *GCPMultiEndpoint, path string, opts WatchOptions, clk clock.Clock) (*ConfigWatcher, error) {
	return watchConfigWith(gme, path, opts, clk, configfile.ReadFile)
}

// watchConfigWith is watchConfig with the function that reads the file.
func watchConfigWith(gme *GCPMultiEndpoint, path string, opts WatchOptions, clk clock.Clock,
	readFn func(string) ([]byte, os.FileInfo, error)) (*ConfigWatcher, error) {
	if gme == nil {
		return nil, errors.New("spannerme: WatchConfig: nil GCPMultiEndpoint")
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 200 * time.Millisecond
	}
	if opts.Resync == 0 {
		opts.Resync = time.Minute
	}
	if opts.Settle <= 0 {
		opts.Settle = time.Second
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = configfile.ReadTimeout
	}
	w := &ConfigWatcher{gme: gme, path: path, base: filepath.Base(path), opts: opts, log: opts.Logger, clk: clk,
		stop: make(chan struct{}), done: make(chan struct{}),
		reader: configfile.Reader{Path: path, Read: readFn, Timeout: opts.ReadTimeout, Clock: clk}}
	if w.log == nil {
		w.log = gme.logger() // slog's default for a zero-value GCPMultiEndpoint
	}
	w.status.Path = path
	// The directory is watched before the first reading, so that an edit made meanwhile is
	// seen (its events wait in fsnotify's queue until run starts).
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("spannerme: watching %s: %w", path, err)
	}
	if err := fw.Add(filepath.Dir(path)); err != nil {
		fw.Close()
		return nil, fmt.Errorf("spannerme: watching %s: %w", path, err)
	}
	snap, err := w.readFile()
	if err == nil {
		err = w.apply(snap)
	}
	if err != nil {
		fw.Close()
		return nil, err
	}
	w.fw = fw
	w.publish()
	if opts.Resync > 0 {
		w.resync = clk.AfterFunc(opts.Resync, w.resynced)
	}
	go w.run()
	return w, nil
}

// Status returns the watched file's status.
func (w *ConfigWatcher) Status() ConfigStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return *w.status.clone()
}

// Close stops watching and waits until a reload in progress has finished; a read of the file
// in progress is not waited for (it finishes alone, and nothing is applied after Close), so
// Close returns within the time an update of the GCPMultiEndpoint takes, whatever the file
// system does. The configuration in force stays. Close is idempotent; it returns fsnotify's
// error from closing the watch.
func (w *ConfigWatcher) Close() error {
	var err error
	w.stopOnce.Do(func() {
		w.timerMu.Lock()
		w.closed = true
		for _, t := range []clock.Timer{w.debounce, w.resync, w.settle} {
			if t != nil {
				t.Stop()
			}
		}
		w.timerMu.Unlock()
		close(w.stop)
		err = w.fw.Close()
	})
	<-w.done
	w.reads.Wait()
	return err
}

// run is the watcher's goroutine: it turns events into debounced reads.
func (w *ConfigWatcher) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			if w.concerns(ev) {
				w.schedule(&w.debounce, w.opts.Debounce, w.read)
			}
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.log.Warn("spannerme: configuration watch: "+err.Error()+"; reading the file again", "path", w.path)
			w.schedule(&w.debounce, w.opts.Debounce, w.read) // e.g. fsnotify.ErrEventOverflow: events were lost
		}
	}
}

// schedule (re)starts the timer *t to call f after d, unless the watcher is closed.
func (w *ConfigWatcher) schedule(t *clock.Timer, d time.Duration, f func()) {
	w.timerMu.Lock()
	defer w.timerMu.Unlock()
	if w.closed {
		return
	}
	if *t != nil {
		(*t).Stop()
	}
	*t = w.clk.AfterFunc(d, f)
}

// resynced is the Resync timer's call: a read, then the next Resync.
func (w *ConfigWatcher) resynced() {
	w.read()
	w.schedule(&w.resync, w.opts.Resync, w.resynced)
}

// read is a timer's call: it reads the file and applies it by the settle rule (check). One
// read runs at a time; Close waits for it, and none starts after Close.
func (w *ConfigWatcher) read() {
	w.timerMu.Lock()
	if w.closed {
		w.timerMu.Unlock()
		return
	}
	w.reads.Add(1)
	w.timerMu.Unlock()
	defer w.reads.Done()
	w.readMu.Lock()
	defer w.readMu.Unlock()
	w.check()
}

// check reads the file and decides, w.readMu held: content in force changes nothing (and
// clears LastError); the last refused content is refused again without parsing; changed
// content becomes the candidate, applied when a read Settle later finds it the same.
func (w *ConfigWatcher) check() {
	snap, err := w.readFile()
	if errors.Is(err, errWatcherClosed) {
		return
	}
	if err != nil {
		w.candidate = nil
		w.setPending(nil)
		_ = w.fail(err)
		return
	}
	w.mu.Lock()
	inForce := snap.Hash == w.status.Hash
	if inForce {
		w.status.LastError = nil
	}
	w.mu.Unlock()
	switch {
	case inForce:
		w.candidate = nil
		w.setPending(nil)
		w.publish()
		return
	case snap.Hash == w.refused:
		w.candidate = nil
		w.setPending(nil)
		_ = w.fail(w.refusedErr) // logged only if another error came between
		return
	}
	if c := w.candidate; c == nil || !c.Same(snap) {
		w.candidate = snap
		w.setPending(snap)
		w.schedule(&w.settle, w.opts.Settle, w.read)
		return
	}
	if wait := w.candidate.ReadAt.Add(w.opts.Settle).Sub(snap.ReadAt); wait > 0 {
		w.schedule(&w.settle, wait, w.read) // read again too soon (an event): wait the rest
		return
	}
	w.candidate = nil
	w.setPending(nil)
	_ = w.apply(snap)
}

// setPending records snap, a changed content just read, as the edit waiting to settle, or
// clears the edit waiting (nil), w.readMu held. An edit that has waited more than
// pendingWarnAfter Settle intervals is logged, once.
func (w *ConfigWatcher) setPending(snap *configfile.Snapshot) {
	w.mu.Lock()
	if snap == nil {
		changed := w.status.Pending != nil
		w.status.Pending, w.warned = nil, false
		w.mu.Unlock()
		if changed {
			w.publish()
		}
		return
	}
	p := w.status.Pending
	if p == nil {
		p = &PendingEdit{Since: snap.ReadAt}
	} else {
		c := *p
		p = &c
	}
	p.Hash, p.LastReadAt = snap.Hash, snap.ReadAt
	p.Versions++
	waited := snap.ReadAt.Sub(p.Since)
	if p.Versions == 1 {
		p.Why = fmt.Sprintf("changed content read at %s; applied if it is the same %v later (WatchOptions.Settle)",
			snap.ReadAt.Format(time.TimeOnly), w.opts.Settle)
	} else {
		p.Why = fmt.Sprintf("the file changed again before it stayed the same for %v (WatchOptions.Settle): "+
			"%d versions read in %v; a version is applied once it stays the same for %v",
			w.opts.Settle, p.Versions, waited.Round(time.Millisecond), w.opts.Settle)
	}
	w.status.Pending = p
	warn := !w.warned && waited > pendingWarnAfter*w.opts.Settle
	if warn {
		w.warned = true
	}
	w.mu.Unlock()
	if warn { // logged before the status is published, as in apply
		w.log.Warn("spannerme: a configuration edit is waiting to settle: the file keeps changing, and no version of it is applied until one stays the same for WatchOptions.Settle",
			"path", w.path, "since", p.Since, "waited", waited.Round(time.Millisecond), "versions", p.Versions, "settle", w.opts.Settle)
	}
	w.publish()
}

// concerns reports whether ev may have changed the file: an event on its name, or on a
// Kubernetes ConfigMap's "..data" symlink, "..data_tmp" or timestamped directory.
func (w *ConfigWatcher) concerns(ev fsnotify.Event) bool {
	b := filepath.Base(ev.Name)
	return b == w.base || strings.HasPrefix(b, "..")
}

// errWatcherClosed is readFile's error when the watcher was closed during the read.
var errWatcherClosed = errors.New("spannerme: the configuration watcher is closed")

// readFile reads the file (configfile.Reader: a regular file only, opened without blocking,
// in a goroutine of its own) and hashes it. It returns when the read has finished,
// ReadTimeout has passed, or the watcher is closed, whichever comes first. A read that has
// not finished goes on alone, and until it finishes every read fails at once: at most one
// goroutine ever waits on the file system; when it finishes, the file is read again.
func (w *ConfigWatcher) readFile() (*configfile.Snapshot, error) {
	snap, err := w.reader.Snap(w.stop, func() { w.schedule(&w.debounce, w.opts.Debounce, w.read) })
	switch {
	case err == nil:
		return snap, nil
	case errors.Is(err, configfile.ErrStopped):
		return nil, errWatcherClosed
	case errors.Is(err, configfile.ErrBusy):
		return nil, fmt.Errorf("spannerme configuration: %s: an earlier read of the file has not returned yet "+
			"(a file system that does not answer); the file is read again once it has", w.path)
	case errors.Is(err, configfile.ErrTimeout):
		return nil, fmt.Errorf("spannerme configuration: %s: reading the file took longer than %v (WatchOptions.ReadTimeout)",
			w.path, w.opts.ReadTimeout)
	}
	return nil, configReadError(w.path, err)
}

// apply parses snap and applies it, and records the result. A parse error makes snap's
// content the refused one.
func (w *ConfigWatcher) apply(snap *configfile.Snapshot) error {
	fc, parsed, err := parseConfigFile(snap.Data, w.path)
	if err != nil {
		w.refused, w.refusedErr = snap.Hash, err
		return w.fail(err)
	}
	stale, err := w.gme.updateFromFile(parsed)
	if err != nil {
		return w.fail(fmt.Errorf("spannerme configuration: %s: applying: %w", w.path, err))
	}
	restart := restartNeeded(w.gme, fc)
	for _, e := range stale {
		restart = append(restart, "endpoints."+e)
	}
	// Logged before the status changes, so that whoever sees the status finds the log.
	w.log.Info("spannerme: configuration applied", "path", w.path, "sha256", fc.Hash)
	if len(restart) > 0 {
		w.log.Warn("spannerme: configuration changes that take effect only when the GCPMultiEndpoint is created again",
			"path", w.path, "fields", strings.Join(restart, ", "))
	}
	now := w.clk.Now()
	w.mu.Lock()
	w.status.Hash, w.status.AppliedAt, w.status.LastError = fc.Hash, now, nil
	w.status.Applied++
	w.status.RestartNeeded = restart
	w.mu.Unlock()
	w.publish()
	return nil
}

// fail records a reload error; the configuration in force stays. The error is logged when
// it differs from the last one: a file that stays bad is re-read at every Resync, and is
// logged once. The first reading's error (no configuration applied yet) is only returned:
// WatchConfig returns it and nothing was edited or kept.
func (w *ConfigWatcher) fail(err error) error {
	err = bounded.Error(err, maxStatusError)
	w.mu.Lock()
	first := w.status.Applied == 0
	repeated := w.status.LastError != nil && w.status.LastError.Error() == err.Error()
	w.mu.Unlock()
	if first {
		return err
	}
	if !repeated { // logged before the status changes, as in reload
		w.log.Error("spannerme: configuration edit rejected; the previous configuration stays in force", "path", w.path, "error", err)
	}
	w.mu.Lock()
	w.status.LastError, w.status.LastErrorAt = err, w.clk.Now()
	w.mu.Unlock()
	w.publish()
	return err
}

// publish copies the status into the GCPMultiEndpoint's Status, once WatchConfig has
// succeeded (w.fw is set before run starts).
func (w *ConfigWatcher) publish() {
	if w.fw == nil {
		return
	}
	w.mu.Lock()
	s := w.status.clone()
	w.mu.Unlock()
	w.gme.configStatus.Store(s)
}

// restartNeeded lists what fc asks for that differs from what gme was created with.
func restartNeeded(gme *GCPMultiEndpoint, fc *FileConfig) []string {
	return restartFields(fc.Settings, gme.settings, fc.Options.GRPCgcpConfig, gme.gcpConfig, gme.pl.poolMin, gme.pl.poolMax)
}
