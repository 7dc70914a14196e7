package spannerme

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

func TestHealthSettingsValidation(t *testing.T) {
	for _, tc := range []struct {
		field string
		h     HealthSettings
	}{
		{"Interval", HealthSettings{Interval: -time.Second}},
		{"ConsecutiveFailures", HealthSettings{ConsecutiveFailures: -1}},
		{"FailurePercentage", HealthSettings{FailurePercentage: -1}},
		{"FailurePercentage", HealthSettings{FailurePercentage: 101}},
		{"MinimumCalls", HealthSettings{MinimumCalls: -1}},
		{"BaseEjectionTime", HealthSettings{BaseEjectionTime: -1}},
		{"MaxEjectionTime", HealthSettings{MaxEjectionTime: -1}},
		{"ProbeTimeout", HealthSettings{ProbeTimeout: -1}},
		{"ProbeInterval", HealthSettings{ProbeInterval: -1}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, "127.0.0.1:1")})
			check := func(what string, err error) {
				t.Helper()
				var ce *ConfigError
				if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || !strings.Contains(ce.Problem, "Settings.Health."+tc.field) {
					t.Fatalf("%s: error %v, want a *ConfigError naming Settings.Health.%s", what, err, tc.field)
				}
			}
			gme, err := NewGCPMultiEndpointWithSettings(o, Settings{Health: tc.h}, insecureDial)
			if gme != nil {
				gme.Close()
			}
			check("NewGCPMultiEndpointWithSettings", err)
			client, gme, err := NewMultiEndpointClientWithSettings(context.Background(), fixture.SpannertestDatabase,
				fixture.ClientConfig(), o, Settings{Health: tc.h}, clientOptions()...)
			if client != nil || gme != nil {
				t.Fatal("a client was returned with the error")
			}
			check("NewMultiEndpointClientWithSettings", err)
		})
	}
}

func TestHealthSettingsDefaults(t *testing.T) {
	h := HealthSettings{}.withDefaults()
	want := HealthSettings{Interval: 10 * time.Second, ConsecutiveFailures: 10, FailurePercentage: 50, MinimumCalls: 20,
		BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second, ProbeTimeout: 2 * time.Second, ProbeInterval: 10 * time.Second}
	if h.Probe == nil {
		t.Fatal("no default probe")
	}
	h.Probe = nil
	if h.detectorConfig() != want.detectorConfig() || h.ProbeTimeout != want.ProbeTimeout || h.Disabled || h.ResourceExhaustedIsFailure {
		t.Fatalf("defaults %+v, want %+v", h, want)
	}
}

// frontedServer is a named TestService behind a fake Google frontend.
func frontedServer(t *testing.T, name string) *spannermetest.Frontend {
	t.Helper()
	return spannermetest.NewFrontendTB(t, startServer(t, name))
}

// Ejection feeds every group that lists the endpoint: E1 is current in two groups; its calls
// fail in one of them; both groups leave it. Status shows the ejection, and the probes of
// the ejected endpoint (UnimplementedMethodProbe: the TestService answers UNIMPLEMENTED)
// readmit it once it heals.
func TestEjectionFeedsEveryGroupAndProbesReadmit(t *testing.T) {
	e1, e2, e3 := frontedServer(t, "e1"), frontedServer(t, "e2"), frontedServer(t, "e3")
	var buf syncBuffer
	s := fastSettings(&buf)
	events := make(chan HealthEvent, 16)
	s.OnHealth = func(ev HealthEvent) { events <- ev }
	s.Health = HealthSettings{BaseEjectionTime: 500 * time.Millisecond, ProbeInterval: 200 * time.Millisecond}
	gme := newGME(t, options("a", map[string]*multiendpoint.MultiEndpointOptions{
		"a": group(100*time.Millisecond, 200*time.Millisecond, e1.Addr(), e2.Addr()),
		"b": group(100*time.Millisecond, 200*time.Millisecond, e1.Addr(), e3.Addr()),
	}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "e1", 10*time.Second)
	waitServedBy(t, NewMEContext(ctx, "b"), gme, "e1", 10*time.Second)

	if err := e1.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	for range 10 { // group a's calls only
		if _, err := call(ctx, gme); status.Code(err) != codes.Unavailable {
			t.Fatalf("call on failing E1: %v, want UNAVAILABLE", err)
		}
	}
	var ev HealthEvent
	select {
	case ev = <-events:
	case <-time.After(10 * time.Second):
		t.Fatal("no health event")
	}
	if ev.Endpoint != e1.Addr() || ev.Kind != EndpointEjected || ev.Reason != ReasonConsecutiveFailures || ev.Ejections != 1 ||
		ev.Until.Sub(ev.At) != 500*time.Millisecond || !strings.Contains(ev.Detail, "Unavailable") {
		t.Fatalf("event %+v, want E1 ejected for consecutive failures for 500ms", ev)
	}
	p, _ := poolOf(gme, e1.Addr())
	if !p.Health.Ejected || p.Health.Reason != ReasonConsecutiveFailures || p.Health.Ejections != 1 || !p.Health.EjectedUntil.Equal(ev.Until) ||
		p.Connectivity != "READY" || p.Health.Failures < 10 || p.Health.Disabled {
		t.Fatalf("E1's status after ejection: %+v", p)
	}
	waitServedBy(t, ctx, gme, "e2", 10*time.Second)
	waitServedBy(t, NewMEContext(ctx, "b"), gme, "e3", 10*time.Second) // b made no call to E1
	if !strings.Contains(buf.String(), "endpoint ejected") {
		t.Fatalf("the ejection was not logged:\n%s", buf.String())
	}

	// Ejected for 500ms, then probed every 200ms until a probe passes: the first probe starts
	// at ev.Until.
	eventually(t, 10*time.Second, "a readmission probe", func() bool {
		p, _ := poolOf(gme, e1.Addr())
		return !p.Health.LastProbe.At.Before(ev.Until)
	})
	if p, _ := poolOf(gme, e1.Addr()); !p.Health.Ejected || p.Health.LastProbe.Passed || p.Health.LastProbe.At.IsZero() ||
		!strings.Contains(p.Health.LastProbe.Error, "Unavailable") {
		t.Fatalf("E1 still failing: want ejected with a failed probe, got %+v", p.Health)
	}
	e1.Pass()
	select {
	case ev = <-events:
	case <-time.After(10 * time.Second):
		t.Fatal("no readmission")
	}
	if ev.Endpoint != e1.Addr() || ev.Kind != EndpointReadmitted {
		t.Fatalf("event %+v, want E1 readmitted", ev)
	}
	waitServedBy(t, ctx, gme, "e1", 10*time.Second)
	waitServedBy(t, NewMEContext(ctx, "b"), gme, "e1", 10*time.Second)
	if p, _ := poolOf(gme, e1.Addr()); p.Health.Ejected || !p.Health.LastProbe.Passed || p.Health.LastProbe.Latency <= 0 {
		t.Fatalf("E1 after readmission: %+v", p.Health)
	}
	if !strings.Contains(buf.String(), "endpoint readmitted") {
		t.Fatalf("the readmission was not logged:\n%s", buf.String())
	}
}

func TestHealthDisabled(t *testing.T) {
	e1, e2 := frontedServer(t, "e1"), frontedServer(t, "e2")
	s := fastSettings(nil)
	s.Health.Disabled = true
	gme := newGME(t, options("a", map[string]*multiendpoint.MultiEndpointOptions{
		"a": group(100*time.Millisecond, 0, e1.Addr(), e2.Addr()),
	}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "e1", 10*time.Second)
	if err := e1.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := call(ctx, gme); status.Code(err) != codes.Unavailable {
			t.Fatalf("call: %v, want UNAVAILABLE from E1", err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if p, _ := poolOf(gme, e1.Addr()); !p.Health.Disabled || p.Health.Ejected {
		t.Fatalf("health disabled, yet %+v", p.Health)
	}
	if g := groupOf(gme, "a"); g.Current != e1.Addr() {
		t.Fatalf("current %s, want E1: connectivity alone decides", g.Current)
	}
}

// stallServer's StreamingOutputCall sends its response header at once when the request has
// response parameters, then waits for the caller to give up; without parameters it sends
// nothing.
type stallServer struct {
	testpb.UnimplementedTestServiceServer
}

func (stallServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (stallServer) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	if len(req.ResponseParameters) > 0 {
		if err := stream.SendHeader(metadata.Pairs("x", "y")); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// A deadline that passes after the response header is the backend's slowness: a success. One
// that passes with no answer (unary or stream) makes the endpoint suspect; the probe passes
// (the server answers UNIMPLEMENTED), so it is not ejected.
func TestTimeoutsAreClassifiedByTheHeader(t *testing.T) {
	addr := startGRPCServer(t, func(s *grpc.Server) { testpb.RegisterTestServiceServer(s, stallServer{}) })
	clk := clock.NewFake(time.Now()) // the detector's: how often a timeout may probe again
	s := fastSettings(nil)
	gme := newGMEWith(t, options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, addr)}), s, plumbing{clock: clk})
	client := testpb.NewTestServiceClient(gme)
	stream := func(header bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req := &testpb.StreamingOutputCallRequest{}
		if header {
			req.ResponseParameters = []*testpb.ResponseParameters{{}}
		}
		st, err := client.StreamingOutputCall(ctx, req, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("Recv: %v, want DEADLINE_EXCEEDED", err)
		}
	}
	health := func() PoolHealth { p, _ := poolOf(gme, addr); return p.Health }
	stream(true)
	if h := health(); h.Timeouts != 0 || h.Calls != 1 || h.Suspect {
		t.Fatalf("after a deadline past the header: %+v, want one successful call", h)
	}
	stream(false)
	if h := health(); h.Timeouts != 1 || h.Calls != 1 {
		t.Fatalf("after a deadline with no answer: %+v, want one timeout", h)
	}
	eventually(t, 10*time.Second, "the suspicion probe passes", func() bool { h := health(); return h.LastProbe.Passed && !h.Suspect })
	clk.Advance(gme.settings.Health.ProbeInterval / 10) // the next timeout may probe again
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("UnaryCall: %v, want DEADLINE_EXCEEDED", err)
	}
	if h := health(); h.Timeouts != 2 {
		t.Fatalf("after a unary deadline: %+v, want two timeouts", h)
	}
	eventually(t, 10*time.Second, "the second probe passes", func() bool { h := health(); return !h.Suspect && !h.Ejected })
	if h := health(); h.Ejections != 0 {
		t.Fatalf("a slow endpoint that answers probes was ejected: %+v", h)
	}
}

// startGRPCServer starts a gRPC server on 127.0.0.1:0 with the services register adds.
func startGRPCServer(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// The probes: SpannerProbe passes on spannertest and on the emulator (NOT_FOUND for the
// probe session), and fails through a frontend that fails or hangs every call;
// UnimplementedMethodProbe passes on any gRPC server and fails where nothing answers.
func TestProbes(t *testing.T) {
	srv, db := fixture.StartSpannertest(t)
	fe := spannermetest.NewFrontendTB(t, srv.Addr)
	conn := func(addr string) *grpc.ClientConn { return newPlainConn(t, addr) }
	probe := func(p ProbeFunc, c grpc.ClientConnInterface) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return p(ctx, c)
	}
	if err := probe(SpannerProbe(db), conn(srv.Addr)); err != nil {
		t.Fatalf("SpannerProbe on spannertest: %v", err)
	}
	if err := probe(SpannerProbe(db), conn(fe.Addr())); err != nil {
		t.Fatalf("SpannerProbe through a frontend: %v", err)
	}
	if got := fe.Stats().Methods[methodGetSession].Forwarded; got != 1 {
		t.Fatalf("the frontend forwarded %d GetSession calls, want 1", got)
	}
	if err := fe.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	if err := probe(SpannerProbe(db), conn(fe.Addr())); status.Code(err) != codes.Unavailable {
		t.Fatalf("SpannerProbe through a failing frontend: %v, want UNAVAILABLE", err)
	}
	fe.Hang()
	if err := probe(SpannerProbe(db), conn(fe.Addr())); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("SpannerProbe through a hanging frontend: %v, want DEADLINE_EXCEEDED", err)
	}
	fe.Pass()
	if err := probe(UnimplementedMethodProbe, conn(startServer(t, "x"))); err != nil {
		t.Fatalf("UnimplementedMethodProbe on a TestService: %v", err)
	}
	dead := spannermetest.NewEndpointTB(t, srv.Addr)
	dead.Down()
	if err := probe(UnimplementedMethodProbe, conn(dead.Addr())); err == nil {
		t.Fatal("UnimplementedMethodProbe passed where nothing listens")
	}

	t.Run("emulator", func(t *testing.T) {
		emu := emulator.StartTB(t, emulator.Options{})
		if err := probe(SpannerProbe(emu.DatabasePath()), conn(emu.Addr())); err != nil {
			t.Fatalf("SpannerProbe on the emulator: %v", err)
		}
		fe := spannermetest.NewFrontendTB(t, emu.Addr())
		if err := probe(SpannerProbe(emu.DatabasePath()), conn(fe.Addr())); err != nil {
			t.Fatalf("SpannerProbe on the emulator through a frontend: %v", err)
		}
		fe.Hang()
		if err := probe(SpannerProbe(emu.DatabasePath()), conn(fe.Addr())); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("SpannerProbe through a hanging frontend: %v", err)
		}
	})
}

// The configuration file's settings.health section maps to Settings.Health; a bad value
// names its field and line; a change needs a restart (settings are fixed at construction).
func TestHealthInConfigFile(t *testing.T) {
	const head = "default: g\nmultiEndpoints:\n  g:\n    endpoints: [\"127.0.0.1:1\"]\nsettings:\n  health:\n"
	fc, err := ParseConfig([]byte(head + `    disabled: false
    interval: 5s
    consecutiveFailures: 7
    failurePercentage: 60
    minimumCalls: 30
    baseEjectionTime: 10s
    maxEjectionTime: 2m
    probeTimeout: 1s
    probeInterval: 20s
    resourceExhaustedIsFailure: true
`))
	if err != nil {
		t.Fatal(err)
	}
	want := HealthSettings{Interval: 5 * time.Second, ConsecutiveFailures: 7, FailurePercentage: 60, MinimumCalls: 30,
		BaseEjectionTime: 10 * time.Second, MaxEjectionTime: 2 * time.Minute, ProbeTimeout: time.Second, ProbeInterval: 20 * time.Second,
		ResourceExhaustedIsFailure: true}
	if got := fc.Settings.Health; got.comparable() != want.comparable() || got.Probe != nil {
		t.Fatalf("Settings.Health = %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ body, field string }{
		{"    failurePercentage: 101\n", "settings.health.failurePercentage"},
		{"    probeTimeout: -1s\n", "settings.health.probeTimeout"},
		{"    consecutiveFailures: -2\n", "settings.health.consecutiveFailures"},
		{"    probeIntervall: 1s\n", "settings.health.probeIntervall"},
	} {
		_, err := ParseConfig([]byte(head + tc.body))
		var fe *ConfigFileError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Line != 7 {
			t.Errorf("%q: error %v, want one naming %s at line 7", tc.body, err, tc.field)
		}
	}
	gme := newGME(t, fc.Options, fastSettings(nil))
	if got := restartNeeded(gme, fc); !slices.Contains(got, "settings.health") {
		t.Fatalf("restartNeeded = %v, want settings.health listed", got)
	}
	same := &FileConfig{Options: fc.Options}
	if got := restartNeeded(gme, same); slices.Contains(got, "settings.health") {
		t.Fatalf("restartNeeded = %v for unchanged health settings", got)
	}
}

// Ejection reasons and health event kinds are written as words in JSON and read back.
func TestHealthTextForms(t *testing.T) {
	for _, r := range []EjectionReason{0, ReasonConsecutiveFailures, ReasonFailurePercentage, ReasonTimeouts, ReasonProbeFailed} {
		b, _ := r.MarshalText()
		var got EjectionReason
		if err := got.UnmarshalText(b); err != nil || got != r {
			t.Errorf("EjectionReason %d: text %q read back as %d, %v", r, b, got, err)
		}
	}
	for _, k := range []HealthEventKind{EndpointEjected, EndpointReadmitted} {
		b, _ := k.MarshalText()
		var got HealthEventKind
		if err := got.UnmarshalText(b); err != nil || got != k {
			t.Errorf("HealthEventKind %d: text %q read back as %d, %v", k, b, got, err)
		}
	}
	var r EjectionReason
	if err := r.UnmarshalText([]byte("bad luck")); err == nil {
		t.Error("an unknown reason was read without error")
	}
}

// A stream that never got a stream on the endpoint (every HTTP/2 stream of a saturated pool
// busy, so gRPC held it until its deadline) says nothing about the endpoint: a traffic peak
// beyond the pool's streams must not make a healthy endpoint suspect, probe it and eject it.
func TestStreamsQueuedBehindTheStreamLimitAreNoTimeouts(t *testing.T) {
	// Without affinity gRPC holds a queued stream in NewStream; with it (grpcgcp's
	// interceptor, F28) in the first SendMsg.
	for name, cfg := range map[string]*pb.ApiConfig{"no affinity": NoAffinityConfig(1), "session affinity": SessionAffinityConfig(1)} {
		t.Run(name, func(t *testing.T) { testStreamsQueuedAreNoTimeouts(t, cfg) })
	}
}

// A health probe that waits behind the calls it judges (every stream of the pool busy) until
// its deadline was never sent and decides nothing: an endpoint whose one stream a call holds
// longer than ProbeInterval is probed, the probe finds no free stream, and the endpoint, idle
// but healthy, is not ejected. With or without session affinity (where the stream opens at
// the first SendMsg).
func TestProbeQueuedBehindTheStreamLimitDecidesNothing(t *testing.T) {
	for name, cfg := range map[string]*pb.ApiConfig{"no affinity": NoAffinityConfig(1), "session affinity": SessionAffinityConfig(1)} {
		t.Run(name, func(t *testing.T) {
			addr := startOneStreamServer(t)

			var probes atomic.Int32
			s := fastSettings(nil)
			s.Health.ProbeInterval, s.Health.ProbeTimeout = 200*time.Millisecond, 100*time.Millisecond
			s.Health.Brownout.Disabled = true
			s.Health.Probe = func(ctx context.Context, conn grpc.ClientConnInterface) error {
				probes.Add(1)
				return UnimplementedMethodProbe(ctx, conn)
			}
			o := options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, addr)})
			o.GRPCgcpConfig = cfg
			gme := newGME(t, o, s)
			client := testpb.NewTestServiceClient(gme)

			holdTheOneStream(t, client)
			from := probes.Load()
			ejected := func() bool { p, _ := poolOf(gme, addr); return p.Health.Ejected }
			eventually(t, 20*time.Second, "three probes while the stream is held, or an ejection", func() bool {
				return probes.Load() >= from+3 || ejected()
			})
			if p, _ := poolOf(gme, addr); p.Health.Ejected {
				t.Fatalf("a probe that found no free stream ejected the endpoint: %+v", p.Health)
			}
		})
	}
}

// startOneStreamServer starts a server that allows one concurrent stream per connection and
// answers nothing until its caller gives up (stallServer); it returns its address.
func startOneStreamServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxConcurrentStreams(1))
	testpb.RegisterTestServiceServer(srv, stallServer{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// holdTheOneStream opens a stream that the server answers with its header and then holds
// until the test ends: the one stream of a one-channel pool on startOneStreamServer.
func holdTheOneStream(t *testing.T, client testpb.TestServiceClient) {
	t.Helper()
	hold, cancel := context.WithTimeout(context.Background(), time.Minute) // bounded if the test fails early
	t.Cleanup(cancel)
	held, err := client.StreamingOutputCall(hold, &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{}}}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Header(); err != nil {
		t.Fatal(err)
	}
}

// testStreamsQueuedAreNoTimeouts holds the one stream of a one-channel pool (cfg) and checks
// that the streams queued behind it, which end with DEADLINE_EXCEEDED without reaching the
// server, count for nothing.
func testStreamsQueuedAreNoTimeouts(t *testing.T, cfg *pb.ApiConfig) {
	addr := startOneStreamServer(t)

	o := options("a", map[string]*multiendpoint.MultiEndpointOptions{"a": group(0, 0, addr)})
	o.GRPCgcpConfig = cfg // one channel: its one stream is the pool's limit
	gme := newGME(t, o, fastSettings(nil))
	client := testpb.NewTestServiceClient(gme)
	health := func() PoolHealth { p, _ := poolOf(gme, addr); return p.Health }

	holdTheOneStream(t, client) // answered: its header arrives
	// Streams queued behind it end with DEADLINE_EXCEEDED without reaching the server.
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		st, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("queued stream: %v, want DEADLINE_EXCEEDED", err)
		}
	}
	if h := health(); h.Timeouts != 0 || h.Suspect || h.Ejected {
		t.Fatalf("streams that never reached the endpoint counted against it: %+v", h)
	}
}
