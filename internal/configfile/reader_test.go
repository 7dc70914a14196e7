package configfile

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// A Reader on a file system that does not answer: the stuck read times out, later reads fail
// at once as busy while it is stuck, and when it returns the caller is told (late) and the
// next read succeeds; a closed stop abandons a read at once. In a synctest bubble, so that
// the timeout passes without waiting for it.
func TestReaderBoundsAStuckRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	if err := os.WriteFile(path, []byte("default: g\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var stuck atomic.Bool
		stuck.Store(true)
		r := &Reader{Path: path, Timeout: time.Second, Clock: clock.Real, Read: func(p string) ([]byte, os.FileInfo, error) {
			if stuck.Load() {
				<-release
			}
			return ReadFile(p)
		}}
		late := make(chan struct{}, 1)
		onLate := func() { late <- struct{}{} }
		stop := make(chan struct{})

		began := time.Now()
		if _, err := r.Snap(stop, onLate); !errors.Is(err, ErrTimeout) || time.Since(began) != time.Second {
			t.Fatalf("the stuck read: %v after %v, want ErrTimeout after the 1s timeout", err, time.Since(began))
		}
		if !r.Reading() {
			t.Fatal("the stuck read is not running")
		}
		if _, err := r.Snap(stop, onLate); !errors.Is(err, ErrBusy) {
			t.Fatalf("a read while one is stuck: %v, want ErrBusy", err)
		}
		stuck.Store(false)
		close(release)
		<-late // the stuck read returned: the caller reads again
		snap, err := r.Snap(stop, onLate)
		if err != nil || string(snap.Data) != "default: g\n" || len(snap.Hash) != 64 || snap.Size != 11 || !snap.ReadAt.Equal(time.Now()) {
			t.Fatalf("the next read: %+v, %v", snap, err)
		}
		if again, _ := r.Snap(stop, onLate); !again.Same(snap) {
			t.Fatal("two reads of the same content differ")
		}
		close(stop)
		if _, err := r.Snap(stop, onLate); !errors.Is(err, ErrStopped) {
			t.Fatalf("a read after stop: %v, want ErrStopped", err)
		}
	})
}
