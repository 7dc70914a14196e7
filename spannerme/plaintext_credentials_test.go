package spannerme

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// authRecorder is a plaintext gRPC server on loopback that answers every call UNIMPLEMENTED
// and records the connections it accepted and the authorization headers it received.
type authRecorder struct {
	addr string
	mu   sync.Mutex // guards conns and auth
	// conns counts accepted connections; auth holds each call's authorization values.
	conns int
	auth  [][]string
}

type countingListener struct {
	net.Listener
	r *authRecorder
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.r.mu.Lock()
		l.r.conns++
		l.r.mu.Unlock()
	}
	return c, err
}

func startAuthRecorder(t *testing.T) *authRecorder {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &authRecorder{addr: lis.Addr().String()}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		r.mu.Lock()
		r.auth = append(r.auth, md.Get("authorization"))
		r.mu.Unlock()
		return errors.New("unimplemented")
	}))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(countingListener{lis, r}) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return r
}

func (r *authRecorder) seen() (conns int, auth [][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns, append([][]string(nil), r.auth...)
}

var plaintextOption = option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))

func staticToken(token string) option.ClientOption {
	return option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token, TokenType: "Bearer"}))
}

// callThrough makes one call through gme (answered UNIMPLEMENTED) so that the recorder sees
// what a call carries.
func callThrough(t *testing.T, gme *GCPMultiEndpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := gme.Invoke(ctx, "/google.spanner.v1.Spanner/GetSession", &spannerpb.GetSessionRequest{Name: "s"}, &spannerpb.Session{},
		grpc.WaitForReady(true))
	if err == nil || ctx.Err() != nil {
		t.Fatalf("call through the plaintext recorder: %v (context: %v); want its UNIMPLEMENTED answer", err, ctx.Err())
	}
}

// No credentials in plaintext unless asked for by name: a client built with a plaintext dial
// option and credentials (the default ones included) is refused with a *ConfigError before
// anything is dialed, and the server on loopback never sees a connection; without
// credentials, or with Settings.SendCredentialsInPlaintext, it is built, and a call carries
// an authorization header only in the second case.
func TestPlaintextCredentialsRefusedUnlessAskedFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		config   spanner.ClientConfig
		opts     []option.ClientOption
		optIn    bool
		refused  string   // a text of the *ConfigError, or "" when built
		wantAuth []string // the authorization values a call carries, when built
	}{
		{name: "plaintext, default credentials", opts: []option.ClientOption{plaintextOption}, refused: "plaintext dial option"},
		{name: "plaintext, a token source", opts: []option.ClientOption{plaintextOption, staticToken("secret")}, refused: "plaintext dial option"},
		// A dial option that makes the dial wait for the connection does not hide the
		// plaintext (the check read nothing, timed out and let the token go in cleartext).
		{name: "plaintext, a token source, grpc.WithBlock", refused: "plaintext dial option",
			opts: []option.ClientOption{plaintextOption, option.WithGRPCDialOption(grpc.WithBlock()), staticToken("secret")}}, //lint:ignore SA1019 the caller's option under test
		{name: "plaintext, a token source, grpc.WithReturnConnectionError", refused: "plaintext dial option",
			opts: []option.ClientOption{plaintextOption, option.WithGRPCDialOption(grpc.WithReturnConnectionError()), staticToken("secret")}}, //lint:ignore SA1019 the caller's option under test
		// gRPC refuses an API key on a plaintext connection itself (its credentials ask for
		// transport security): a dial error, not a *ConfigError, and nothing sent.
		{name: "plaintext, an API key", opts: []option.ClientOption{plaintextOption, option.WithAPIKey("secret")},
			refused: "the credentials require transport level security"},
		{name: "OMNI plaintext with a login", config: spanner.ClientConfig{Type: spanner.OMNI, UsePlainText: true, Username: "u", Password: []byte("p")},
			refused: "ClientConfig.UsePlainText with Username"},
		{name: "plaintext without authentication", opts: []option.ClientOption{plaintextOption, option.WithoutAuthentication()}},
		{name: "OMNI plaintext without a login", config: spanner.ClientConfig{Type: spanner.OMNI, UsePlainText: true}},
		{name: "plaintext, a token source, opted in", opts: []option.ClientOption{plaintextOption, staticToken("secret")}, optIn: true,
			wantAuth: []string{"Bearer secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startAuthRecorder(t)
			o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, r.addr)})
			settings := fastSettings(nil)
			settings.SendCredentialsInPlaintext = tc.optIn
			tc.config.DisableNativeMetrics = true
			gme, err := NewGCPMultiEndpointForSpanner("projects/p/instances/i/databases/d", tc.config, o, settings, tc.opts...)
			if tc.refused != "" {
				var ce *ConfigError
				isConfigErr := errors.As(err, &ce) && strings.Contains(err.Error(), "SendCredentialsInPlaintext")
				if err == nil || !strings.Contains(err.Error(), tc.refused) || isConfigErr == strings.Contains(tc.refused, "transport level security") {
					t.Fatalf("NewGCPMultiEndpointForSpanner = %v; want an error saying %q (a *ConfigError naming the opt-in, unless gRPC refuses)", err, tc.refused)
				}
				if conns, _ := r.seen(); conns != 0 {
					t.Errorf("the server accepted %d connections; want none (refused before dialing)", conns)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer gme.Close()
			callThrough(t, gme)
			_, auth := r.seen()
			for _, a := range auth {
				if strings.Join(a, ",") != strings.Join(tc.wantAuth, ",") {
					t.Fatalf("calls carried authorization %q; want %q", auth, tc.wantAuth)
				}
			}
		})
	}
}

// SPANNER_EMULATOR_HOST keeps working with a plaintext dial option and default credentials
// (the emulator's own options turn authentication off), and its calls carry none; with a
// DialFunc it is refused, and the DialFunc is never called.
func TestEmulatorHostCredentials(t *testing.T) {
	r := startAuthRecorder(t)
	t.Setenv(emulatorHostEnv, r.addr)
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "psc-east4.invalid:443")})
	config := spanner.ClientConfig{DisableNativeMetrics: true}
	gme, err := NewGCPMultiEndpointForSpanner("projects/p/instances/i/databases/d", config, o, fastSettings(nil), plaintextOption)
	if err != nil {
		t.Fatalf("with the emulator: %v", err)
	}
	callThrough(t, gme)
	gme.Close()
	if _, auth := r.seen(); len(auth) == 0 || len(auth[0]) != 0 {
		t.Errorf("calls to the emulator carried authorization %q; want none", auth)
	}

	dialed := false
	o.DialFunc = func(ctx context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		dialed = true
		return grpc.NewClient(target, opts...)
	}
	_, err = NewGCPMultiEndpointForSpanner("projects/p/instances/i/databases/d", config, o, fastSettings(nil))
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "DialFunc") || !strings.Contains(err.Error(), emulatorHostEnv) {
		t.Errorf("a DialFunc with %s: %v; want a *ConfigError naming both", emulatorHostEnv, err)
	}
	if dialed {
		t.Error("the DialFunc was called")
	}
}
