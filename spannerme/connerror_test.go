package spannerme

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"

	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/testutil"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// The public kinds are the pool's, by name: Status converts one into the other by string.
func TestConnErrorKindsArePoolKinds(t *testing.T) {
	for public, internal := range map[ConnErrorKind]pool.ConnErrorKind{
		ConnDNS: pool.KindDNS, ConnRefused: pool.KindRefused, ConnUnreachable: pool.KindUnreachable,
		ConnTimeout: pool.KindTimeout, ConnTLS: pool.KindTLS, ConnHandshake: pool.KindHandshake,
		ConnReset: pool.KindReset, ConnClosed: pool.KindClosed, ConnOther: pool.KindOther,
	} {
		if string(public) != string(internal) {
			t.Errorf("spannerme kind %q, pool kind %q", public, internal)
		}
	}
}

// closedAddr returns a loopback address where nothing listens: connections are refused.
func closedAddr(tb testing.TB) string {
	tb.Helper()
	return testutil.ClosedAddr(tb)
}

// startTCPServer starts a TCP listener that hands every connection to serve, on the
// accepting goroutine, then closes it.
func startTCPServer(tb testing.TB, serve func(net.Conn)) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			serve(c)
			c.Close()
		}
	}()
	tb.Cleanup(func() { lis.Close(); <-done })
	return lis.Addr().String()
}

// resetAtOnce closes each connection with unread data: the kernel resets it.
func resetAtOnce(c net.Conn) {
	buf := make([]byte, 1)
	c.SetReadDeadline(time.Now().Add(time.Second))
	c.Read(buf)
}

// answerHTTP1 answers each connection as an HTTP/1.1 server does to a bad request: no HTTP/2.
func answerHTTP1(c net.Conn) {
	c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, c)
}

// nxdomainResolver resolves the "dns" scheme by reporting that no name exists, as gRPC's
// DNS resolver reports NXDOMAIN, without a DNS query.
type nxdomainResolver struct{}

func (nxdomainResolver) Scheme() string { return "dns" }

// Build starts a resolver that fails now and again every 50ms, as gRPC's DNS resolver
// retries with backoff, until it is closed.
func (nxdomainResolver) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	r := &nxdomain{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			cc.ReportError(fmt.Errorf("dns: A record lookup error: %w", &net.DNSError{Err: "no such host", Name: t.Endpoint(), IsNotFound: true}))
			select {
			case <-r.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return r, nil
}

type nxdomain struct{ stop, done chan struct{} }

func (r *nxdomain) ResolveNow(resolver.ResolveNowOptions) {}

func (r *nxdomain) Close() { close(r.stop); <-r.done }

// oneChannel is a GRPCgcpConfig with a pool of one channel, so that one connection attempt
// is one connection.
var oneChannel = &pb.ApiConfig{ChannelPool: &pb.ChannelPoolConfig{MaxSize: 1}}

// An endpoint that cannot be reached is named, with the classified reason, in Status and in
// exactly one log line, whatever the number of retries: for each way a connection fails.
// (The time this takes is measured by BenchmarkUnreachableReported.)
func TestUnreachableEndpointNamedWithReason(t *testing.T) {
	tlsCreds := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{ServerName: "spanner.googleapis.com"}))
	for _, tc := range []struct {
		name     string
		endpoint func(t *testing.T) string
		want     ConnErrorKind
		setup    func(s *Settings)
		dns      resolver.Builder // for the "dns" scheme; nil: gRPC's
		opts     []grpc.DialOption
	}{
		{name: "refused", endpoint: func(t *testing.T) string { return closedAddr(t) }, want: ConnRefused},
		{name: "no such host", endpoint: func(*testing.T) string { return "nowhere.invalid:443" }, want: ConnDNS,
			dns: nxdomainResolver{}},
		{name: "handshake never completes", want: ConnTimeout,
			endpoint: func(t *testing.T) string {
				e := spannermetest.NewEndpointTB(t, startServer(t, "E1"))
				e.Blackhole()
				return e.Addr()
			},
			setup: func(s *Settings) { s.MinConnectTimeout = 300 * time.Millisecond }},
		{name: "TLS to a plaintext server", endpoint: func(t *testing.T) string { return startServer(t, "E1") }, want: ConnTLS,
			opts: []grpc.DialOption{tlsCreds}},
		{name: "server resets at once", endpoint: func(t *testing.T) string { return startTCPServer(t, resetAtOnce) }, want: ConnReset},
		{name: "server speaks HTTP/1.1", endpoint: func(t *testing.T) string { return startTCPServer(t, answerHTTP1) }, want: ConnHandshake},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &syncBuffer{}
			s := fastSettings(logs)
			s.ReconnectMaxDelay = 50 * time.Millisecond // many retries: still one line
			if tc.setup != nil {
				tc.setup(&s)
			}
			bad := tc.endpoint(t)
			o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(time.Hour, 0, bad)})
			o.GRPCgcpConfig = oneChannel
			gme := newGMEWith(t, o, s, plumbing{dns: tc.dns}, tc.opts...)
			var got *ConnError
			eventually(t, 10*time.Second, "the connection error in Status", func() bool {
				p, ok := poolOf(gme, bad)
				got = p.LastError
				return ok && got != nil
			})
			if got.Kind != tc.want {
				t.Fatalf("LastError = %v, want kind %q", got, tc.want)
			}
			line := "endpoint=" + bad
			eventually(t, 10*time.Second, "the log line", func() bool { return strings.Contains(logs.String(), line) })
			// Once it has failed again, still one line.
			first := got.At
			eventually(t, 10*time.Second, "a later failed attempt", func() bool {
				p, _ := poolOf(gme, bad)
				return p.LastError != nil && p.LastError.At.After(first)
			})
			var lines []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, line) {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "kind="+string(tc.want)) || !strings.Contains(lines[0], "level=WARN") {
				t.Fatalf("log lines naming %s: %q; want one WARN line with kind=%s", bad, lines, tc.want)
			}
			t.Logf("%s", lines[0])
		})
	}
}

// BenchmarkUnreachableReported measures how long after construction an endpoint that refuses
// connections is named, with its reason, both in Status and in the log: the time of its first
// failed connection attempt plus the reporting.
//
//	go test -run '^$' -bench UnreachableReported -benchtime 20x ./spannerme/
func BenchmarkUnreachableReported(b *testing.B) {
	var total time.Duration
	for range b.N {
		b.StopTimer()
		bad := closedAddr(b)
		logs := &syncBuffer{}
		o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(time.Hour, 0, bad)})
		b.StartTimer()
		start := time.Now()
		gme, err := NewGCPMultiEndpointWithSettings(o, fastSettings(logs), insecureDial)
		if err != nil {
			b.Fatal(err)
		}
		for {
			p, _ := poolOf(gme, bad)
			if p.LastError != nil && strings.Contains(logs.String(), "endpoint="+bad) {
				break
			}
			if time.Since(start) > 10*time.Second {
				b.Fatalf("not reported within 10s")
			}
			time.Sleep(100 * time.Microsecond)
		}
		total += time.Since(start)
		b.StopTimer()
		gme.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-report")
}
