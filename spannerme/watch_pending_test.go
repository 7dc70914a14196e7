package spannerme

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A file replaced every 500ms for 10s never settles (the settle interval is 1s): the status
// shows the edit waiting, since the first read of it, with the versions read and why; one
// WARN line says so once it has waited more than 5 settle intervals. Once the writer stops,
// the last version is applied one settle interval after its read and the status clears.
// Fake clock: the 10s cost no real time; the renames and their events are real.
func TestWatchShowsAnEditWaitingToSettle(t *testing.T) {
	f, clk := newSettleFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	initial := f.w.Status()
	var first time.Time
	var last string
	for i := range 20 {
		last = watchConfigYAML(fmt.Sprintf("    recoveryTimeout: %dms\n", i+1), f.eps[1+i%2].Addr())
		writeByRename(t, f.path, last)
		if i == 0 {
			waitPending(t, clk, 1) // the debounce
		} else {
			waitPending(t, clk, 2) // the settle timer of the last version, and the debounce
		}
		clk.Advance(settleDebounce)
		if i == 0 {
			first = clk.Now()
		}
		s := f.w.Status()
		p := s.Pending
		if p == nil || !p.Since.Equal(first) || p.Versions != i+1 || p.Hash != hashOf(last) || !p.LastReadAt.Equal(clk.Now()) {
			t.Fatalf("write %d: pending %+v; want since %v, %d versions, the last one's hash", i, p, first, i+1)
		}
		if s.Hash != initial.Hash || s.Applied != initial.Applied {
			t.Fatalf("write %d: status %+v; want nothing applied while the file keeps changing", i, s)
		}
		if i > 0 && !strings.Contains(p.Why, "the file changed again before it stayed the same for 1s") {
			t.Errorf("write %d: why %q", i, p.Why)
		}
		if gs := f.gme.Status().Config; gs == nil || gs.Pending == nil || gs.Pending.Versions != i+1 {
			t.Fatalf("write %d: gme.Status().Config = %+v; want the edit waiting there too", i, gs)
		}
		warned := strings.Count(f.log.String(), "configuration edit is waiting to settle")
		if waited := clk.Now().Sub(first); waited > 5*settleInterval && warned != 1 || waited <= 5*settleInterval && warned != 0 {
			t.Fatalf("write %d, waited %v: %d WARN lines; want one after 5s, none before:\n%s", i, waited, warned, f.log.String())
		}
		clk.Advance(500*time.Millisecond - settleDebounce)
	}
	if !strings.Contains(f.log.String(), "level=WARN") {
		t.Errorf("the warning is not at level WARN:\n%s", f.log.String())
	}
	b, err := json.Marshal(f.w.Status())
	if err != nil || !strings.Contains(string(b), `"pending":{"since":`) {
		t.Errorf("JSON of the status: %s, %v; want the edit waiting", b, err)
	}

	// The writer stops: the last version settles.
	clk.Advance(settleInterval)
	s := f.w.Status()
	if s.Hash != hashOf(last) || s.Pending != nil || s.LastError != nil {
		t.Fatalf("status %+v once the writer stopped; want the last version applied and nothing waiting", s)
	}
	if n := strings.Count(f.log.String(), "configuration edit is waiting to settle"); n != 1 {
		t.Errorf("%d WARN lines in all, want 1", n)
	}
}
