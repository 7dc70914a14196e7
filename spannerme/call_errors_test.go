package spannerme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// failFastBound is how soon a call on a group that cannot connect for a reason retrying
// does not fix must fail, from the client's construction. On loopback the first TLS
// handshake fails within milliseconds; the bound leaves room for a loaded machine.
const failFastBound = 5 * time.Second

var tlsDial = grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{ServerName: "spanner.googleapis.com"}))

// wantNamedTLSFailure checks that err is the fail-fast error of a TLS slip: not retryable
// (FAILED_PRECONDITION), naming the endpoint, the group and the kind tls.
func wantNamedTLSFailure(t *testing.T, what string, err error, took time.Duration, endpoint, group string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	t.Logf("%s failed after %v: %v", what, took, err)
	// A gRPC status or the Spanner client's error (whose description is unquoted).
	code, msg := spanner.ErrCode(err), spanner.ErrDesc(err)
	if code != codes.FailedPrecondition || !strings.Contains(msg, "endpoint "+endpoint+": tls: ") || !strings.Contains(msg, `group "`+group+`"`) {
		t.Errorf("%s: %v (code %v); want FAILED_PRECONDITION naming endpoint %s, group %q and tls", what, err, code, endpoint, group)
	}
	if took > failFastBound {
		t.Errorf("%s: failed after %v, want within %v", what, took, failFastBound)
	}
}

// A GCPMultiEndpoint that dials a plaintext endpoint with TLS fails its unary calls and its
// streams at once with FAILED_PRECONDITION naming the endpoint and tls, instead of letting
// them wait for their deadline: the handshake fails the same way at every attempt.
func TestCallOnTLSSlipFailsFastNamingCause(t *testing.T) {
	addr := startServer(t, "E1")
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(time.Hour, 0, addr)})
	start := time.Now()
	gme := newGME(t, o, fastSettings(nil), tlsDial)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{})
	wantNamedTLSFailure(t, "Invoke", err, time.Since(start), addr, "g")

	start = time.Now()
	stream, err := testpb.NewTestServiceClient(gme).StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	wantNamedTLSFailure(t, "NewStream", err, time.Since(start), addr, "g")
	if w := gme.Status().WaitingCalls; w != 0 {
		t.Errorf("WaitingCalls = %d after the calls failed, want 0", w)
	}
}

// A certificate that fails verification fails a group's calls at once too, naming the
// endpoint and tls: one for another name, and one of an authority the client does not trust
// (a plaintext peer: TestCallOnTLSSlipFailsFastNamingCause).
func TestCallOnCertificateFailureFailsFast(t *testing.T) {
	pki := newTestPKI(t)
	proxy := startTLSProxy(t, pki, false, startServer(t, "E1"))
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"certificate for another name", &tls.Config{RootCAs: pki.caPool, ServerName: "spanner.googleapis.com"}},
		{"certificate of an authority not trusted", &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "127.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(time.Hour, 0, proxy.addr)})
			gme := newGME(t, o, fastSettings(nil), grpc.WithTransportCredentials(credentials.NewTLS(tc.cfg)))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{})
			wantNamedTLSFailure(t, "Invoke", err, time.Since(start), proxy.addr, "g")
		})
	}
}

// A server that answers the TLS handshake with an internal_error alert (RFC 8446 §6.2: a
// failure of its own, unrelated to the peer or the configuration) may heal, so its group's
// calls wait as on a refused connection: a fail-fast call gets UNAVAILABLE, which the Spanner
// client retries, before its deadline, never FAILED_PRECONDITION, and calls are served once
// the server completes its handshakes again.
func TestCallOnTLSInternalErrorAlertWaits(t *testing.T) {
	pki := newTestPKI(t)
	var alerting atomic.Bool
	alerting.Store(true)
	cfg := pki.serverConfig()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if alerting.Load() {
			return nil, errors.New("overloaded") // crypto/tls answers with an internal_error alert
		}
		return nil, nil
	}
	proxy := startTLSProxyConfig(t, cfg, startServer(t, "E1"))
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(time.Hour, 0, proxy.addr)})
	creds := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.caPool, ServerName: "127.0.0.1"}))
	gme := newGME(t, o, fastSettings(nil), creds)
	eventually(t, 10*time.Second, "the connection error in Status", func() bool {
		p, _ := poolOf(gme, proxy.addr)
		return p.LastError != nil
	})
	if p, _ := poolOf(gme, proxy.addr); p.LastError.Kind != ConnHandshake || !strings.Contains(p.LastError.Message, "internal error") {
		t.Errorf("connection error %v; want kind handshake, naming the alert", p.LastError)
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{})
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call while the server sends internal_error alerts: %v; want UNAVAILABLE before the deadline", err)
		}
	}

	alerting.Store(false)
	servedNeverFailedFast(t, gme, "E1")
}

// A group does not fail fast while one of its endpoints may still heal: with its first
// endpoint's TLS slipped and its second refused (a restart), calls fail with UNAVAILABLE,
// which the Spanner client retries, never FAILED_PRECONDITION; once the second is back they
// are served by it.
func TestCallOnTLSSlipWithHealableFallbackWaits(t *testing.T) {
	pki := newTestPKI(t)
	good := spannermetest.NewEndpointTB(t, startTLSProxy(t, pki, false, startServer(t, "E2")).addr)
	good.Down()
	bad := startServer(t, "E1") // plaintext: TLS fails at every attempt
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, bad, good.Addr())})
	creds := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.caPool, ServerName: "127.0.0.1"}))
	gme := newGME(t, o, fastSettings(nil), creds)
	eventually(t, 10*time.Second, "both connection errors in Status", func() bool {
		b, _ := poolOf(gme, bad)
		g, _ := poolOf(gme, good.Addr())
		return b.LastError != nil && b.LastError.Kind == ConnTLS && g.LastError != nil && g.LastError.Kind == ConnRefused
	})
	for range 5 {
		if _, err := call(context.Background(), gme); status.Code(err) != codes.Unavailable {
			t.Fatalf("call with the fallback refused: %v; want UNAVAILABLE (retryable)", err)
		}
	}

	if err := good.Up(); err != nil {
		t.Fatal(err)
	}
	servedNeverFailedFast(t, gme, "E2")
}

// servedNeverFailedFast calls until a call is served by want, within 20 s, and fails the
// test if a call fails fast with FAILED_PRECONDITION on the way.
func servedNeverFailedFast(t *testing.T, gme *GCPMultiEndpoint, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		got, err := call(ctx, gme)
		if err == nil && got == want {
			return
		}
		if status.Code(err) == codes.FailedPrecondition {
			t.Fatalf("a call failed fast on an endpoint that may heal: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never served by %s (last: %q, %v)\n%s", want, got, err, statusString(gme))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// An endpoint that accepts TCP and closes during the TLS handshake (a server restarting
// behind its port, a proxy with no backend) may heal: its calls are not failed fast with
// FAILED_PRECONDITION, and its connection error's kind is handshake or reset, not tls.
func TestCallOnEndpointClosingDuringTLSHandshakeIsNotFailedFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 64<<10)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = c.Read(b) // the whole ClientHello: closed with nothing unread, the client reads EOF
			c.Close()
		}
	}()
	pki := newTestPKI(t)
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, l.Addr().String())})
	creds := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.caPool, ServerName: "127.0.0.1"}))
	gme := newGME(t, o, fastSettings(nil), creds)
	eventually(t, 10*time.Second, "the connection error in Status", func() bool {
		p, _ := poolOf(gme, l.Addr().String())
		return p.LastError != nil
	})
	// Closed with the ClientHello unread, the connection is reset: either kind may heal.
	if p, _ := poolOf(gme, l.Addr().String()); p.LastError.Kind != ConnHandshake && p.LastError.Kind != ConnReset {
		t.Errorf("connection error kind %v (%v), want handshake or reset", p.LastError.Kind, p.LastError)
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := call(ctx, gme)
		cancel()
		if c := status.Code(err); c == codes.FailedPrecondition || c == codes.OK {
			t.Fatalf("call: %v; want a retryable error or the deadline", err)
		}
	}
}

// While a group's endpoint fails for a reason that may heal (refused) or is still in its
// first connection attempt, calls wait, and the error of a call whose deadline ends while it
// waits names the endpoint, the group and the last connection error, with the context's
// code; a fail-fast call on a refused endpoint stays UNAVAILABLE, which the Spanner client
// retries, and names them too.
func TestCallWaitingForConnectionNamesCause(t *testing.T) {
	refused := closedAddr(t)
	hanging := spannermetest.NewEndpointTB(t, startServer(t, "E1"))
	hanging.Blackhole() // accepts TCP, never answers: the first attempt lasts MinConnectTimeout
	o := options("refused", map[string]*multiendpoint.MultiEndpointOptions{
		"refused": group(time.Hour, 0, refused),
		"hanging": group(time.Hour, 0, hanging.Addr()),
	})
	s := fastSettings(nil)
	s.MinConnectTimeout = time.Minute
	gme := newGME(t, o, s)
	eventually(t, 10*time.Second, "the refused connection in Status", func() bool {
		p, _ := poolOf(gme, refused)
		return p.LastError != nil && p.LastError.Kind == ConnRefused
	})

	unary := func(group string, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(NewMEContext(context.Background(), group), 300*time.Millisecond)
		defer cancel()
		_, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{}, opts...)
		return err
	}
	for _, tc := range []struct {
		name, group string
		opts        []grpc.CallOption
		code        codes.Code
		want        []string
	}{
		{"refused, waiting for ready", "refused", []grpc.CallOption{grpc.WaitForReady(true)}, codes.DeadlineExceeded,
			[]string{"endpoint " + refused + ` of group "refused"`, "last connection error: refused: "}},
		{"first attempt under way", "hanging", nil, codes.DeadlineExceeded,
			[]string{"endpoint " + hanging.Addr() + ` of group "hanging"`, "CONNECTING", "no connection attempt has failed yet"}},
		{"refused, fail-fast", "refused", nil, codes.Unavailable,
			[]string{"endpoint " + refused + ` of group "refused" is not connected`, "last connection error: refused: "}},
	} {
		err := unary(tc.group, tc.opts...)
		t.Logf("%s: %v", tc.name, err)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v; want code %v", tc.name, err, tc.code)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(status.Convert(err).Message(), w) {
				t.Errorf("%s: %v; want it to name %q", tc.name, err, w)
			}
		}
	}
}

// The Spanner client dialing a plaintext endpoint with TLS (the plaintext dial option
// forgotten) fails its first read at once with an error naming tls and the endpoint, not
// with "timeout / context canceled during getting session" at the read's deadline: the
// session creation fails with FAILED_PRECONDITION, which neither gax nor the Spanner client
// retries, and the read returns that error.
func TestClientOnTLSSlipFirstReadNamesCause(t *testing.T) {
	b := startSpannerBackend(t, 1)
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(time.Hour, 0, b.eps[0].Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, fastSettings(nil),
		option.WithoutAuthentication()) // TLS, the default, to a plaintext endpoint
	if err != nil {
		t.Fatalf("NewMultiEndpointClientWithSettings: %v", err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })

	readCtx, cancelRead := context.WithTimeout(ctx, 10*time.Second)
	defer cancelRead()
	it := client.Single().Query(readCtx, spanner.Statement{SQL: "SELECT 1"})
	_, err = it.Next()
	it.Stop()
	wantNamedTLSFailure(t, "first read", err, time.Since(start), b.eps[0].Addr(), "g")
	if err == io.EOF || strings.Contains(err.Error(), "during getting session") {
		t.Errorf("first read: %v; want the connection's cause, not the session timeout", err)
	}
}
