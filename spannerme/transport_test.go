package spannerme

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/internal/testutil"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// Each ClientConfig setting the client constructors cannot honour is refused with a
// *ConfigError naming it, before anything is dialed.
func TestClientConfig_RefusedSettings(t *testing.T) {
	b := startSpannerBackend(t, 1)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	pki := newTestPKI(t)
	omni := func(c spanner.ClientConfig) spanner.ClientConfig { c.Type = spanner.OMNI; return c }
	for _, tc := range []struct {
		name     string
		config   spanner.ClientConfig
		env      [2]string
		dialFunc bool
		setting  string // the Problem starts with it
	}{
		{"EnableDirectAccess", spanner.ClientConfig{EnableDirectAccess: true}, [2]string{}, false, "ClientConfig.EnableDirectAccess"},
		{"location API env", spanner.ClientConfig{}, [2]string{locationAPIEnv, "true"}, false, locationAPIEnv + "=true"},
		{"UsePlainText without OMNI", spanner.ClientConfig{UsePlainText: true}, [2]string{}, false, "ClientConfig.UsePlainText"},
		{"CA file without OMNI", spanner.ClientConfig{CaCertificateFile: pki.caFile}, [2]string{}, false, "ClientConfig.CaCertificateFile"},
		{"client cert without OMNI", spanner.ClientConfig{ClientCertificateFile: pki.clientCert}, [2]string{}, false, "ClientConfig.ClientCertificateFile"},
		{"client key without OMNI", spanner.ClientConfig{ClientKeyFile: pki.clientKey}, [2]string{}, false, "ClientConfig.ClientKeyFile"},
		{"OMNI plaintext with a CA file", omni(spanner.ClientConfig{UsePlainText: true, CaCertificateFile: pki.caFile}), [2]string{}, false, "ClientConfig.UsePlainText"},
		{"OMNI missing CA file", omni(spanner.ClientConfig{CaCertificateFile: filepath.Join(dir, "missing.pem")}), [2]string{}, false, "ClientConfig.CaCertificateFile"},
		{"OMNI CA file without PEM", omni(spanner.ClientConfig{CaCertificateFile: notPEM}), [2]string{}, false, "ClientConfig.CaCertificateFile"},
		{"OMNI client cert without key", omni(spanner.ClientConfig{ClientCertificateFile: pki.clientCert}), [2]string{}, false, "ClientConfig.ClientKeyFile"},
		{"OMNI client key without cert", omni(spanner.ClientConfig{ClientKeyFile: pki.clientKey}), [2]string{}, false, "ClientConfig.ClientCertificateFile"},
		{"OMNI mismatched key pair", omni(spanner.ClientConfig{ClientCertificateFile: pki.clientCert, ClientKeyFile: pki.serverKey}), [2]string{}, false, "ClientConfig.ClientCertificateFile and ClientKeyFile"},
		{"OMNI Username without Password", omni(spanner.ClientConfig{UsePlainText: true, Username: "u"}), [2]string{}, false, "ClientConfig.Username and ClientConfig.Password"},
		{"OMNI Username with a DialFunc", omni(spanner.ClientConfig{UsePlainText: true, Username: "u", Password: []byte("p")}), [2]string{}, true, "ClientConfig.Username"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, b.eps[0].Addr())})
			dialed := false
			if tc.dialFunc {
				o.DialFunc = func(_ context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
					dialed = true
					return grpc.NewClient(target, opts...)
				}
			}
			tc.config.DisableNativeMetrics = true
			client, gme, err := NewMultiEndpointClientWithSettings(context.Background(), b.database, tc.config, o, fastSettings(nil), clientOptions()...)
			if err == nil {
				client.Close()
				gme.Close()
				t.Fatal("accepted")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || !strings.HasPrefix(ce.Problem, tc.setting+":") {
				t.Fatalf("error %v (%T), want a *ConfigError whose problem starts with %q", err, err, tc.setting+":")
			}
			if client != nil || gme != nil || dialed {
				t.Errorf("client %v, gme %v, dialed %v: want nothing built", client, gme, dialed)
			}
			t.Logf("%v", err)
		})
	}
	if got := b.eps[0].Stats().Accepted; got != 0 {
		t.Errorf("the endpoint accepted %d connections; refused configurations must dial nothing", got)
	}
}

// F21: Type OMNI with UsePlainText works with a plain client, and through the multi-endpoint
// constructors too: the pools dial in plaintext and without credentials although the caller
// gives no option for either (a real Omni user's options), and location-aware routing is
// turned off with a notice.
func TestCase_F21_OmniPlainText(t *testing.T) {
	b := startSpannerBackend(t, 2)
	config := spanner.ClientConfig{Type: spanner.OMNI, UsePlainText: true}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("plain client", func(t *testing.T) {
		client, err := spanner.NewClientWithConfig(ctx, b.database, config, option.WithEndpoint(b.eps[0].Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		if n, err := countAccounts(ctx, client); err != nil || n == 0 {
			t.Fatalf("count = %d, %v", n, err)
		}
	})
	t.Run("multi-endpoint client", func(t *testing.T) {
		logs := &syncBuffer{}
		o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(time.Second, 0, b.eps[0].Addr(), b.eps[1].Addr())})
		client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, config, o, fastSettings(logs))
		if err != nil {
			t.Fatal(err)
		}
		defer gme.Close()
		defer client.Close()
		if n, err := countAccounts(ctx, client); err != nil || n == 0 {
			t.Fatalf("count = %d, %v", n, err)
		}
		if !strings.Contains(logs.String(), "location-aware routing") {
			t.Errorf("no notice that location-aware routing is off:\n%s", logs)
		}
	})
}

// F21: the TLS files of Type OMNI reach every endpoint's pool: a server certificate signed
// by a self-signed CA is trusted through CaCertificateFile, and an mTLS endpoint accepts the
// client certificate; without the CA file the endpoint is not trusted.
func TestCase_F21_OmniTLSFiles(t *testing.T) {
	srv, db := fixture.StartSpannertest(t)
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name      string
		mTLS      bool
		config    spanner.ClientConfig
		wantError bool
	}{
		{"CA file", false, spanner.ClientConfig{CaCertificateFile: pki.caFile}, false},
		{"CA file and client certificate (mTLS)", true, spanner.ClientConfig{CaCertificateFile: pki.caFile,
			ClientCertificateFile: pki.clientCert, ClientKeyFile: pki.clientKey}, false},
		{"no CA file: not trusted", false, spanner.ClientConfig{}, true},
		{"mTLS without a client certificate", true, spanner.ClientConfig{CaCertificateFile: pki.caFile}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e1, e2 := startTLSProxy(t, pki, tc.mTLS, srv.Addr), startTLSProxy(t, pki, tc.mTLS, srv.Addr)
			tc.config.Type = spanner.OMNI
			o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(time.Second, 0, e1.addr, e2.addr)})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			client, gme, err := NewMultiEndpointClientWithSettings(ctx, db, tc.config, o, fastSettings(nil))
			if err != nil {
				t.Fatal(err)
			}
			defer gme.Close()
			defer client.Close()
			qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
			defer qcancel()
			_, err = countAccounts(qctx, client)
			if tc.wantError {
				if err == nil {
					t.Fatal("query succeeded over an untrusted or unauthenticated TLS connection")
				}
				t.Logf("as expected: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("query: %v\n%s", err, statusString(gme))
			}
			if e1.handshakes.Load() == 0 {
				t.Error("no TLS handshake completed on the primary endpoint")
			}
			if tc.mTLS && e1.clientCerts.Load() == 0 {
				t.Error("no client certificate presented")
			}
		})
	}
}

// F20: with the dynamic channel pool enabled and its intervals short, the client keeps
// serving for as long as it is open: the pool is turned off (logged), nothing closes the
// GCPMultiEndpoint, and DCPInitialChannels/DCPMaxChannels size each endpoint's pool. The
// Spanner client's dynamic channel pool never closes an idle drained channel before 15s
// (DCPDrainIdleGrace's floor), so the load runs past that.
func TestCase_F20_DynamicChannelPoolKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 20s: the dynamic channel pool's shortest drain")
	}
	b := startSpannerBackend(t, 1)
	config := fixture.ClientConfig()
	config.DynamicChannelPoolConfig = spanner.DynamicChannelPoolConfig{
		DCPEnabled: true, DCPInitialChannels: 2, DCPMinChannels: 1, DCPMaxChannels: 3,
		DCPScaleDownCheckInterval: 50 * time.Millisecond, DCPScaleUpCooldown: 50 * time.Millisecond,
		DCPDownscaleConsecutiveLowLoadChecks: 1, DCPDrainIdleGrace: time.Millisecond,
	}
	logs := &syncBuffer{}
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(time.Second, 0, b.eps[0].Addr())})
	client, gme := newSpannerClientWithConfig(t, b, config, o, fastSettings(logs))
	if p := gme.GCPConfig().GetChannelPool(); p.GetMinSize() != 2 || p.GetMaxSize() != 3 {
		t.Errorf("channel pool %v, want MinSize 2 (DCPInitialChannels), MaxSize 3 (DCPMaxChannels)", p)
	}
	if !strings.Contains(logs.String(), "DCPEnabled is turned off") {
		t.Errorf("no notice that the dynamic channel pool is off:\n%s", logs)
	}
	deadline := time.Now().Add(20 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := countAccounts(ctx, client)
		cancel()
		if err != nil {
			t.Fatalf("query %d failed %v after the start: %v\n%s", n, 20*time.Second-time.Until(deadline), err, statusString(gme))
		}
		n++
		time.Sleep(100 * time.Millisecond) // low load: the dynamic pool would scale down
	}
	if gme.Status().Closed {
		t.Fatal("the GCPMultiEndpoint closed while the client is open")
	}
	t.Logf("%d queries over 20s, all served", n)
}

func newSpannerClientWithConfig(t *testing.T, b *spannerBackend, config spanner.ClientConfig, o *grpcgcp.GCPMultiEndpointOptions, s Settings) (*spanner.Client, *GCPMultiEndpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, config, o, s, clientOptions()...)
	if err != nil {
		t.Fatalf("NewMultiEndpointClientWithSettings: %v", err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	return client, gme
}

// testPKI is a self-signed CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files in a temporary directory.
type testPKI struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
	caPool                                               *x509.CertPool
	server                                               tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "spannerme test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p := &testPKI{caFile: write("ca.pem", "CERTIFICATE", caDER), caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	p.serverCert, p.serverKey = issue(2, "server", x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue(3, "client", x509.ExtKeyUsageClientAuth)
	if p.server, err = tls.LoadX509KeyPair(p.serverCert, p.serverKey); err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsProxy terminates TLS (HTTP/2 by ALPN) on 127.0.0.1:0 and forwards the plaintext to a
// backend: a TLS endpoint in front of an in-memory Spanner.
type tlsProxy struct {
	addr        string
	handshakes  atomic.Int64
	clientCerts atomic.Int64
}

func startTLSProxy(t *testing.T, pki *testPKI, mTLS bool, backend string) *tlsProxy {
	t.Helper()
	cfg := pki.serverConfig()
	if mTLS {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, pki.caPool
	}
	return startTLSProxyConfig(t, cfg, backend)
}

// serverConfig is the TLS configuration of a server with the PKI's server certificate.
func (p *testPKI) serverConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
}

// startTLSProxyConfig is startTLSProxy with the server's TLS configuration cfg.
func startTLSProxyConfig(t *testing.T, cfg *tls.Config, backend string) *tlsProxy {
	t.Helper()
	p := &tlsProxy{}
	p.addr = testutil.Serve(t, func(raw net.Conn) {
		c := tls.Server(raw, cfg)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return
		}
		p.handshakes.Add(1)
		if len(c.ConnectionState().PeerCertificates) > 0 {
			p.clientCerts.Add(1)
		}
		up, err := net.Dial("tcp", backend)
		if err != nil {
			return
		}
		defer up.Close()
		// When either direction ends, closing both ends the other.
		var copies sync.WaitGroup
		copies.Add(2)
		go func() { defer copies.Done(); _, _ = io.Copy(up, c); up.Close(); c.Close() }()
		go func() { defer copies.Done(); _, _ = io.Copy(c, up); up.Close(); c.Close() }()
		copies.Wait()
	})
	return p
}

// The Spanner client's request-ID header (x-goog-spanner-request-id) reaches the pools on
// unary and streaming calls, and errors carry the ID, as with a plain client. A caller's
// interceptors on the pools see the header.
func TestClient_RequestIDReachesPools(t *testing.T) {
	b := startSpannerBackend(t, 1)
	var mu sync.Mutex // guards ids
	ids := map[string][]string{}
	record := func(ctx context.Context, method string) {
		md, _ := metadata.FromOutgoingContext(ctx)
		mu.Lock()
		ids[method[strings.LastIndex(method, "/")+1:]] = append(ids[method[strings.LastIndex(method, "/")+1:]], md.Get(spannerreq.Header)...)
		mu.Unlock()
	}
	opts := append(clientOptions(),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			record(ctx, method)
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			record(ctx, method)
			return streamer(ctx, desc, cc, method, opts...)
		})))
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, b.eps[0].Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, fastSettings(nil), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	if _, err := countAccounts(ctx, client); err != nil {
		t.Fatal(err)
	}
	accts, err := fixture.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		_, err := tx.Update(ctx, spanner.Statement{SQL: "UPDATE Accounts SET Region = 'r' WHERE AccountId = @a", Params: map[string]any{"a": accts[0].AccountID}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	format := regexp.MustCompile(`^1\.[0-9a-f]{16}\.\d+\.\d+\.\d+\.\d+$`)
	mu.Lock()
	for _, m := range []string{"CreateSession", "ExecuteStreamingSql", "ExecuteSql", "Commit"} {
		if len(ids[m]) == 0 {
			t.Errorf("%s: no request ID reached the pool (seen: %v)", m, ids)
			continue
		}
		for _, id := range ids[m] {
			if !format.MatchString(id) {
				t.Errorf("%s: request ID %q, want version.process.client.channel.request.attempt", m, id)
			}
		}
	}
	mu.Unlock()

	bad := spanner.Statement{SQL: "SELECT * FROM NoSuchTable"}
	queryErr := func(c *spanner.Client) error {
		return c.Single().Query(ctx, bad).Do(func(*spanner.Row) error { return nil })
	}
	plain, err := fixture.NewClient(ctx, b.eps[0].Addr(), b.database)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for name, c := range map[string]*spanner.Client{"plain client": plain, "multi-endpoint client": client} {
		//lint:ignore SA1019 the request ID is only exposed by spanner.Error
		var se *spanner.Error
		if err := queryErr(c); !errors.As(err, &se) || se.RequestID == "" {
			t.Errorf("%s: error %v carries no request ID", name, err)
		}
	}
}

// The client of NewMultiEndpointClient* exports native metrics (TestClient_NativeMetricsExportedAsPlainClient)
// and logs nothing about them; a NewClient client's export is turned off, with a notice at
// INFO, once: its client options have no effect, and its exporter would be dialed with them.
// A client built with the default configuration (metrics on) and no credentials works (F9)
// and logs no WARN line.
func TestClient_NativeMetricsNotice(t *testing.T) {
	b := startSpannerBackend(t, 1)
	t.Setenv("SPANNER_MONITORING_HOST", startFakeMetricService(t).addr) // nothing leaves loopback
	logs := &syncBuffer{}
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, b.eps[0].Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, spanner.ClientConfig{}, o, fastSettings(logs), clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer client.Close()
	if _, err := countAccounts(ctx, client); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Contains(out, "native metrics") || strings.Contains(out, "level=WARN") {
		// A default client on loopback starts without a WARN line: a service alerting on
		// WARN must not page on every deploy.
		t.Errorf("the owner's client logged a native metrics notice or a WARN line:\n%s", out)
	}
	other, err := NewClient(ctx, b.database, gme, spanner.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := countAccounts(ctx, other); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "native metrics export to Cloud Monitoring is turned off"); n != 1 || !strings.Contains(out, `level=INFO msg="spannerme: the Spanner client's native metrics`) {
		t.Errorf("a NewClient client's native metrics notice logged %d times, want once at INFO (it is expected, nothing to act on):\n%s", n, out)
	}
	if strings.Contains(out, "level=WARN") {
		t.Errorf("a default client logged a WARN line:\n%s", out)
	}
	logs2 := &syncBuffer{}
	client2, gme2, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, fastSettings(logs2), clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer gme2.Close()
	defer client2.Close()
	other2, err := NewClient(ctx, b.database, gme2, fixture.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer other2.Close()
	if strings.Contains(logs2.String(), "native metrics") {
		t.Errorf("a notice although DisableNativeMetrics is set:\n%s", logs2)
	}
}

// The caller's option.WithUserAgent reaches every endpoint as a plain client sends it (it
// replaces the client's default, and gRPC appends its own token), on the application's calls
// and on the probes alike; without it, the pools send this package's user agent.
func TestClient_CallerUserAgentAsPlainClient(t *testing.T) {
	addr, db := startSeededSpannertest(t)
	var mu sync.Mutex // guards agents
	agents := map[string]map[string]bool{}
	record := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		client := "probe"
		if len(md.Get(spannerreq.Header)) > 0 {
			client = "app"
		}
		mu.Lock()
		for _, ua := range md.Get("user-agent") {
			if agents[ua] == nil {
				agents[ua] = map[string]bool{}
			}
			agents[ua][client] = true
		}
		mu.Unlock()
		return handler(srv, ss)
	}
	seen := func() map[string]map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := agents
		agents = map[string]map[string]bool{}
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plainFront := spannermetest.NewFrontendTB(t, addr, spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(record)))
	plain, err := spanner.NewClientWithConfig(ctx, db, fixture.ClientConfig(),
		append(clientOptions(), option.WithEndpoint(plainFront.Addr()), option.WithUserAgent("myapp/1.0"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := countAccounts(ctx, plain); err != nil {
		t.Fatal(err)
	}
	var want string
	for ua := range seen() {
		want = ua
	}
	if !strings.HasPrefix(want, "myapp/1.0 grpc-go/") {
		t.Fatalf("the plain client sent user agent %q; want myapp/1.0 grpc-go/VERSION", want)
	}
	for _, tc := range []struct {
		name string
		opts []option.ClientOption
		want *regexp.Regexp
	}{
		{"option.WithUserAgent", []option.ClientOption{option.WithUserAgent("myapp/1.0")}, regexp.MustCompile("^" + regexp.QuoteMeta(want) + "$")},
		{"no user agent", nil, regexp.MustCompile(`^spanner-go(/v[0-9.]+)? spannerme grpc-go/[0-9.]+$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front := spannermetest.NewFrontendTB(t, addr, spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(record)))
			settings := fastSettings(nil)
			settings.Health.ProbeInterval = 50 * time.Millisecond
			o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, front.Addr())})
			client, gme, err := NewMultiEndpointClientWithSettings(ctx, db, fixture.ClientConfig(), o, settings, append(clientOptions(), tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer gme.Close()
			defer client.Close()
			if _, err := countAccounts(ctx, client); err != nil {
				t.Fatal(err)
			}
			probed := func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, from := range agents {
					if from["probe"] {
						return true
					}
				}
				return false
			}
			for !probed() { // until a probe was sent too, within ctx
				select {
				case <-ctx.Done():
					t.Fatal("no probe reached the frontend within 30s")
				case <-time.After(20 * time.Millisecond):
				}
			}
			got := seen()
			for ua, from := range got {
				if !tc.want.MatchString(ua) {
					t.Errorf("calls (%v) carried user agent %q; want %v", from, ua, tc.want)
				}
			}
		})
	}
}
