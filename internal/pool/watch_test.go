package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// recordingObserver records the transitions a Watch reports.
type recordingObserver struct {
	mu          sync.Mutex
	unreachable []ConnError
	how         []Unreachability
	up          []time.Duration
	down        []ConnError
}

func (o *recordingObserver) Availability(*Pool)                                {}
func (o *recordingObserver) StateChanged(*Pool)                                {}
func (o *recordingObserver) Health(*Pool, health.Event)                        {}
func (o *recordingObserver) CallEnd(context.Context, string, time.Time, error) {}
func (o *recordingObserver) Latency(*Pool)                                     {}

func (o *recordingObserver) Unreachable(e ConnError, how Unreachability) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unreachable, o.how = append(o.unreachable, e), append(o.how, how)
}

func (o *recordingObserver) Up(_ time.Time, downFor time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.up = append(o.up, downFor)
}

func (o *recordingObserver) Down(_ time.Time, reason ConnError) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = append(o.down, reason)
}

// count returns how many reports (Unreachable, and Down with its reason) name kind.
func (o *recordingObserver) count(kind ConnErrorKind) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range append(append([]ConnError(nil), o.unreachable...), o.down...) {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// An endpoint whose connection attempts fail in two ways by turns (TLS to a plaintext fake
// endpoint: "reset" and "tls" alternate) reports each kind once while it stays down, not once
// per attempt; once it has been up, each kind is reported again.
func TestConnErrorsAlternatingKindsLoggedOnce(t *testing.T) {
	obs := &recordingObserver{}
	w := NewWatch("e1:443", nil, obs)
	defer w.Release()
	for range 5 {
		w.record(KindReset, errors.New("connection reset by peer"))
		w.record(KindTLS, errors.New("tls: first record does not look like a TLS handshake"))
	}
	w.availability(true)  // up
	w.availability(false) // down: the errors were recorded before it was up, so no reason
	for range 5 {
		w.record(KindReset, errors.New("connection reset by peer"))
		w.record(KindTLS, errors.New("tls: first record does not look like a TLS handshake"))
	}
	if got := obs.count(KindReset); got != 2 {
		t.Errorf("reset reports: %d, want 2 (once before the endpoint was up, once after)", got)
	}
	if got := obs.count(KindTLS); got != 2 {
		t.Errorf("tls reports: %d, want 2 (once before the endpoint was up, once after)", got)
	}
	if len(obs.down) != 1 || obs.down[0].Kind != KindUnknown {
		t.Errorf("down reports %v, want one without a reason (every error is older than the connection)", obs.down)
	}
	if len(obs.up) != 1 || obs.up[0] >= 0 {
		t.Errorf("up reports %v, want one, never down before (negative)", obs.up)
	}
	if obs.how[0] != NeverConnected || obs.how[len(obs.how)-1] != AttemptFailed {
		t.Errorf("unreachability %v, want never connected first and attempt failed after the endpoint was up", obs.how)
	}
}

// A pool whose first connection attempt failed with no error recorded (a caller's dial
// options replaced the pool's balancer) reports it once, without a reason.
func TestFirstAttemptFailedWithoutError(t *testing.T) {
	obs := &recordingObserver{}
	w := NewWatch("e1:443", nil, obs)
	defer w.Release()
	w.availability(false)
	w.availability(false)
	if len(obs.how) != 1 || obs.how[0] != FirstAttemptFailed || obs.unreachable[0].Kind != KindUnknown {
		t.Fatalf("reports %v %v, want one FirstAttemptFailed of kind unknown", obs.unreachable, obs.how)
	}
}

// A connection error's text, which may quote the server, is kept cut to bounded.ServerText
// bytes, with the marker.
func TestConnErrorMessageIsBounded(t *testing.T) {
	obs := &recordingObserver{}
	w := NewWatch("e1:443", nil, obs)
	defer w.Release()
	long := strings.Repeat("\x1b]0;fake title\x07 server says no. ", 1000)
	w.record(KindOther, errors.New(long))
	e := w.last.Load()
	if e == nil || len(e.Message) > bounded.ServerText+len("…[cut: 100000 bytes in all]") || !strings.HasSuffix(e.Message, fmt.Sprintf("…[cut: %d bytes in all]", len(long))) {
		t.Fatalf("last error kept as %d bytes: %.80q…", len(e.Message), e.Message)
	}
	if len(obs.unreachable) != 1 || obs.unreachable[0].Message != e.Message {
		t.Errorf("reported %v, want the cut message", obs.unreachable)
	}
}
