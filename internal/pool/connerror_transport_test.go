package pool

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"

	"github.com/spannerme/spanner-multiendpoint/internal/testutil"
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
	//lint:ignore SA1019 pick_first creates its SubConns so: the wrapper forwards the call
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

// serveTLS runs the TLS handshake of cfg on each connection on 127.0.0.1:0, then closes it;
// a nil cfg answers in plaintext instead (as an HTTP/1.1 server). It returns the address.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	return testutil.Serve(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if cfg == nil {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
			_, _ = io.Copy(io.Discard, c) // until the client gives up: no reset of unread data
			return
		}
		_ = tls.Server(c, cfg).Handshake()
	})
}

// The errors of failed TLS handshakes reach the load balancer with their crypto/tls and
// crypto/x509 types (gRPC's ConnectionError and crypto/tls's own wrappers unwrap), so
// ClassifyConnError tells them apart by type: a plaintext peer and a certificate that fails
// verification are tls; an alert the server answers with (internal_error) is handshake.
func TestHandshakeErrorsReachTheBalancerWithTheirTypes(t *testing.T) {
	cert, roots := testutil.SelfSigned(t, "server", net.IPv4(127, 0, 0, 1))
	_, otherRoots := testutil.SelfSigned(t, "server", net.IPv4(127, 0, 0, 1))
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
