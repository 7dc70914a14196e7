package spannerme

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
)

// logLines returns the lines of logs that contain every one of parts.
func logLines(logs *syncBuffer, parts ...string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		keep := l != ""
		for _, p := range parts {
			keep = keep && strings.Contains(l, p)
		}
		if keep {
			out = append(out, l)
		}
	}
	return out
}

// Every transition of an endpoint is logged once: down with why, a failing reconnection
// once per kind of error however many retries, up; every switch once; calls log nothing.
func TestTransitionsLoggedOnce(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	logs := &syncBuffer{}
	s := fastSettings(logs)
	s.ReconnectMaxDelay = 50 * time.Millisecond
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(200*time.Millisecond, 300*time.Millisecond, e1.Addr(), e2.Addr())}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	eventually(t, 10*time.Second, "both endpoints up", func() bool {
		return len(logLines(logs, "endpoint up")) == 2
	})
	e1Tag := "endpoint=" + e1.Addr()

	e1.Down()
	waitServedBy(t, ctx, gme, "E2", 10*time.Second)
	// Several more failed reconnections.
	p, _ := poolOf(gme, e1.Addr())
	for range 3 {
		last := p.LastError.At
		eventually(t, 10*time.Second, "another failed reconnection", func() bool {
			p, _ = poolOf(gme, e1.Addr())
			return p.LastError != nil && p.LastError.At.After(last)
		})
	}
	before := logs.String()
	for range 20 {
		if _, err := call(ctx, gme); err != nil {
			t.Fatal(err)
		}
	}
	if logs.String() != before {
		t.Errorf("calls logged:\n%s", strings.TrimPrefix(logs.String(), before))
	}
	e1.Up()
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	eventually(t, 10*time.Second, "E1 logged up again", func() bool { return len(logLines(logs, "endpoint up", e1Tag)) == 2 })

	for _, want := range []struct {
		parts []string
		n     int
	}{
		{[]string{"level=WARN", "endpoint down", e1Tag}, 1},
		// Refused reconnections: one line, the down line itself if a channel was refused
		// before the pool's last connection closed, else the next one.
		{[]string{"level=WARN", e1Tag, "kind=refused"}, 1},
		{[]string{"level=INFO", "endpoint up", e1Tag, "down_for="}, 1},
		{[]string{"level=INFO", "current endpoint changed", "reason=fallback", "to=" + e2.Addr()}, 1},
		{[]string{"level=INFO", "current endpoint changed", "reason=recovery", "to=" + e1.Addr()}, 1},
		{[]string{"endpoint=" + e2.Addr()}, 1}, // E2 only came up
	} {
		if got := logLines(logs, want.parts...); len(got) != want.n {
			t.Errorf("%d lines with %q, want %d:\n%s", len(got), want.parts, want.n, logs)
		}
	}
	// In order: down, the failing reconnection, up.
	all := logs.String()
	down := strings.Index(all, "endpoint down")
	failed := strings.Index(all, "kind=refused")
	up := strings.LastIndex(all, "endpoint up")
	if !(down >= 0 && down <= failed && failed < up) {
		t.Errorf("out of order (down %d, refused %d, up %d):\n%s", down, failed, up, all)
	}
}

// F23: a health check reading Status of a closed client sees it closed and nothing alive; a
// zero-value GCPMultiEndpoint never panics.
func TestCase_F23_ClosedClientSaysClosed(t *testing.T) {
	ctx := context.Background()
	checkClosed := func(t *testing.T, gme *GCPMultiEndpoint) {
		t.Helper()
		st := gme.Status()
		if !st.Closed {
			t.Errorf("Status().Closed = false")
		}
		for _, g := range st.Groups {
			if g.Current != "" || !g.Closed {
				t.Errorf("group %s: Current %q, Closed %v; want no current endpoint, closed", g.Name, g.Current, g.Closed)
			}
			for _, e := range g.Endpoints {
				if e.State != Unavailable {
					t.Errorf("group %s: endpoint %s is %v after Close", g.Name, e.Endpoint, e.State)
				}
			}
		}
		for _, p := range st.Pools {
			if p.Connectivity != "SHUTDOWN" {
				t.Errorf("pool %s is %s after Close", p.Endpoint, p.Connectivity)
			}
		}
		if _, err := call(ctx, gme); status.Code(err) != codes.Canceled || !strings.Contains(err.Error(), ErrClosed.Error()) || !errors.Is(err, ErrClosed) {
			t.Errorf("unary call: %v; want CANCELED %q, errors.Is ErrClosed", err, ErrClosed)
		}
		if err := streamOnce(ctx, gme); status.Code(err) != codes.Canceled || !errors.Is(err, ErrClosed) {
			t.Errorf("stream: %v; want CANCELED, errors.Is ErrClosed", err)
		}
		err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "127.0.0.1:1")}))
		if !errors.Is(err, ErrClosed) || strings.Count(err.Error(), "spannerme:") != 1 {
			t.Errorf("UpdateMultiEndpoints: %v; want ErrClosed, prefixed once", err)
		}
		if err := gme.Close(); err != nil {
			t.Errorf("Close again: %v", err)
		}
		if _, err := json.Marshal(st); err != nil {
			t.Errorf("Status does not marshal: %v", err)
		}
	}
	t.Run("zero value", func(t *testing.T) {
		var gme GCPMultiEndpoint
		if err := gme.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if st := gme.Status(); len(st.Groups) != 0 || len(st.Pools) != 0 {
			t.Errorf("Status of a zero value lists %d groups and %d pools", len(st.Groups), len(st.Pools))
		}
		if gme.GCPConfig() != nil {
			t.Errorf("GCPConfig of a zero value is not nil")
		}
		checkClosed(t, &gme)
		var never GCPMultiEndpoint // calls and Status before any Close
		if _, err := call(ctx, &never); status.Code(err) != codes.Canceled {
			t.Errorf("call on a zero value: %v", err)
		}
		if !never.Status().Closed {
			t.Errorf("a zero value is not reported closed")
		}
	})
	t.Run("Close", func(t *testing.T) {
		e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
		gme := newGME(t, options("a", map[string]*multiendpoint.MultiEndpointOptions{
			"a": group(time.Second, 0, e1.Addr(), e2.Addr()), "b": group(time.Second, 0, e2.Addr())}), fastSettings(nil))
		waitServedBy(t, ctx, gme, "E1", 10*time.Second)
		waitConnected(t, gme, e2.Addr())
		if err := gme.Close(); err != nil {
			t.Fatal(err)
		}
		st := gme.Status()
		if len(st.Groups) != 2 || len(st.Pools) != 2 || st.Default != "a" {
			t.Fatalf("after Close: %d groups, %d pools, default %q; want the configuration kept", len(st.Groups), len(st.Pools), st.Default)
		}
		checkClosed(t, gme)
	})
	t.Run("Spanner client closed", func(t *testing.T) {
		b := startSpannerBackend(t, 2)
		client, gme := newSpannerClient(t, b, options("g", map[string]*multiendpoint.MultiEndpointOptions{
			"g": group(time.Second, 0, b.eps[0].Addr(), b.eps[1].Addr())}), fastSettings(nil))
		if _, err := countAccounts(ctx, client); err != nil {
			t.Fatal(err)
		}
		client.Close() // by the application, or by accident
		eventually(t, 10*time.Second, "the GCPMultiEndpoint closed with its client", func() bool { return gme.Status().Closed })
		checkClosed(t, gme)
	})
}

// NewMEContext(ctx, "") routes to the default group, as no name does: it is no unknown group.
func TestEmptyGroupNameIsTheDefault(t *testing.T) {
	a, b := startEndpoint(t, "A"), startEndpoint(t, "B")
	logs := &syncBuffer{}
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, a.Addr()), "west": group(0, 0, b.Addr())}), fastSettings(logs))
	if got, err := call(NewMEContext(context.Background(), ""), gme); err != nil || got != "A" {
		t.Fatalf("NewMEContext(ctx, \"\") served by %q, %v; want the default group's A", got, err)
	}
	if n := len(gme.Status().UnknownGroups); n != 0 || strings.Contains(logs.String(), "unknown MultiEndpoint") {
		t.Errorf("\"\" counted or logged as an unknown group: %v\n%s", gme.Status().UnknownGroups, logs)
	}
}

// An ejection and a readmission reported by a pool's health detector are logged once each
// (with the endpoint's name), counted in the metrics (under the name too) and handed to
// OnHealth.
func TestEjectionHook(t *testing.T) {
	logs := &syncBuffer{}
	s := fastSettings(logs)
	reader, mp := newMetricReader()
	s.MeterProvider = mp
	e1 := startEndpoint(t, "E1")
	var events []HealthEvent
	var eventsMu sync.Mutex
	s.OnHealth = func(ev HealthEvent) { eventsMu.Lock(); events = append(events, ev); eventsMu.Unlock() }
	s.EndpointOptions = map[string]EndpointOptions{e1.Addr(): {Name: "psc-east4"}}
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())}), s)
	now := gme.obs.Now()
	p := gme.snap.Load().Pools[e1.Addr()]
	pe := eventsOf(p)
	pe.Health(p, health.Event{Kind: health.Ejected, Reason: health.ConsecutiveFailures, Detail: "10 failures in a row",
		At: now, Until: now.Add(30 * time.Second), Ejections: 1})
	pe.Health(p, health.Event{Kind: health.Readmitted, Reason: health.ConsecutiveFailures, At: now})
	eventually(t, 10*time.Second, "two health events delivered", func() bool { eventsMu.Lock(); defer eventsMu.Unlock(); return len(events) == 2 })
	gme.Close() // delivers the queued log lines
	if got := logLines(logs, "level=WARN", "endpoint ejected", "endpoint="+e1.Addr()+" endpoint_name=psc-east4", `reason="consecutive failures"`, "for=30s"); len(got) != 1 {
		t.Errorf("ejection log lines: %q\n%s", got, logs)
	}
	if got := logLines(logs, "level=INFO", "endpoint readmitted", "endpoint="+e1.Addr()+" endpoint_name=psc-east4"); len(got) != 1 {
		t.Errorf("readmission log lines: %q\n%s", got, logs)
	}
	rm := collect(t, reader)
	if got := sumBy(rm, observe.MetricEjections, AttrEjectionReason); got["consecutive failures"] != 1 {
		t.Errorf("%s by reason = %v, want consecutive failures:1", observe.MetricEjections, got)
	}
	if got := sumBy(rm, observe.MetricEjections, AttrEndpointName); got["psc-east4"] != 1 {
		t.Errorf("%s by %s = %v, want psc-east4:1", observe.MetricEjections, AttrEndpointName, got)
	}
}
