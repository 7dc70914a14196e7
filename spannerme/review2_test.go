package spannerme

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// The JSON form of a Status is one style throughout: camelCase keys and durations as Go
// duration strings, the health of each pool and the configuration file's status included
// (they came from two branches and kept Go's field names), and it decodes back into an equal
// Status, a configuration file's last error included.
func TestStatusJSON_OneStyleAndRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 1, 2, 3, 0, time.UTC)
	st := Status{
		At: at, Default: "g", Groups: []GroupStatus{}, UnknownGroups: map[string]int64{},
		Pools: []PoolStatus{{Endpoint: "e1:443", Connectivity: "READY", Since: at,
			Health: PoolHealth{Ejected: true, EjectedAt: at, EjectedUntil: at.Add(30 * time.Second), Reason: ReasonConsecutiveFailures,
				Detail: "10 calls failed in a row", Ejections: 1, Suspect: true,
				LastProbe:     ProbeStatus{At: at, Latency: 3 * time.Millisecond, Error: "rpc error: code = Unavailable"},
				IntervalStart: at, Calls: 12, Failures: 10, Timeouts: 1, ConsecutiveFailures: 10}}},
		Config: &ConfigStatus{Path: "/etc/spannerme.yaml", Hash: "abc", AppliedAt: at, Applied: 2,
			LastError: errors.New("line 3: bad"), LastErrorAt: at, RestartNeeded: []string{"poolSize"}},
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if keys := regexp.MustCompile(`"([A-Z][A-Za-z]*)":`).FindAllString(string(b), -1); len(keys) != 0 {
		t.Errorf("keys not in camelCase: %v\n%s", keys, b)
	}
	for _, want := range []string{`"latency":"3ms"`, `"lastError":"line 3: bad"`, `"reason":"consecutive failures"`, `"ejected":true`} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).Match(b) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	var back Status
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("decoding the JSON form: %v\n%s", err, b)
	}
	if back.Config == nil || back.Config.LastError == nil || back.Config.LastError.Error() != "line 3: bad" {
		t.Fatalf("config after the round trip: %+v", back.Config)
	}
	back.Config.LastError = st.Config.LastError
	if !reflect.DeepEqual(back, st) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, st)
	}

	ev := HealthEvent{Endpoint: "e1:443", Kind: EndpointEjected, Reason: ReasonTimeouts, Detail: "d", At: at, Until: at, Ejections: 2}
	b, err = json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if keys := regexp.MustCompile(`"([A-Z][A-Za-z]*)":`).FindAllString(string(b), -1); len(keys) != 0 {
		t.Errorf("HealthEvent keys not in camelCase: %v\n%s", keys, b)
	}
	var evBack HealthEvent
	if err := json.Unmarshal(b, &evBack); err != nil || evBack != ev {
		t.Fatalf("HealthEvent round trip: %+v, %v", evBack, err)
	}
}

// WatchConfig on a zero-value GCPMultiEndpoint (which is closed) fails with ErrClosed, as
// UpdateMultiEndpoints does, instead of panicking (it reached the dial through a nil
// observer, and logged through a nil logger).
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

// An endpoint whose connection attempts fail in two ways by turns (TLS to a plaintext fake
// endpoint: "reset" and "tls" alternate) logs each kind once while it stays down, not one
// line per attempt; once it has been up, each kind is logged again.
func TestConnErrorsAlternatingKindsLoggedOnce(t *testing.T) {
	logs := &syncBuffer{}
	clk := clock.Real
	o := newObserver(slog.New(slog.NewTextHandler(logs, nil)), clk, newMetrics(noop.NewMeterProvider()))
	w := newConnWatch("e1:443", clk.Now, o.connError)
	defer w.release()
	for range 5 {
		w.record(ConnReset, errors.New("connection reset by peer"))
		w.record(ConnTLS, errors.New("tls: first record does not look like a TLS handshake"))
	}
	p := &pool{endpoint: "e1:443", watch: w}
	p.ready.Store(true)
	o.poolAvailability(p) // up
	p.ready.Store(false)
	o.poolAvailability(p) // down, with the last error (tls)
	for range 5 {
		w.record(ConnReset, errors.New("connection reset by peer"))
		w.record(ConnTLS, errors.New("tls: first record does not look like a TLS handshake"))
	}
	o.close()
	if got := logLines(logs, "endpoint=e1:443", "kind=reset"); len(got) != 2 {
		t.Errorf("reset lines: %d, want 2 (once before the endpoint was up, once after)\n%s", len(got), logs)
	}
	if got := logLines(logs, "endpoint=e1:443", "kind=tls"); len(got) != 2 {
		t.Errorf("tls lines: %d, want 2 (once before, and the down line after)\n%s", len(got), logs)
	}
}

// A stream started with a context that is already done: with grpcgcp's stream interceptor
// (an affinity configuration) gRPC's stream is created only at the first SendMsg, so
// NewStream succeeds and the context's callback runs at once, on another goroutine. The
// stream's tracking must be complete before that callback can run (run with -race: it read
// fields still being written), the call ends once (in flight back to 0, counted once as
// CANCELED).
func TestStreamWithContextAlreadyDone(t *testing.T) {
	e1 := startEndpoint(t, "E1")
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())})
	o.GRPCgcpConfig = SessionAffinityConfig(1)
	reader, mp := newMetricReader()
	s := fastSettings(nil)
	s.MeterProvider = mp
	gme := newGME(t, o, s)
	waitServedBy(t, context.Background(), gme, "E1", 10*time.Second)
	before := sumBy(collect(t, reader), metricCalls, AttrGRPCStatusCode)["1"]
	const n = 50
	desc := &grpc.StreamDesc{ServerStreams: true}
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		cs, err := gme.NewStream(ctx, desc, "/grpc.testing.TestService/StreamingOutputCall")
		if err != nil {
			t.Fatalf("NewStream with grpcgcp's interceptor: %v, want a stream (created at SendMsg)", err)
		}
		if err := cs.SendMsg(&testpb.StreamingOutputCallRequest{}); err == nil {
			_ = cs.RecvMsg(new(testpb.StreamingOutputCallResponse))
		}
	}
	eventually(t, 10*time.Second, "no call in flight", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.InFlight == 0 })
	if got := sumBy(collect(t, reader), metricCalls, AttrGRPCStatusCode)["1"] - before; got != n {
		t.Fatalf("CANCELED calls counted: %d, want %d (each stream once)", got, n)
	}
}
