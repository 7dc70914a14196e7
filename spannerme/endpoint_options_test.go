package spannerme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/testutil"
)

// testServerName is the only name on the test servers' certificate: as a PSC endpoint dialed
// by IP address, 127.0.0.1 is not on it.
const testServerName = "spanner.test.invalid"

// testCert returns a self-signed certificate for testServerName and a pool that trusts it.
func testCert(tb testing.TB) (tls.Certificate, *x509.CertPool) {
	tb.Helper()
	return testutil.SelfSigned(tb, testServerName)
}

// authorities records the :authority of every call a server received.
type authorities struct {
	mu   sync.Mutex // guards seen
	seen []string
}

func (a *authorities) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	a.mu.Lock()
	a.seen = append(a.seen, md.Get(":authority")...)
	a.mu.Unlock()
	return h(ctx, req)
}

func (a *authorities) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

func (a *authorities) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		return ""
	}
	return a.seen[len(a.seen)-1]
}

// startTLSServer starts a named TestService with TLS on 127.0.0.1:0.
func startTLSServer(tb testing.TB, name string, cert tls.Certificate, auth *authorities) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})),
		grpc.UnaryInterceptor(auth.intercept))
	testpb.RegisterTestServiceServer(srv, &nameServer{name: name})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	tb.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

func newTLSGME(tb testing.TB, endpoint string, s Settings, roots *x509.CertPool) (*GCPMultiEndpoint, error) {
	tb.Helper()
	gme, err := NewGCPMultiEndpointWithSettings(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, endpoint)}), s,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})))
	if err == nil {
		tb.Cleanup(func() { gme.Close() })
	}
	return gme, err
}

// TestEndpointAuthority: an endpoint dialed by IP address gets its TLS handshake and
// :authority from EndpointOptions.Authority (googleapis/go-sql-spanner#546); without it, the
// certificate does not match.
func TestEndpointAuthority(t *testing.T) {
	cert, roots := testCert(t)
	var auth authorities
	addr := startTLSServer(t, "psc-by-ip", cert, &auth)

	s := fastSettings(nil)
	s.EndpointOptions = map[string]EndpointOptions{"https://" + addr: {Authority: testServerName}} // the https form matches
	gme, err := newTLSGME(t, addr, s, roots)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitServedBy(t, ctx, gme, "psc-by-ip", 15*time.Second)
	if got := auth.last(); got != testServerName {
		t.Errorf(":authority = %q, want %q", got, testServerName)
	}

	// Without the authority, TLS checks the certificate against 127.0.0.1 and fails: the
	// pool never connects, and, the group having no other endpoint, calls fail at once
	// with FAILED_PRECONDITION naming the endpoint and tls (retrying does not fix it).
	plain, err := newTLSGME(t, addr, fastSettings(nil), roots)
	if err != nil {
		t.Fatal(err)
	}
	before := auth.count()
	eventually(t, 15*time.Second, "the pool to fail its handshake", func() bool {
		p, _ := poolOf(plain, addr)
		return p.Connectivity == "TRANSIENT_FAILURE"
	})
	for range 3 {
		if got, err := call(ctx, plain); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "endpoint "+addr+": tls: ") {
			t.Fatalf("call without authority = %q, %v; want FAILED_PRECONDITION naming %s and tls", got, err, addr)
		}
	}
	if n := auth.count(); n != before {
		t.Errorf("the server received %d calls through the pool without authority", n-before)
	}
}

// TestEndpointOptionsAtUpdate: an endpoint added at runtime is dialed with the options of the
// update; an endpoint whose pool was dialed with other options is reported stale.
func TestEndpointOptionsAtUpdate(t *testing.T) {
	cert, roots := testCert(t)
	var auth1, auth2 authorities
	a1 := startTLSServer(t, "one", cert, &auth1)
	a2 := startTLSServer(t, "two", cert, &auth2)
	s := fastSettings(nil)
	s.EndpointOptions = map[string]EndpointOptions{a1: {Authority: testServerName}}
	gme, err := newTLSGME(t, a1, s, roots)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitServedBy(t, ctx, gme, "one", 15*time.Second)

	both := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, a2, a1)})
	eo := map[string]EndpointOptions{a1: {Authority: testServerName}, a2: {Authority: testServerName + ":443"}}
	stale, err := gme.updateWithEndpointOptions(both, eo)
	if err != nil || len(stale) != 0 {
		t.Fatalf("update = %v, %v; want no stale endpoint", stale, err)
	}
	waitServedBy(t, ctx, gme, "two", 15*time.Second)
	if got := auth2.last(); got != testServerName+":443" {
		t.Errorf(":authority of the added endpoint = %q", got)
	}

	// New options for a pool already dialed: kept by the pool, reported.
	eo[a1] = EndpointOptions{Authority: "other.test.invalid"}
	stale, err = gme.updateWithEndpointOptions(both, eo)
	if err != nil || !reflect.DeepEqual(stale, []string{a1}) {
		t.Errorf("update = %v, %v; want [%s] stale", stale, err, a1)
	}
	// A bad entry changes nothing.
	if _, err := gme.updateWithEndpointOptions(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, a1)}),
		map[string]EndpointOptions{a1: {Authority: "a b"}}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("bad authority: %v", err)
	}
	if g := groupOf(gme, "g"); len(g.Endpoints) != 2 {
		t.Errorf("a rejected update changed the group: %+v", g)
	}
}

func TestEndpointOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		eo   map[string]EndpointOptions
		want string
	}{
		{map[string]EndpointOptions{"no-port": {}}, `endpoint "no-port": EndpointOptions: not host:port`},
		{map[string]EndpointOptions{"a:1": {Authority: "x/y"}}, `Authority "x/y": not a host or host:port`},
		{map[string]EndpointOptions{"a:1": {Authority: "x:99999"}}, `port "99999"`},
		{map[string]EndpointOptions{"a:443": {Authority: "x"}, "https://a": {Authority: "y"}}, "given twice with different options"},
		{map[string]EndpointOptions{"a:1": {Name: "psc east4"}}, `endpoint "a:1": EndpointOptions: Name "psc east4": ' ' (byte 3) is not an ASCII letter`},
		{map[string]EndpointOptions{"a:1": {Name: "_east"}}, `Name "_east": must begin with an ASCII letter or digit`},
		{map[string]EndpointOptions{"a:1": {Name: "é"}}, `Name "é": must begin with an ASCII letter or digit, not 'é'`},
		{map[string]EndpointOptions{"a:1": {Name: strings.Repeat("n", MaxEndpointNameLen+1)}}, "longer than 63 bytes"},
		{map[string]EndpointOptions{"a:1": {Name: "east"}, "b:2": {Name: "east"}}, `endpoint "b:2": EndpointOptions: Name "east" is also the name of endpoint "a:1"; names must be unique`},
	} {
		_, err := NewGCPMultiEndpointWithSettings(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, "a:1")}),
			Settings{EndpointOptions: tc.eo}, insecureDial)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EndpointOptions %v: %v, want a *ConfigError with %q", tc.eo, err, tc.want)
		}
	}
	for _, ok := range []string{"", "spanner.googleapis.com", "spanner.googleapis.com:443", "[::1]", "[::1]:443", "10.0.0.1"} {
		if p := checkAuthority(ok); p != "" {
			t.Errorf("checkAuthority(%q) = %q", ok, p)
		}
	}
	for _, ok := range []string{"", "psc-east4", "PSC_east4.v2", "4", strings.Repeat("n", MaxEndpointNameLen)} {
		if p := checkEndpointName(ok); p != "" {
			t.Errorf("checkEndpointName(%q) = %q", ok, p)
		}
	}
	// One endpoint written two ways may give its name twice.
	if _, err := parseEndpointOptions(map[string]EndpointOptions{"a:443": {Name: "east"}, "https://a": {Name: "east"}}); err != nil {
		t.Errorf("the same endpoint twice with one name: %v", err)
	}
}
