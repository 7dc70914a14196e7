package spannermetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// testBackend is an in-process gRPC backend serving grpc.testing.TestService
// on 127.0.0.1:0:
//   - UnaryCall echoes the payload, the request metadata "x-echo" as response
//     header "x-header" and trailer "x-trailer" (also "-bin"), the time left to
//     its deadline in the trailer "x-deadline-ms", and returns ResponseStatus
//     (with a Payload detail) when set, before sending any header;
//   - StreamingOutputCall sends one response per ResponseParameters, of that
//     size, then ResponseStatus;
//   - StreamingInputCall answers the sum of the payload sizes;
//   - FullDuplexCall echoes each payload until the client half-closes.
type testBackend struct {
	testpb.UnimplementedTestServiceServer
	addr string

	calls     atomic.Int64 // calls that reached the backend
	cancelled atomic.Int64 // calls whose context was cancelled while the handler ran
}

func startTestBackend(tb testing.TB) *testBackend {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	b := &testBackend{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return b
}

func echoStatus(s *testpb.EchoStatus) error {
	if s == nil || codes.Code(s.Code) == codes.OK {
		return nil
	}
	st, err := status.New(codes.Code(s.Code), s.Message).WithDetails(&testpb.Payload{Body: []byte("detail")})
	if err != nil {
		return err
	}
	return st.Err()
}

func (b *testBackend) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	b.calls.Add(1)
	if err := echoStatus(req.ResponseStatus); err != nil {
		return nil, err // no header: a trailers-only response
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-echo"); len(v) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-header", v[0], "x-header-bin", v[0]))
	}
	tr := metadata.Pairs("x-trailer", "t-"+firstOf(md.Get("x-echo")))
	if dl, ok := ctx.Deadline(); ok {
		tr.Set("x-deadline-ms", strconv.FormatInt(time.Until(dl).Milliseconds(), 10))
	}
	_ = grpc.SetTrailer(ctx, tr)
	return &testpb.SimpleResponse{Payload: req.Payload}, nil
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func (b *testBackend) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	b.calls.Add(1)
	_ = s.SendHeader(metadata.Pairs("x-header", "stream"))
	for _, p := range req.ResponseParameters {
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.Size)}}); err != nil {
			return err
		}
	}
	s.SetTrailer(metadata.Pairs("x-trailer", "stream"))
	return echoStatus(req.ResponseStatus)
}

func (b *testBackend) StreamingInputCall(s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	b.calls.Add(1)
	var sum int32
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: sum})
		}
		if err != nil {
			return err
		}
		sum += int32(len(req.GetPayload().GetBody()))
	}
}

func (b *testBackend) FullDuplexCall(s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	b.calls.Add(1)
	defer func() {
		if errors.Is(s.Context().Err(), context.Canceled) {
			b.cancelled.Add(1)
		}
	}()
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := echoStatus(req.ResponseStatus); err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: req.Payload}); err != nil {
			return err
		}
	}
}

// testClient dials addr (plaintext) and closes the connection at cleanup.
func testClient(tb testing.TB, addr string) testpb.TestServiceClient {
	tb.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// unary makes one UnaryCall with body, bounded by waitTimeout.
func unary(tc testpb.TestServiceClient, body string) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}})
	if err != nil {
		return err
	}
	if got := string(resp.GetPayload().GetBody()); got != body {
		return fmt.Errorf("echo %q, want %q", got, body)
	}
	return nil
}

// openDuplex starts a FullDuplexCall on ctx and checks one echo round trip.
func openDuplex(tb testing.TB, ctx context.Context, tc testpb.TestServiceClient) grpc.BidiStreamingClient[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse] {
	tb.Helper()
	s, err := tc.FullDuplexCall(ctx)
	if err != nil {
		tb.Fatalf("FullDuplexCall: %v", err)
	}
	duplexRoundTrip(tb, s, "hello")
	return s
}

func duplexRoundTrip(tb testing.TB, s grpc.BidiStreamingClient[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse], body string) {
	tb.Helper()
	if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(body)}}); err != nil {
		tb.Fatalf("Send: %v", err)
	}
	resp, err := s.Recv()
	if err != nil {
		tb.Fatalf("Recv: %v", err)
	}
	if got := string(resp.GetPayload().GetBody()); got != body {
		tb.Fatalf("echo %q, want %q", got, body)
	}
}

// wantCode fails tb unless err is a status error with code.
func wantCode(tb testing.TB, what string, err error, code codes.Code) {
	tb.Helper()
	if got := status.Code(err); got != code {
		tb.Fatalf("%s: error %v (code %v), want code %v", what, err, got, code)
	}
}

const unaryMethod = "/grpc.testing.TestService/UnaryCall"

func TestFrontendModeString(t *testing.T) {
	for m, want := range map[FrontendMode]string{
		FrontendPass: "pass", FrontendFailAll: "fail-all", FrontendFailFraction: "fail-fraction",
		FrontendHang: "hang", FrontendClosed: "closed", FrontendFailMethods: "fail-methods", FrontendMode(42): "FrontendMode(42)",
	} {
		if got := m.String(); got != want {
			t.Errorf("FrontendMode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
}

func TestNewFrontendRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend string
		opts    []FrontendOption
	}{
		{"empty backend", "", nil},
		{"no port", "127.0.0.1", nil},
		{"negative age", "127.0.0.1:1", []FrontendOption{WithMaxConnectionAge(-time.Second, 0)}},
		{"negative grace", "127.0.0.1:1", []FrontendOption{WithMaxConnectionAge(time.Second, -1)}},
		{"recording limit 0", "127.0.0.1:1", []FrontendOption{WithRequestRecording(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewFrontend(tc.backend, tc.opts...)
			if err == nil {
				_ = f.Close()
				t.Fatal("NewFrontend succeeded, want an error")
			}
		})
	}
}

func TestFrontendRejectsBadFaultsAndKeepsMode(t *testing.T) {
	f := NewFrontendTB(t, "127.0.0.1:1")
	if err := f.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"FailAll(OK)":            f.FailAll(codes.OK),
		"FailAll(17)":            f.FailAll(codes.Code(17)),
		"FailFraction(-0.1)":     f.FailFraction(-0.1, codes.Unavailable),
		"FailFraction(1.5)":      f.FailFraction(1.5, codes.Unavailable),
		"FailFraction(NaN)":      f.FailFraction(math.NaN(), codes.Unavailable),
		"FailFraction(0.5, OK)":  f.FailFraction(0.5, codes.OK),
		"FailFraction(0.5, 999)": f.FailFraction(0.5, codes.Code(999)),
		"FailMethods()":          f.FailMethods(codes.Unavailable),
		"FailMethods(OK)":        f.FailMethods(codes.OK, "/s/m"),
		"FailMethods(no slash)":  f.FailMethods(codes.Unavailable, "Commit"),
		"FailMethods(/s/)":       f.FailMethods(codes.Unavailable, "/s/"),
	} {
		if err == nil {
			t.Errorf("%s returned nil, want an error", name)
		}
	}
	if m := f.Mode(); m != FrontendFailAll {
		t.Errorf("Mode() = %v after rejected changes, want fail-all", m)
	}
}

func TestFrontendForwardsUnaryWithMetadata(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	if f.Backend() != b.addr {
		t.Errorf("Backend() = %q, want %q", f.Backend(), b.addr)
	}
	tc := testClient(t, f.Addr())

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-echo", "v1")
	var header, trailer metadata.MD
	resp, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hello")}},
		grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.GetPayload().GetBody()); got != "hello" {
		t.Errorf("payload %q, want hello", got)
	}
	if got := header.Get("x-header"); len(got) != 1 || got[0] != "v1" {
		t.Errorf("header x-header = %q, want [v1]", got)
	}
	if got := header.Get("x-header-bin"); len(got) != 1 || got[0] != "v1" {
		t.Errorf("header x-header-bin = %q, want [v1]", got)
	}
	if got := trailer.Get("x-trailer"); len(got) != 1 || got[0] != "t-v1" {
		t.Errorf("trailer x-trailer = %q, want [t-v1]", got)
	}
	// The deadline reaches the backend: at most waitTimeout, and not lost.
	ms, err := strconv.ParseInt(firstOf(trailer.Get("x-deadline-ms")), 10, 64)
	if err != nil || ms <= 0 || ms > waitTimeout.Milliseconds() {
		t.Errorf("backend saw deadline in %q ms (%v), want within (0, %d]", trailer.Get("x-deadline-ms"), err, waitTimeout.Milliseconds())
	}

	// An empty message passes too.
	if _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("empty request: %v", err)
	}

	st := f.Stats()
	want := CallStats{Received: 2, Forwarded: 2}
	if st.CallStats != want || st.Methods[unaryMethod] != want || len(st.Methods) != 1 {
		t.Errorf("Stats() = %+v, want %+v for %s only", st, want, unaryMethod)
	}
	if st.Accepted != 1 || st.Active != 1 {
		t.Errorf("Stats() connections accepted %d active %d, want 1 and 1", st.Accepted, st.Active)
	}
}

func TestFrontendForwardsBackendStatusUnchanged(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	// Unary: the backend fails before any header (trailers only).
	var header metadata.MD
	_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{
		Code: int32(codes.FailedPrecondition), Message: "backend says no"}}, grpc.Header(&header))
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || st.Message() != "backend says no" {
		t.Errorf("status %v, want FailedPrecondition \"backend says no\"", st)
	}
	if d := st.Details(); len(d) != 1 || !bytes.Equal(d[0].(*testpb.Payload).GetBody(), []byte("detail")) {
		t.Errorf("details %v, want one Payload \"detail\"", d)
	}
	if header != nil {
		t.Errorf("header %v for a trailers-only answer, want none", header)
	}

	// Server streaming: messages, header and trailer, then an error status.
	s, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{Size: 10}, {Size: 100000}, {Size: 0}},
		ResponseStatus:     &testpb.EchoStatus{Code: int32(codes.Aborted), Message: "retry me"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for {
		resp, err := s.Recv()
		if err != nil {
			wantCode(t, "StreamingOutputCall", err, codes.Aborted)
			break
		}
		sizes = append(sizes, len(resp.GetPayload().GetBody()))
	}
	if fmt.Sprint(sizes) != "[10 100000 0]" {
		t.Errorf("response sizes %v, want [10 100000 0]", sizes)
	}
	if h, err := s.Header(); err != nil || firstOf(h.Get("x-header")) != "stream" {
		t.Errorf("stream header %v, %v; want x-header: stream", h, err)
	}
	if got := firstOf(s.Trailer().Get("x-trailer")); got != "stream" {
		t.Errorf("stream trailer x-trailer %q, want stream", got)
	}
	if got := f.Stats().Forwarded; got != 2 {
		t.Errorf("Forwarded = %d, want 2 (backend errors are forwarded calls)", got)
	}
}

func TestFrontendForwardsStreams(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	// Client streaming.
	cs, err := tc.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 1000, 300000} {
		if err := cs.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cs.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.AggregatedPayloadSize != 301001 {
		t.Errorf("aggregated size %d, want 301001", resp.AggregatedPayloadSize)
	}

	// Bidirectional: interleaved round trips, then a clean end.
	d := openDuplex(t, ctx, tc)
	for i := range 20 {
		duplexRoundTrip(t, d, strconv.Itoa(i))
	}
	if err := d.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv after CloseSend = %v, want io.EOF", err)
	}

	st := f.Stats()
	for _, m := range []string{"/grpc.testing.TestService/StreamingInputCall", "/grpc.testing.TestService/FullDuplexCall"} {
		if got := st.Methods[m]; got != (CallStats{Received: 1, Forwarded: 1}) {
			t.Errorf("Stats().Methods[%s] = %+v, want one call forwarded", m, got)
		}
	}
}

func TestFrontendCancelsBackendCallWhenCallerGivesUp(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	openDuplex(t, ctx, tc)
	cancel()
	waitFor(t, "the backend call to be cancelled", func() bool { return b.cancelled.Load() == 1 })
}

func TestFrontendFailAll(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	if err := unary(tc, "warm"); err != nil {
		t.Fatal(err)
	}
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
		if err := f.FailAll(code); err != nil {
			t.Fatal(err)
		}
		if m := f.Mode(); m != FrontendFailAll {
			t.Errorf("Mode() = %v, want fail-all", m)
		}
		for range 5 {
			wantCode(t, "unary", unary(tc, "x"), code)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		s, err := tc.FullDuplexCall(ctx)
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, "FullDuplexCall", err, code)
		cancel()
	}
	f.Pass()
	if err := unary(tc, "again"); err != nil {
		t.Fatalf("after Pass: %v", err)
	}
	st := f.Stats()
	if st.Received != 14 || st.Forwarded != 2 || st.Failed != 12 || st.Hung != 0 {
		t.Errorf("Stats() = %+v, want 14 received, 2 forwarded, 12 failed", st.CallStats)
	}
	if got := b.calls.Load(); got != 2 {
		t.Errorf("backend saw %d calls, want 2 (failed calls never reach it)", got)
	}
	if st.Accepted != 1 {
		t.Errorf("Accepted = %d, want 1: failing calls keep the connection up", st.Accepted)
	}
	f.ResetStats()
	if st := f.Stats(); st.CallStats != (CallStats{}) || len(st.Methods) != 0 || st.Accepted != 1 {
		t.Errorf("Stats() after ResetStats = %+v, want zero call counters, connections kept", st)
	}
}

// failPattern makes n sequential calls through a new frontend seeded with
// seed after FailFraction(fraction), and returns which failed.
func failPattern(t *testing.T, backend string, seed int64, fraction float64, n int) []bool {
	t.Helper()
	f := NewFrontendTB(t, backend, WithSeed(seed))
	tc := testClient(t, f.Addr())
	if err := f.FailFraction(fraction, codes.ResourceExhausted); err != nil {
		t.Fatal(err)
	}
	out := make([]bool, n)
	for i := range out {
		err := unary(tc, "x")
		switch status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted:
			out[i] = true
		default:
			t.Fatalf("call %d: %v", i, err)
		}
	}
	var failedCalls int64
	for _, fail := range out {
		if fail {
			failedCalls++
		}
	}
	if st := f.Stats(); st.Failed != failedCalls || st.Forwarded != int64(n)-failedCalls {
		t.Errorf("Stats() = %+v, want %d failed and %d forwarded", st.CallStats, failedCalls, int64(n)-failedCalls)
	}
	return out
}

func TestFrontendFailFractionSeeded(t *testing.T) {
	b := startTestBackend(t)
	const n, fraction = 1000, 0.3
	first := failPattern(t, b.addr, 42, fraction, n)
	var failedCalls int
	for _, fail := range first {
		if fail {
			failedCalls++
		}
	}
	// Binomial(1000, 0.3): mean 300, standard deviation sqrt(1000·0.3·0.7)
	// ≈ 14.5. The seed makes the count fixed; ±5 standard deviations (a
	// chance below 1e-6 for a fair generator) checks it is a fair one.
	if failedCalls < 228 || failedCalls > 372 {
		t.Errorf("%d of %d calls failed at fraction %v, want 300 ± 72", failedCalls, n, fraction)
	}
	// The same seed gives the same calls failing.
	if again := failPattern(t, b.addr, 42, fraction, n); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Error("the same seed failed different calls")
	}
	// Edges: 0 forwards everything, 1 fails everything.
	for _, fail := range failPattern(t, b.addr, 7, 0, 50) {
		if fail {
			t.Fatal("FailFraction(0) failed a call")
		}
	}
	for _, fail := range failPattern(t, b.addr, 7, 1, 50) {
		if !fail {
			t.Fatal("FailFraction(1) forwarded a call")
		}
	}
}

func TestFrontendHangHoldsUntilCallerGivesUp(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	if err := unary(tc, "warm"); err != nil {
		t.Fatal(err)
	}
	f.Hang()
	if m := f.Mode(); m != FrontendHang {
		t.Errorf("Mode() = %v, want hang", m)
	}

	// A call with a deadline ends at its deadline, with no header.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	var header metadata.MD
	_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header))
	cancel()
	wantCode(t, "held unary call", err, codes.DeadlineExceeded)
	if header != nil {
		t.Errorf("held call got header %v, want none", header)
	}

	// A held stream without deadline stays held across Pass, which only
	// forwards new calls; its caller's cancellation ends it.
	held, cancelHeld := context.WithCancel(context.Background())
	defer cancelHeld()
	s, err := tc.FullDuplexCall(held)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
		t.Fatal(err)
	}
	recvErr := make(chan error, 1)
	go func() {
		_, err := s.Recv()
		recvErr <- err
	}()
	waitFor(t, "the stream to be held", func() bool { return f.Stats().Hung == 2 })
	f.Pass()
	if err := unary(tc, "new"); err != nil {
		t.Fatalf("new call after Pass: %v", err)
	}
	select {
	case err := <-recvErr:
		t.Fatalf("held stream answered (%v) after Pass; want it held", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancelHeld()
	select {
	case err := <-recvErr:
		wantCode(t, "held stream", err, codes.Canceled)
	case <-time.After(waitTimeout):
		t.Fatal("held stream still open after its caller cancelled it")
	}
	if got := b.calls.Load(); got != 2 {
		t.Errorf("backend saw %d calls, want 2 (held calls never reach it)", got)
	}
	if st := f.Stats(); st.Received != 4 || st.Hung != 2 || st.Forwarded != 2 {
		t.Errorf("Stats() = %+v, want 4 received, 2 hung, 2 forwarded", st.CallStats)
	}
}

func TestFrontendCloseEndsHeldCalls(t *testing.T) {
	b := startTestBackend(t)
	f, err := NewFrontend(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	tc := testClient(t, f.Addr())
	f.Hang()
	errs := make(chan error, 2)
	go func() { errs <- unary(tc, "held") }()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		s, err := tc.FullDuplexCall(ctx)
		if err == nil {
			_, err = s.Recv()
		}
		errs <- err
	}()
	waitFor(t, "two held calls", func() bool { return f.Stats().Hung == 2 })

	closed := make(chan struct{})
	go func() {
		_ = f.Close()
		_ = f.Close() // idempotent
		close(closed)
	}()
	for range 2 {
		wantCode(t, "held call at Close", <-errs, codes.Unavailable) // each call is bounded by waitTimeout
	}
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal("Close did not return")
	}
	if m := f.Mode(); m != FrontendClosed {
		t.Errorf("Mode() after Close = %v, want closed", m)
	}
	// Setters do nothing after Close.
	f.Pass()
	if err := f.FailAll(codes.Unavailable); err != nil {
		t.Errorf("FailAll after Close: %v", err)
	}
	f.SetLatency(time.Second)
	f.DropConnections()
	if m, l := f.Mode(), f.Latency(); m != FrontendClosed || l != 0 {
		t.Errorf("after Close and setters: Mode() %v, Latency() %v; want closed, 0", m, l)
	}
	if c, err := net.DialTimeout("tcp4", f.Addr(), waitTimeout); err == nil {
		_ = c.Close()
		t.Error("dial after Close succeeded, want refused")
	}
}

func TestFrontendLatency(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	if err := unary(tc, "warm"); err != nil {
		t.Fatal(err)
	}
	const latency = 150 * time.Millisecond
	f.SetLatency(latency)
	if got := f.Latency(); got != latency {
		t.Errorf("Latency() = %v, want %v", got, latency)
	}
	// Lower bounds only: the machine may be slow, never fast.
	start := time.Now()
	if err := unary(tc, "slow"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < latency {
		t.Errorf("forwarded call took %v, want >= %v", d, latency)
	}
	// Latency composes with the mode, which keeps it.
	if err := f.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	wantCode(t, "failed call", unary(tc, "x"), codes.Unavailable)
	if d := time.Since(start); d < latency {
		t.Errorf("failed call took %v, want >= %v", d, latency)
	}
	// A caller that gives up during the latency is counted as received only.
	f.Pass()
	f.SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{})
	cancel()
	wantCode(t, "call shorter than the latency", err, codes.DeadlineExceeded)
	waitFor(t, "the abandoned call to be counted", func() bool { return f.Stats().Received == 4 })
	if st := f.Stats(); st.Forwarded != 2 || st.Failed != 1 || st.Hung != 0 {
		t.Errorf("Stats() = %+v, want 2 forwarded, 1 failed", st.CallStats)
	}
	f.SetLatency(-1)
	if got := f.Latency(); got != 0 {
		t.Errorf("Latency() after SetLatency(-1) = %v, want 0", got)
	}
}

func TestFrontendMaxConcurrentStreams(t *testing.T) {
	b := startTestBackend(t)
	const limit = GoogleFrontendMaxConcurrentStreams
	f := NewFrontendTB(t, b.addr, WithMaxConcurrentStreams(limit))
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()

	// Fill the connection with open streams.
	cancels := make([]context.CancelFunc, limit)
	for i := range cancels {
		sctx, c := context.WithCancel(ctx)
		cancels[i] = c
		openDuplex(t, sctx, tc)
	}
	// One more on the same connection waits, on the client, for a stream.
	extra := make(chan error, 1)
	go func() {
		s, err := tc.FullDuplexCall(ctx)
		if err == nil {
			err = s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("101")}})
			if errors.Is(err, io.EOF) { // the call has ended: Recv has its status
				err = nil
			}
		}
		if err == nil {
			_, err = s.Recv()
		}
		extra <- err
	}()
	select {
	case err := <-extra:
		t.Fatalf("stream %d answered (%v) while %d were open; want it to wait", limit+1, err, limit)
	case <-time.After(200 * time.Millisecond):
	}
	if got := f.Stats().Received; got != limit {
		t.Errorf("Received = %d with stream %d waiting, want %d", got, limit+1, limit)
	}
	cancels[0]() // one stream ends: the waiting one starts
	select {
	case err := <-extra:
		if err != nil {
			t.Fatalf("stream %d: %v", limit+1, err)
		}
	case <-ctx.Done():
		t.Fatalf("stream %d still waiting after a stream ended", limit+1)
	}
	if st := f.Stats(); st.Received != limit+1 || st.Accepted != 1 {
		t.Errorf("Stats(): %d received over %d connections, want %d over 1", st.Received, st.Accepted, limit+1)
	}
	for _, c := range cancels {
		c()
	}
}

func TestFrontendMaxConnectionAgeReconnectsWithoutFailing(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr, WithMaxConnectionAge(100*time.Millisecond, time.Minute))
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()

	// A stream open across the GOAWAY keeps working within the grace.
	long := openDuplex(t, ctx, tc)
	for i := 0; f.Stats().Accepted < 3; i++ {
		if ctx.Err() != nil {
			t.Fatalf("only %d connections accepted before the deadline", f.Stats().Accepted)
		}
		if err := unary(tc, strconv.Itoa(i)); err != nil {
			t.Fatalf("call %d failed across connection ageing: %v", i, err)
		}
	}
	duplexRoundTrip(t, long, "still here")
	if err := long.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := long.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("long stream ended with %v, want io.EOF", err)
	}
}

func TestFrontendDropConnections(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s := openDuplex(t, ctx, tc)
	f.Hang()
	heldErr := make(chan error, 1)
	go func() { heldErr <- unary(tc, "held") }()
	waitFor(t, "a held call", func() bool { return f.Stats().Hung == 1 })

	f.DropConnections()
	_, err := s.Recv()
	wantCode(t, "stream on a dropped connection", err, codes.Unavailable)
	wantCode(t, "held call on a dropped connection", <-heldErr, codes.Unavailable)
	waitFor(t, "Active == 0", func() bool { return f.Stats().Active == 0 })
	if f.Mode() != FrontendHang {
		t.Errorf("Mode() = %v after DropConnections, want hang (kept)", f.Mode())
	}
	f.Pass()
	if err := unary(tc, "after"); err != nil { // the client reconnects
		t.Fatal(err)
	}
	if st := f.Stats(); st.Accepted != 2 || st.Active != 1 {
		t.Errorf("Stats() connections accepted %d active %d, want 2 and 1", st.Accepted, st.Active)
	}
}

func TestFrontendBackendEndsStreamWhileCallerSends(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s := openDuplex(t, ctx, tc)
	// The backend fails the call; the caller has not half-closed and keeps
	// sending until it learns the status.
	if err := s.Send(&testpb.StreamingOutputCallRequest{ResponseStatus: &testpb.EchoStatus{
		Code: int32(codes.OutOfRange), Message: "enough"}}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 1000)}}); err != nil {
			break // io.EOF: the call has ended
		}
	}
	_, err := s.Recv()
	if st := status.Convert(err); st.Code() != codes.OutOfRange || st.Message() != "enough" {
		t.Errorf("status %v, want OutOfRange \"enough\"", st)
	}
	// A new call on the same connection works.
	if err := unary(tc, "next"); err != nil {
		t.Fatal(err)
	}
}

func TestFrontendCompressedCalls(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	body := bytes.Repeat([]byte("compressible "), 10000)
	resp, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}, grpc.UseCompressor(gzip.Name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(resp.GetPayload().GetBody(), body) {
		t.Error("gzip-compressed call: echo differs")
	}
}

func TestContentSubtype(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"application/grpc"}, ""},
		{[]string{"application/grpc+proto"}, "proto"},
		{[]string{"application/grpc+json"}, "json"},
		{[]string{"application/grpc;json"}, "json"},
		{[]string{"application/grpcx"}, ""},
		{[]string{"text/plain"}, ""},
	} {
		if got := contentSubtype(tc.in); got != tc.want {
			t.Errorf("contentSubtype(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFrontendBackendDown(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there
	f := NewFrontendTB(t, addr)
	wantCode(t, "call to an unreachable backend", unary(testClient(t, f.Addr()), "x"), codes.Unavailable)
}

// TestFrontendModeChangesUnderLoad switches modes while unary and streaming
// calls run; every call must end as one of the modes says, and the counters
// must add up.
func TestFrontendModeChangesUnderLoad(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr, WithSeed(1))
	tc := testClient(t, f.Addr())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, bad atomic.Int64
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				var err error
				if w%2 == 0 {
					_, err = tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("u")}})
				} else {
					var s grpc.BidiStreamingClient[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]
					s, err = tc.FullDuplexCall(ctx)
					if err == nil {
						err = s.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("d")}})
						if errors.Is(err, io.EOF) { // the call has ended: Recv has its status
							err = nil
						}
					}
					if err == nil {
						var resp *testpb.StreamingOutputCallResponse
						resp, err = s.Recv()
						if err == nil && string(resp.GetPayload().GetBody()) != "d" {
							err = fmt.Errorf("echo %q", resp.GetPayload().GetBody())
						}
					}
				}
				cancel()
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded:
				default:
					bad.Add(1)
					t.Errorf("worker %d call %d: unexpected %v", w, i, err)
				}
			}
		})
	}
	switches := []func(){
		f.Pass,
		func() { _ = f.FailAll(codes.Unavailable) },
		func() { _ = f.FailFraction(0.5, codes.ResourceExhausted) },
		f.Hang,
		func() { f.SetLatency(5 * time.Millisecond) },
		func() { f.SetLatency(0) },
	}
	for i := range 60 {
		switches[i%len(switches)]()
		before := f.Stats().Received
		waitFor(t, "calls started under the new mode", func() bool { return f.Stats().Received > before })
	}
	f.Pass()
	close(stop)
	wg.Wait()

	st := f.Stats()
	if ok.Load() == 0 {
		t.Error("no call succeeded")
	}
	if sum := st.Forwarded + st.Failed + st.Hung; sum > st.Received {
		t.Errorf("Stats() = %+v: more outcomes than calls", st.CallStats)
	}
	if got := b.calls.Load(); got > st.Forwarded || ok.Load() > got {
		t.Errorf("%d calls succeeded, backend saw %d, %d forwarded: want succeeded <= backend <= forwarded", ok.Load(), got, st.Forwarded)
	}
	if st.Failed == 0 || st.Hung == 0 {
		t.Errorf("Stats() = %+v: want some failed and some hung calls", st.CallStats)
	}
	var sum CallStats
	for _, c := range st.Methods {
		sum.Received += c.Received
		sum.Forwarded += c.Forwarded
		sum.Failed += c.Failed
		sum.Hung += c.Hung
	}
	if sum != st.CallStats {
		t.Errorf("per-method counters add up to %+v, totals are %+v", sum, st.CallStats)
	}
}

// TestFrontendSpannerQuery runs queries through the real Spanner client and
// a frontend in front of spannertest.
func TestFrontendSpannerQuery(t *testing.T) {
	srv, db := fixture.StartSpannertest(t)
	f := NewFrontendTB(t, srv.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()
	client, err := fixture.NewClient(ctx, f.Addr(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Apply(ctx, []*spanner.Mutation{
		spanner.Insert("Accounts", []string{"AccountId", "Region", "Balance"}, []any{"a1", "eu", int64(7)}),
	}); err != nil {
		t.Fatal(err)
	}
	query := func() (int64, error) {
		it := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT Balance FROM Accounts WHERE AccountId = 'a1'"})
		defer it.Stop()
		row, err := it.Next()
		if err != nil {
			return 0, err
		}
		var balance int64
		if err := row.Columns(&balance); err != nil {
			return 0, err
		}
		if _, err := it.Next(); !errors.Is(err, iterator.Done) {
			return 0, fmt.Errorf("second row: %v", err)
		}
		return balance, nil
	}
	if balance, err := query(); err != nil || balance != 7 {
		t.Fatalf("query = %d, %v; want 7", balance, err)
	}
	const execute = "/google.spanner.v1.Spanner/ExecuteStreamingSql"
	if got := f.Stats().Methods[execute].Forwarded; got != 1 {
		t.Errorf("%s forwarded %d times, want 1", execute, got)
	}

	// An injected error reaches the application through the Spanner client
	// (PermissionDenied is not retried).
	if err := f.FailAll(codes.PermissionDenied); err != nil {
		t.Fatal(err)
	}
	if _, err := query(); spanner.ErrCode(err) != codes.PermissionDenied {
		t.Fatalf("query under FailAll(PermissionDenied) = %v, want PermissionDenied", err)
	}
	f.Pass()
	if balance, err := query(); err != nil || balance != 7 {
		t.Fatalf("query after Pass = %d, %v; want 7", balance, err)
	}
	if got := f.Stats().Methods[execute]; got.Forwarded != 2 || got.Failed != 1 {
		t.Errorf("%s counters %+v, want 2 forwarded and 1 failed", execute, got)
	}
}

func TestFrontendBehindEndpoint(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	e := NewEndpointTB(t, f.Addr())
	tc := testClient(t, e.Addr()) // client → Endpoint → Frontend → backend
	if err := unary(tc, "through both"); err != nil {
		t.Fatal(err)
	}
	if err := f.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "service fault behind a network path", unary(tc, "x"), codes.Unavailable)
	if st := e.Stats(); st.Accepted != 1 || st.BytesFromBackend == 0 {
		t.Errorf("Endpoint Stats() = %+v, want one connection that carried answers", st)
	}
	if st := f.Stats(); st.Forwarded != 1 || st.Failed != 1 {
		t.Errorf("Frontend Stats() = %+v, want 1 forwarded and 1 failed", st.CallStats)
	}
}

func TestFrontendDropSomeConnections(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	var clients []testpb.TestServiceClient
	for range 4 {
		clients = append(clients, testClient(t, f.Addr()))
	}
	for _, tc := range clients {
		if err := unary(tc, "first"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "4 connections", func() bool { return f.Stats().Active == 4 })
	if n := f.DropSomeConnections(0); n != 0 {
		t.Fatalf("DropSomeConnections(0) = %d, want 0", n)
	}
	if n := f.DropSomeConnections(2); n != 2 {
		t.Fatalf("DropSomeConnections(2) = %d, want 2", n)
	}
	waitFor(t, "2 connections left", func() bool { return f.Stats().Active == 2 })
	if n := f.DropSomeConnections(5); n != 2 {
		t.Fatalf("DropSomeConnections(5) with 2 left = %d, want 2", n)
	}
	waitFor(t, "no connection left", func() bool { return f.Stats().Active == 0 })
}

// FailMethods fails the calls to the named methods only; calls to every other method are
// forwarded, on the same connection.
func TestFrontendFailMethods(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	if err := f.FailMethods(codes.Unavailable, "/grpc.testing.TestService/UnaryCall"); err != nil {
		t.Fatal(err)
	}
	if m := f.Mode(); m != FrontendFailMethods {
		t.Errorf("Mode() = %v, want fail-methods", m)
	}
	for range 3 {
		wantCode(t, "unary", unary(tc, "x"), codes.Unavailable)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		s, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{}}})
		if err == nil {
			_, err = s.Recv()
		}
		cancel()
		if err != nil {
			t.Fatalf("a call to another method: %v, want it forwarded", err)
		}
	}
	st := f.Stats()
	if u, s := st.Methods["/grpc.testing.TestService/UnaryCall"], st.Methods["/grpc.testing.TestService/StreamingOutputCall"]; u.Failed != 3 || u.Forwarded != 0 || s.Forwarded != 3 || s.Failed != 0 {
		t.Errorf("Stats: UnaryCall %+v, StreamingOutputCall %+v", u, s)
	}
	if st.Accepted != 1 {
		t.Errorf("Accepted = %d, want 1: the connection stays up", st.Accepted)
	}
}

// With WithRequestRecording the frontend keeps every request message it forwards, in order,
// up to the limit: unary requests and each message of a client stream; calls it fails send
// none; ResetStats forgets them. Without it, Requests is nil.
func TestFrontendRecordsRequests(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr, WithRequestRecording(4))
	plain := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	if _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("one")}}); err != nil {
		t.Fatal(err)
	}
	cs, err := tc.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"two", "three"} {
		if err := cs.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte(body)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if err := f.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("failed")}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("call during FailAll: %v", err)
	}
	f.Pass()
	for _, body := range []string{"four", "five"} { // the limit keeps "four" only
		if _, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}}); err != nil {
			t.Fatal(err)
		}
	}

	var got []string
	for _, r := range f.Requests() {
		var body []byte
		switch r.Method {
		case "/grpc.testing.TestService/UnaryCall":
			var m testpb.SimpleRequest
			if err := proto.Unmarshal(r.Message, &m); err != nil {
				t.Fatal(err)
			}
			body = m.GetPayload().GetBody()
		case "/grpc.testing.TestService/StreamingInputCall":
			var m testpb.StreamingInputCallRequest
			if err := proto.Unmarshal(r.Message, &m); err != nil {
				t.Fatal(err)
			}
			body = m.GetPayload().GetBody()
		default:
			t.Fatalf("recorded method %q", r.Method)
		}
		got = append(got, r.Method[strings.LastIndex(r.Method, "/")+1:]+":"+string(body))
	}
	want := []string{"UnaryCall:one", "StreamingInputCall:two", "StreamingInputCall:three", "UnaryCall:four"}
	if !slices.Equal(got, want) {
		t.Errorf("recorded %q, want %q", got, want)
	}
	mine := f.Requests()
	first := bytes.Clone(mine[0].Message)
	mine[0].Message[0] ^= 0xff // the caller's copy
	if again := f.Requests(); !bytes.Equal(again[0].Message, first) {
		t.Errorf("modifying a returned message changed the frontend's record")
	}
	f.ResetStats()
	if r := f.Requests(); r != nil {
		t.Errorf("after ResetStats: %d requests", len(r))
	}
	if _, err := testClient(t, plain.Addr()).UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if r := plain.Requests(); r != nil {
		t.Errorf("a frontend without WithRequestRecording recorded %d requests", len(r))
	}
}
