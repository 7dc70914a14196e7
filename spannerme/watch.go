package spannerme

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/fsnotify/fsnotify"
)

// ConfigStatus is the status of a configuration file that a ConfigWatcher applies
// (ConfigWatcher.Status, and Status.Config of its GCPMultiEndpoint).
type ConfigStatus struct {
	// Path is the watched file, as given to WatchConfig.
	Path string `json:"path"`
	// Hash is the hex SHA-256 (FileConfig.Hash) of the configuration in force, and AppliedAt
	// when it was applied.
	Hash      string    `json:"hash"`
	AppliedAt time.Time `json:"appliedAt"`
	// Applied counts the configurations applied, the first (by WatchConfig) included.
	Applied int64 `json:"applied"`
	// LastError is the error of the last reload: nil when it applied the file or found the
	// configuration in force unchanged. A *ConfigFileError for a bad edit (errors.As), a read
	// error, or an error of UpdateMultiEndpoints. The previous configuration stays in force.
	LastError error `json:"-"`
	// LastErrorAt is when LastError last happened (a file that stays bad fails again at each
	// re-read, and is logged only the first time); zero when there was none yet.
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// RestartNeeded lists what the configuration in force asks for but a running
	// GCPMultiEndpoint cannot change, sorted: "settings.<field>" for a setting, "poolSize",
	// "sessionAffinity", and "endpoints.<endpoint>" for an endpoint whose pool was dialed
	// with other EndpointOptions. They take effect when the GCPMultiEndpoint is created
	// again (an endpoint's options also when it is removed and added again). A key the file
	// leaves out asks for its default: dropping poolSize or sessionAffinity lists it too.
	// Empty when none.
	RestartNeeded []string `json:"restartNeeded,omitempty"`
}

func (s *ConfigStatus) clone() *ConfigStatus {
	if s == nil {
		return nil
	}
	c := *s
	c.RestartNeeded = append([]string(nil), s.RestartNeeded...)
	return &c
}

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
	// Logger receives applied configurations (Info), rejected edits (Error) and changes that
	// need a restart (Warn). Nil means the GCPMultiEndpoint's Settings.Logger.
	Logger *slog.Logger
}

// ConfigWatcher applies a configuration file to a GCPMultiEndpoint each time the file
// changes (WatchConfig). Its methods are safe for concurrent use.
type ConfigWatcher struct {
	gme      *GCPMultiEndpoint
	path     string
	base     string // the file's name in its directory
	opts     WatchOptions
	log      *slog.Logger
	fw       *fsnotify.Watcher
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	mu     sync.Mutex // guards status
	status ConfigStatus
}

// WatchConfig reads the configuration file at path (LoadConfig), applies it to gme, and
// then applies it again each time it changes, until the ConfigWatcher's Close (gme.Close does
// not stop it: close the watcher first; its reloads after gme.Close fail with ErrClosed and
// change nothing). It runs one goroutine and one fsnotify watch. It watches the file's directory,
// so it sees editors that write a new file and rename it over the old one, a file deleted and
// created again, and Kubernetes ConfigMap volumes, where the file is a symlink through
// "..data", a symlink kubelet swaps atomically. Changes within WatchOptions.Debounce of each
// other make one reload, and a reload of content equal to the configuration in force does
// nothing.
//
// Each reload applies the groups, endpoints, durations and Default as UpdateMultiEndpoints
// does, with the file's EndpointOptions for pools it dials, and replaces the directed read
// policies (Settings.DirectedReads) with the file's, for the calls that start after it. The
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
	if gme == nil {
		return nil, errors.New("spannerme: WatchConfig: nil GCPMultiEndpoint")
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 200 * time.Millisecond
	}
	if opts.Resync == 0 {
		opts.Resync = time.Minute
	}
	w := &ConfigWatcher{gme: gme, path: path, base: filepath.Base(path), opts: opts, log: opts.Logger,
		stop: make(chan struct{}), done: make(chan struct{})}
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
	if err := w.reload(); err != nil {
		fw.Close()
		return nil, err
	}
	w.fw = fw
	w.publish()
	go w.run()
	return w, nil
}

// Status returns the watched file's status.
func (w *ConfigWatcher) Status() ConfigStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return *w.status.clone()
}

// Close stops watching and waits until a reload in progress has finished. The configuration
// in force stays. Close is idempotent; it returns fsnotify's error from closing the watch.
func (w *ConfigWatcher) Close() error {
	var err error
	w.stopOnce.Do(func() {
		close(w.stop)
		err = w.fw.Close()
	})
	<-w.done
	return err
}

// run is the watcher's goroutine: it turns events into debounced reloads.
func (w *ConfigWatcher) run() {
	defer close(w.done)
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var resync <-chan time.Time
	if w.opts.Resync > 0 {
		t := time.NewTicker(w.opts.Resync)
		defer t.Stop()
		resync = t.C
	}
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			if w.concerns(ev) {
				debounce.Reset(w.opts.Debounce)
			}
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.log.Warn("spannerme: configuration watch: "+err.Error()+"; reading the file again", "path", w.path)
			debounce.Reset(w.opts.Debounce) // e.g. fsnotify.ErrEventOverflow: events were lost
		case <-debounce.C:
			_ = w.reload()
		case <-resync:
			_ = w.reload()
		}
	}
}

// concerns reports whether ev may have changed the file: an event on its name, or on a
// Kubernetes ConfigMap's "..data" symlink, "..data_tmp" or timestamped directory.
func (w *ConfigWatcher) concerns(ev fsnotify.Event) bool {
	b := filepath.Base(ev.Name)
	return b == w.base || strings.HasPrefix(b, "..")
}

// reload reads and applies the file unless its content is in force, and records the result.
// Only WatchConfig and then run call it, one at a time.
func (w *ConfigWatcher) reload() error {
	data, err := readConfigFile(w.path)
	if err != nil {
		return w.fail(err)
	}
	fc, parsed, err := parseConfigFile(data, w.path)
	w.mu.Lock()
	unchanged := w.status.Applied > 0 && fc != nil && fc.Hash == w.status.Hash
	if unchanged {
		w.status.LastError = nil
	}
	w.mu.Unlock()
	if unchanged {
		w.publish()
		return nil
	}
	if err != nil {
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
	now := time.Now()
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
	w.status.LastError, w.status.LastErrorAt = err, time.Now()
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
	var out []string
	want, have := fc.Settings.withDefaults(), gme.settings
	off := func(d time.Duration) time.Duration { return max(d, -1) }
	for _, f := range []struct {
		name       string
		want, have any
	}{
		{"drainTimeout", want.DrainTimeout, have.DrainTimeout},
		{"keepaliveTime", off(want.KeepaliveTime), off(have.KeepaliveTime)},
		{"keepaliveTimeout", want.KeepaliveTimeout, have.KeepaliveTimeout},
		{"keepaliveWithoutCalls", want.KeepaliveWithoutCalls, have.KeepaliveWithoutCalls},
		{"minConnectTimeout", want.MinConnectTimeout, have.MinConnectTimeout},
		{"reconnectMaxDelay", want.ReconnectMaxDelay, have.ReconnectMaxDelay},
		{"switchingJitter", want.SwitchingJitter, have.SwitchingJitter},
		{"health", want.Health.comparable(), have.Health.comparable()},
	} {
		if f.want != f.have {
			out = append(out, "settings."+f.name)
		}
	}
	// The pools were made from the creator's GRPCgcpConfig filled in by effectiveAPIConfig;
	// fill the file's in the same way (an absent poolSize or sessionAffinity means the
	// default, not "unchanged"), so dropping a setting counts like changing it.
	wantPool := effectiveAPIConfig(fc.Options.GRPCgcpConfig, gme.pl.poolMin, gme.pl.poolMax).GetChannelPool()
	havePool := gme.gcpConfig.GetChannelPool()
	if wantPool.GetMinSize() != havePool.GetMinSize() || wantPool.GetMaxSize() != havePool.GetMaxSize() {
		out = append(out, "poolSize")
	}
	if hasAffinity(fc.Options.GRPCgcpConfig) != hasAffinity(gme.gcpConfig) {
		out = append(out, "sessionAffinity")
	}
	return out
}

// hasAffinity reports whether c binds calls to channels (SessionAffinityConfig).
func hasAffinity(c *pb.ApiConfig) bool { return len(c.GetMethod()) > 0 }
