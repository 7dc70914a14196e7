package spannerme

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc/codes"
)

// An ejection that makes a group fail over at once (RecoveryTimeout 0), and a readmission
// that makes it switch back at once (SwitchingDelay 0), reach the callbacks in causal order:
// the health event first, then the switch it caused (the README: OnHealth is called "in order
// with the switch events").
func TestHealthEventsBeforeTheSwitchesTheyCause(t *testing.T) {
	e1, e2 := frontedServer(t, "e1"), frontedServer(t, "e2")
	s := fastSettings(nil)
	var mu sync.Mutex
	var seen []string
	note := func(what string) { mu.Lock(); seen = append(seen, what); mu.Unlock() }
	s.OnHealth = func(ev HealthEvent) { note("health " + ev.Kind.String()) }
	s.OnSwitch = func(ev SwitchEvent) { note("switch " + ev.Reason.String()) }
	s.Health = HealthSettings{BaseEjectionTime: 200 * time.Millisecond, ProbeInterval: 100 * time.Millisecond}
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr(), e2.Addr())}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "e1", 10*time.Second)
	eventually(t, 10*time.Second, "E2 available", func() bool {
		for _, g := range gme.Status().Groups {
			for _, e := range g.Endpoints {
				if e.Endpoint == e2.Addr() {
					return e.State == Available
				}
			}
		}
		return false
	})
	mu.Lock()
	seen = nil // the switches of the start, if any
	mu.Unlock()

	if err := e1.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		_, _ = call(ctx, gme)
	}
	waitServedBy(t, ctx, gme, "e2", 10*time.Second)
	e1.Pass()
	waitServedBy(t, ctx, gme, "e1", 10*time.Second)
	want := []string{"health ejected", "switch fallback", "health readmitted", "switch recovery"}
	eventually(t, 10*time.Second, "four events", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= len(want) })
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("callbacks in the order %q, want %q", seen, want)
	}
}

// blockingHandler is a slog handler whose switch records block until released, as a slow
// logger's would, so that Close happens during the log line.
type blockingHandler struct {
	started chan struct{} // closed when the first switch record is being written
	release chan struct{} // switch records return once it is closed
	once    sync.Once
}

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler            { return h }
func (h *blockingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "current endpoint changed") {
		h.once.Do(func() { close(h.started) })
		<-h.release
	}
	return nil
}

// OnSwitch is not called after Close: an event taken for delivery, but still being logged
// when Close is called, is dropped; only an OnSwitch already running may finish.
func TestNoOnSwitchAfterClose(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	e1.Down() // the group falls over to E2 at startup: one switch event
	h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	var calls atomic.Int64
	s := fastSettings(nil)
	s.Logger = slog.New(h)
	s.OnSwitch = func(SwitchEvent) { calls.Add(1) }
	gme, err := NewGCPMultiEndpointWithSettings(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr(), e2.Addr())}), s, insecureDial)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
		gme.Close()
	}()
	select {
	case <-h.started:
	case <-time.After(10 * time.Second):
		t.Fatalf("no switch was logged\n%s", statusString(gme))
	}
	closeErr := make(chan error, 1)
	go func() { closeErr <- gme.Close() }()
	select {
	case err := <-closeErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the log line being written")
	}
	close(h.release) // the log line ends after Close returned
	released = true
	select {
	case <-gme.events.q.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the event goroutine did not end after Close")
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("OnSwitch was called %d times after Close returned, want 0", n)
	}
}
