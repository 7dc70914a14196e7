package pool

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// scriptServer is a loopback gRPC server whose every method reads one request, records it
// with its "x-id" header, and answers as its script says.
type scriptServer struct {
	mu     sync.Mutex
	reqs   []string // "x-id/request"
	script func(ss grpc.ServerStream, req string) error
}

func (s *scriptServer) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// scriptPool starts a scriptServer and returns a READY pool over it.
func scriptPool(t *testing.T, script func(ss grpc.ServerStream, req string) error) (*Pool, *scriptServer) {
	t.Helper()
	s := &scriptServer{script: script}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var req wrapperspb.StringValue
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		md, _ := metadata.FromIncomingContext(ss.Context())
		s.mu.Lock()
		s.reqs = append(s.reqs, firstValue(md.Get("x-id"))+"/"+req.GetValue())
		s.mu.Unlock()
		return s.script(ss, req.GetValue())
	}))
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := New(ln.Addr().String(), conn, Options{Observer: &recordingObserver{}})
	t.Cleanup(func() { p.Close() })
	p.StartMonitor()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn.Connect()
	for p.State() != connectivity.Ready {
		if ctx.Err() != nil {
			t.Fatalf("pool not READY: %v", p.State())
		}
		time.Sleep(5 * time.Millisecond) // polling a real connection's state, bounded by ctx
	}
	return p, s
}

func firstValue(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

var errUnavailable = status.Error(codes.Unavailable, "scripted UNAVAILABLE")

// A server-streaming stream with a Resend hook is sent again, once, to the pool the hook
// gives, exactly when it failed before any response message; the caller reads only the
// stream it ends up with; both pools count nothing in flight afterwards.
func TestStreamResend(t *testing.T) {
	answer := func(ss grpc.ServerStream, req string) error {
		if err := ss.SetHeader(metadata.Pairs("from", "b")); err != nil {
			return err
		}
		if err := ss.SendMsg(wrapperspb.String("b:" + req)); err != nil {
			return err
		}
		ss.SetTrailer(metadata.Pairs("trailer", "b"))
		return nil
	}
	for _, tc := range []struct {
		name     string
		a, b     func(ss grpc.ServerStream, req string) error
		hookSays bool
		// want: what the caller reads (messages, then the code that ends the stream), the
		// hook's calls, the requests B received.
		want     []string
		wantCode codes.Code
		hooked   int
		bGot     int
	}{
		{"failed before any message: resent", func(grpc.ServerStream, string) error { return errUnavailable }, answer, true,
			[]string{"b:q"}, codes.OK, 1, 1},
		{"failed after the header, before any message: resent", func(ss grpc.ServerStream, _ string) error {
			if err := ss.SendHeader(metadata.Pairs("from", "a")); err != nil {
				return err
			}
			return errUnavailable
		}, answer, true, []string{"b:q"}, codes.OK, 1, 1},
		{"failed after a message: never resent", func(ss grpc.ServerStream, req string) error {
			if err := ss.SendMsg(wrapperspb.String("a:" + req)); err != nil {
				return err
			}
			return errUnavailable
		}, answer, true, []string{"a:q"}, codes.Unavailable, 0, 0},
		{"ended well without a message: not resent", func(grpc.ServerStream, string) error { return nil }, answer, true,
			nil, codes.OK, 0, 0},
		{"the hook says no", func(grpc.ServerStream, string) error { return errUnavailable }, answer, false,
			nil, codes.Unavailable, 1, 0},
		{"the resend fails too: its error, no second resend", func(grpc.ServerStream, string) error { return errUnavailable },
			func(grpc.ServerStream, string) error { return status.Error(codes.ResourceExhausted, "b too") }, true,
			nil, codes.ResourceExhausted, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pa, sa := scriptPool(t, tc.a)
			pb, sb := scriptPool(t, tc.b)
			var hooked atomic.Int32
			hook := func(r ResendRequest) (*Pool, CallInfo, bool) {
				hooked.Add(1)
				if r.Pool != pa || status.Code(r.Err) != codes.Unavailable || r.Req.(*wrapperspb.StringValue).GetValue() != "q" {
					t.Errorf("hook asked about pool %v, error %v, request %v", r.Pool.Endpoint(), r.Err, r.Req)
				}
				if !tc.hookSays || !pb.Acquire() {
					return nil, CallInfo{}, false
				}
				return pb, CallInfo{Tag: "resent"}, true
			}
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-id", "req.1"), 10*time.Second)
			defer cancel()
			if !pa.Acquire() {
				t.Fatal("acquire")
			}
			var header metadata.MD
			cs, err := pa.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/t.S/M", []grpc.CallOption{grpc.Header(&header)}, CallInfo{Resend: hook})
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(wrapperspb.String("q")); err != nil {
				t.Fatal(err)
			}
			if err := cs.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for {
				var m wrapperspb.StringValue
				err = cs.RecvMsg(&m)
				if err != nil {
					break
				}
				got = append(got, m.GetValue())
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
			if status.Code(err) != tc.wantCode || len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Fatalf("read %v, then %v; want %v, then %v", got, err, tc.want, tc.wantCode)
			}
			if n := int(hooked.Load()); n != tc.hooked {
				t.Errorf("hook called %d times, want %d", n, tc.hooked)
			}
			if n := len(sb.got()); n != tc.bGot {
				t.Errorf("B received %v, want %d requests", sb.got(), tc.bGot)
			}
			if tc.bGot > 0 {
				if a, b := sa.got(), sb.got(); a[0] != "req.1/q" || b[0] != a[0] {
					t.Errorf("A received %v, B %v: want the same request with the same header", a, b)
				}
				if tc.wantCode == codes.OK {
					if md, _ := cs.Header(); firstValue(md.Get("from")) != "b" {
						t.Errorf("Header() = %v, want B's", md)
					}
					if firstValue(header.Get("from")) != "b" {
						t.Errorf("the grpc.Header call option got %v, want B's header", header)
					}
					if tr := cs.Trailer(); firstValue(tr.Get("trailer")) != "b" {
						t.Errorf("Trailer() = %v, want B's", tr)
					}
				}
			}
			if s, ok := cs.(*Stream); !ok || s.Resent() != (tc.bGot > 0) {
				t.Errorf("Resent() = %v, want %v", ok && s.Resent(), tc.bGot > 0)
			}
			if a, b := pa.InFlight(), pb.InFlight(); a != 0 || b != 0 {
				t.Errorf("in flight after the stream: A %d, B %d; want 0", a, b)
			}
		})
	}
}
