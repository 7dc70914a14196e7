package pool

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"
)

// captureBalancer is pick_first with every SubConn's connection error sent to the channel
// of its target, as gRPC hands it to a load balancer (as spannerme_pool's observe sees it).
const captureBalancer = "spannerme_pool_test_capture"

var (
	captureMu   sync.Mutex
	captureChan = map[string]chan error{} // by target
)

func init() { balancer.Register(captureBuilder{}) }

type captureBuilder struct{}

func (captureBuilder) Name() string { return captureBalancer }

func (captureBuilder) Build(cc balancer.ClientConn, o balancer.BuildOptions) balancer.Balancer {
	captureMu.Lock()
	ch := captureChan[o.Target.Endpoint()]
	captureMu.Unlock()
	return balancer.Get("pick_first").Build(&captureCC{ClientConn: cc, ch: ch}, o)
}

type captureCC struct {
	balancer.ClientConn
	ch chan error
}

func (c *captureCC) NewSubConn(addrs []resolver.Address, o balancer.NewSubConnOptions) (balancer.SubConn, error) {
	forward := o.StateListener
	o.StateListener = func(s balancer.SubConnState) {
		if s.ConnectionError != nil {
			select {
			case c.ch <- s.ConnectionError:
			default:
			}
		}
		forward(s)
	}
	return c.ClientConn.NewSubConn(addrs, o)
}

// firstConnError dials addr with creds and returns the first connection error gRPC hands
// the load balancer.
func firstConnError(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	ch := make(chan error, 1)
	captureMu.Lock()
	captureChan[addr] = ch
	captureMu.Unlock()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+captureBalancer+`":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("no connection error from %s within 10s", addr)
		return nil
	}
}

// serveTLS accepts connections on 127.0.0.1:0 and runs the TLS handshake of cfg on each,
// then closes it; a nil cfg answers in plaintext instead (as an HTTP/1.1 server). It stops with
// the test.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if cfg == nil {
					_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
					_, _ = io.Copy(io.Discard, c) // until the client gives up: no reset of unread data
					return
				}
				_ = tls.Server(c, cfg).Handshake()
			}()
		}
	}()
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	return lis.Addr().String()
}

// selfSigned returns a certificate for 127.0.0.1 and the name "server", and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"server"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k, Leaf: leaf}, roots
}

// The errors of failed TLS handshakes reach the load balancer with their crypto/tls and
// crypto/x509 types (gRPC's ConnectionError and crypto/tls's own wrappers unwrap), so
// ClassifyConnError tells them apart by type: a plaintext peer and a certificate that fails
// verification are tls; an alert the server answers with (internal_error) is handshake.
func TestHandshakeErrorsReachTheBalancerWithTheirTypes(t *testing.T) {
	cert, roots := selfSigned(t)
	_, otherRoots := selfSigned(t)
	serving := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	alerting := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return nil, errors.New("overloaded") // crypto/tls answers with an internal_error alert
	}}
	isRecord := func(err error) bool { var e tls.RecordHeaderError; return errors.As(err, &e) }
	isHostname := func(err error) bool { var e x509.HostnameError; return errors.As(err, &e) }
	isAuthority := func(err error) bool { var e x509.UnknownAuthorityError; return errors.As(err, &e) }
	isAlert := func(err error) bool { var e *net.OpError; return errors.As(err, &e) && e.Op == "remote error" }
	for _, tc := range []struct {
		name     string
		server   *tls.Config // nil: plaintext
		client   *tls.Config
		wantType func(error) bool
		want     ConnErrorKind
	}{
		{"plaintext peer", nil, &tls.Config{ServerName: "server", RootCAs: roots}, isRecord, KindTLS},
		{"certificate for another name", serving, &tls.Config{ServerName: "other.example", RootCAs: roots}, isHostname, KindTLS},
		{"certificate of an unknown authority", serving, &tls.Config{ServerName: "server", RootCAs: otherRoots}, isAuthority, KindTLS},
		{"internal_error alert", alerting, &tls.Config{ServerName: "server", RootCAs: roots}, isAlert, KindHandshake},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := firstConnError(t, serveTLS(t, tc.server), credentials.NewTLS(tc.client))
			if !tc.wantType(err) {
				t.Errorf("%v: not of the expected type through gRPC's wrapping", err)
			}
			if got := ClassifyConnError(err); got != tc.want {
				t.Errorf("ClassifyConnError(%v) = %q, want %q", err, got, tc.want)
			}
		})
	}
}
