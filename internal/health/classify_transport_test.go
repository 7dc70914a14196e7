package health

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// connsListener remembers the connections it accepted, so that a test can close them under
// the calls they carry (a frontend restarting).
type connsListener struct {
	net.Listener
	mu    sync.Mutex // guards conns
	conns []net.Conn
}

func (l *connsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connsListener) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a TCP reset, as a crashing frontend sends
		}
		_ = c.Close()
	}
	l.conns = nil
}

// holdServer holds every call until its context ends, except a unary call with body "fail",
// which it answers UNAVAILABLE itself. started receives one value per call held.
type holdServer struct {
	testpb.UnimplementedTestServiceServer
	started chan struct{}
}

func (s *holdServer) UnaryCall(ctx context.Context, r *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if string(r.GetPayload().GetBody()) == "fail" {
		return nil, status.Error(codes.Unavailable, "region down")
	}
	s.started <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *holdServer) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	s.started <- struct{}{}
	<-stream.Context().Done()
	return stream.Context().Err()
}

func startHoldServer(t *testing.T, opts ...grpc.ServerOption) (*connsListener, *holdServer, testpb.TestServiceClient) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &connsListener{Listener: ln}
	hs := &holdServer{started: make(chan struct{}, 16)}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, hs)
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cl, hs, testpb.NewTestServiceClient(cc)
}

// The errors grpc-go itself gives calls on loopback: a server's own UNAVAILABLE is a
// Failure; calls whose connection the server closed (reset) or aged out (GOAWAY, then closed
// after the grace time) are ConnectionLost, unary calls and streams alike.
func TestClassify_RealTransportErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("server answers UNAVAILABLE", func(t *testing.T) {
		_, _, c := startHoldServer(t)
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("fail")}})
		if got := Classify(err, false, false); got != Failure {
			t.Fatalf("Classify(%v) = %v, want failure", err, got)
		}
	})
	t.Run("connection reset under a unary call", func(t *testing.T) {
		cl, hs, c := startHoldServer(t)
		errc := make(chan error, 1)
		go func() {
			_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
			errc <- err
		}()
		<-hs.started
		cl.closeConns()
		err := <-errc
		t.Logf("%v", err)
		if got := Classify(err, false, false); got != ConnectionLost {
			t.Fatalf("Classify(%v) = %v, want connection lost", err, got)
		}
	})
	t.Run("connection reset under a stream", func(t *testing.T) {
		cl, hs, c := startHoldServer(t)
		s, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-hs.started
		cl.closeConns()
		_, err = s.Recv()
		t.Logf("%v", err)
		if got := Classify(err, false, false); got != ConnectionLost {
			t.Fatalf("Classify(%v) = %v, want connection lost", err, got)
		}
	})
	t.Run("GOAWAY and close after the grace time", func(t *testing.T) {
		_, hs, c := startHoldServer(t, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge: 50 * time.Millisecond, MaxConnectionAgeGrace: 50 * time.Millisecond,
		}))
		s, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-hs.started
		_, err = s.Recv() // ends when the server closes the connection after the grace time
		t.Logf("%v", err)
		if got := Classify(err, false, false); got != ConnectionLost {
			t.Fatalf("Classify(%v) = %v, want connection lost", err, got)
		}
	})
}
