package configfile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// Snapshot is one read of a file: its content, the content's hex SHA-256, the size and
// modification time the opened file had, and when the read finished (on the Reader's clock).
type Snapshot struct {
	Data    []byte
	Hash    string
	Size    int64
	ModTime time.Time
	ReadAt  time.Time
}

// Same reports whether s and o are the same content: size, modification time and hash.
func (s *Snapshot) Same(o *Snapshot) bool {
	return s.Size == o.Size && s.ModTime.Equal(o.ModTime) && s.Hash == o.Hash
}

// Errors of Reader.Snap that are not the file's own.
var (
	// ErrStopped: the caller's stop channel was closed before the read finished.
	ErrStopped = errors.New("the read was abandoned: its reader is stopped")
	// ErrBusy: an earlier read has not returned yet; at most one waits on the file system.
	ErrBusy = errors.New("an earlier read of the file has not returned yet")
	// ErrTimeout: the read did not finish within Reader.Timeout; it goes on alone.
	ErrTimeout = errors.New("reading the file took longer than its timeout")
)

// Reader reads one file for a watcher: one read at a time, each in a goroutine of its own
// and bounded by Timeout on Clock, so that a file system that does not answer holds at most
// one goroutine and never the caller. Set every field before the first Snap; Snap is safe
// for concurrent use.
type Reader struct {
	Path    string
	Read    func(path string) ([]byte, os.FileInfo, error) // ReadFile, or a test's
	Timeout time.Duration
	Clock   clock.Clock

	reading atomic.Bool // a read is running
}

// Snap reads the file (Read) and hashes it. It returns when the read has finished, Timeout
// has passed, or stop is closed, whichever comes first. A read that has not finished goes on
// alone, and until it finishes every Snap fails at once with ErrBusy; when a read given up
// on by its timeout finishes, late is called (on the read's goroutine), so that the caller
// reads again. Errors: ErrStopped, ErrBusy, ErrTimeout, or Read's error.
func (r *Reader) Snap(stop <-chan struct{}, late func()) (*Snapshot, error) {
	select {
	case <-stop:
		return nil, ErrStopped
	default:
	}
	if !r.reading.CompareAndSwap(false, true) {
		return nil, ErrBusy
	}
	type result struct {
		data []byte
		fi   os.FileInfo
		err  error
	}
	done := make(chan result, 1) // never blocks the reader, whoever has stopped waiting
	// settled is set by whichever comes first: the reader with its result, or this Snap
	// giving up on it (then the reader, finishing, calls late).
	var settled atomic.Bool
	go func() {
		data, fi, err := r.Read(r.Path)
		r.reading.Store(false)
		done <- result{data, fi, err}
		if !settled.CompareAndSwap(false, true) { // given up on: its result is lost
			late()
		}
	}()
	timeout := make(chan struct{})
	t := r.Clock.AfterFunc(r.Timeout, func() { close(timeout) })
	defer t.Stop()
	var res result
	select {
	case res = <-done:
	case <-timeout:
		if settled.CompareAndSwap(false, true) {
			return nil, ErrTimeout
		}
		res = <-done // the reader finished meanwhile: its result is here
	case <-stop:
		settled.Store(true)
		return nil, ErrStopped
	}
	if res.err != nil {
		return nil, res.err
	}
	sum := sha256.Sum256(res.data)
	return &Snapshot{Data: res.data, Hash: hex.EncodeToString(sum[:]), Size: res.fi.Size(), ModTime: res.fi.ModTime(),
		ReadAt: r.Clock.Now()}, nil
}

// Reading reports whether a read is running (one that Snap gave up on included).
func (r *Reader) Reading() bool { return r.reading.Load() }
