package spannerme

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// capturedCall is a call a pool sent, as the Spanner client made it: its method, its
// outgoing metadata and its request (a copy).
type capturedCall struct {
	method string
	md     metadata.MD
	req    proto.Message
	stream bool
	desc   grpc.StreamDesc
}

// captureLog records the calls of the pools it is a dial option of.
type captureLog struct {
	mu    sync.Mutex
	calls []capturedCall
}

func (l *captureLog) add(c capturedCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

// take returns the calls recorded since the last take.
func (l *captureLog) take() []capturedCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.calls
	l.calls = nil
	return out
}

// options are the client options that make every pool record its calls into l.
func (l *captureLog) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				md, _ := metadata.FromOutgoingContext(ctx)
				if m, ok := req.(proto.Message); ok {
					l.add(capturedCall{method: method, md: md, req: proto.Clone(m)})
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return nil, err
				}
				md, _ := metadata.FromOutgoingContext(ctx)
				return &capturingStream{ClientStream: cs, log: l, call: capturedCall{method: method, md: md, stream: true, desc: *desc}}, nil
			})),
	}
}

type capturingStream struct {
	grpc.ClientStream
	log  *captureLog
	call capturedCall
	once sync.Once
}

func (s *capturingStream) SendMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		s.once.Do(func() {
			c := s.call
			c.req = proto.Clone(pm)
			s.log.add(c)
		})
	}
	return s.ClientStream.SendMsg(m)
}

// hedgeRig is a Spanner client over one group of two frontends, E1 (current) and E2, in
// front of one seeded spannertest.
type hedgeRig struct {
	e1, e2 *spannermetest.Frontend
	client *spanner.Client
	gme    *GCPMultiEndpoint
	log    *captureLog
	// slowQueries makes E1 hold its streaming queries and reads (not its other calls) until
	// they are cancelled.
	slowQueries atomic.Bool
	// crowd, when set, delays E1's streaming queries and reads by what it returns (zero: not
	// delayed), before they are served.
	crowd atomic.Pointer[func() time.Duration]
}

// servedByHeader names, in a response's header, the frontend that answered.
const servedByHeader = "spannerme-test-served-by"

// servedBy is a frontend's server interceptor that answers every call with servedByHeader.
func servedBy(name string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		_ = ss.SetHeader(metadata.Pairs(servedByHeader, name))
		return handler(srv, ss)
	}
}

// holdQueries is E1's server interceptor: while r.slowQueries is set, a streaming query or
// read waits for its caller to give up.
func (r *hedgeRig) holdQueries(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if r.slowQueries.Load() && hedge.Method(info.FullMethod) {
		<-ss.Context().Done()
		return status.FromContextError(ss.Context().Err()).Err()
	}
	if f := r.crowd.Load(); f != nil && hedge.Method(info.FullMethod) {
		if d := (*f)(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ss.Context().Done():
				t.Stop()
				return status.FromContextError(ss.Context().Err()).Err()
			}
		}
	}
	return handler(srv, ss)
}

// newHedgeRig builds a hedgeRig whose group "default" hedges with h (nil: no hedging).
// Brownout detection is off: E1's injected latency must not make the group leave it.
func newHedgeRig(t *testing.T, h *HedgingSettings) *hedgeRig {
	t.Helper()
	addr, db := startSeededSpannertest(t)
	return newHedgeRigOn(t, addr, db, h)
}

// newHedgeRigOn is newHedgeRig in front of the backend at addr serving database db, with
// extra client options after the rig's.
func newHedgeRigOn(t *testing.T, addr, db string, h *HedgingSettings, extra ...option.ClientOption) *hedgeRig {
	t.Helper()
	r := &hedgeRig{log: &captureLog{}}
	r.e1 = spannermetest.NewFrontendTB(t, addr, spannermetest.WithSeed(1),
		spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(servedBy("e1"), r.holdQueries)))
	r.e2 = spannermetest.NewFrontendTB(t, addr, spannermetest.WithSeed(2),
		spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(servedBy("e2"))))
	s := fastSettings(nil)
	s.Health.Brownout.Disabled = true
	if h != nil {
		s.Hedging = map[string]HedgingSettings{"default": *h}
	}
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, r.e1.Addr(), r.e2.Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, db, fixture.ClientConfig(), o, s, append(append(clientOptions(), r.log.options()...), extra...)...)
	if err != nil {
		t.Fatalf("NewMultiEndpointClientWithSettings: %v", err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	r.client, r.gme = client, gme
	waitConnected(t, gme, r.e1.Addr())
	waitConnected(t, gme, r.e2.Addr())
	eventually(t, 10*time.Second, "E2 available to the group", func() bool {
		p, ok := gme.steering.Other(gme.snap.Load().Default.ME, r.e1.Addr())
		if ok {
			p.Release()
		}
		return ok
	})
	return r
}

// streamsReceived is how many streaming queries and reads f received.
func streamsReceived(f *spannermetest.Frontend) int64 {
	st := f.Stats()
	return st.Methods[spannerreq.MethodExecuteStreamingSQL].Received + st.Methods[spannerreq.MethodStreamingRead].Received
}

// startSeededEmulator starts an emulator (or skips the test without one) with the fixture's
// schema and rows, and returns its address and database.
func startSeededEmulator(t *testing.T) (addr, database string) {
	t.Helper()
	schema, err := fixture.Schema()
	if err != nil {
		t.Fatal(err)
	}
	emu := emulator.StartTB(t, emulator.Options{DDL: schema})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct, err := fixture.NewClient(ctx, emu.Addr(), emu.DatabasePath())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := fixture.Seed(ctx, direct); err != nil {
		t.Fatal(err)
	}
	return emu.Addr(), emu.DatabasePath()
}

// requestShapes are the method names of calls other than session calls, sorted, for
// comparing two runs.
func requestShapes(calls []capturedCall) []string {
	var out []string
	for _, c := range calls {
		if spannerreq.Class(c.method, nil) == health.Sessions {
			continue // the client's own session upkeep, on its own schedule
		}
		out = append(out, strings.TrimPrefix(c.method, spannerreq.Service))
	}
	sort.Strings(out)
	return out
}

// A workload of read-write transactions, DML and mutations sends exactly the
// same requests with hedging on (hedging every hedgeable stream at once) as off: the same
// calls to E1, none to E2, no hedge.
func TestHedgingLeavesWritesAlone(t *testing.T) {
	workload := func(t *testing.T, r *hedgeRig) []capturedCall {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r.log.take()
		r.e1.ResetStats()
		r.e2.ResetStats()
		for i := range 3 {
			_, err := r.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				it := tx.Query(ctx, spanner.Statement{SQL: "SELECT Balance FROM Accounts WHERE AccountId = 'acct-0001'"})
				if err := it.Do(func(*spanner.Row) error { return nil }); err != nil {
					return err
				}
				if _, err := tx.Update(ctx, spanner.Statement{SQL: "UPDATE Accounts SET Balance = Balance + 1 WHERE AccountId = 'acct-0001'"}); err != nil {
					return err
				}
				return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("Orders",
					[]string{"OrderId", "AccountId", "Amount"}, []any{fmt.Sprintf("w-%d", i), "acct-0001", int64(i)})})
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("Orders",
				[]string{"OrderId", "AccountId", "Amount"}, []any{fmt.Sprintf("m-%d", i), "acct-0001", int64(i)})}); err != nil {
				t.Fatal(err)
			}
		}
		if n := r.e2.Stats().Received; n != 0 {
			t.Errorf("E2 received %d calls, want none", n)
		}
		return r.log.take()
	}
	off := workload(t, newHedgeRig(t, nil))
	on := newHedgeRig(t, &HedgingSettings{Delay: time.Nanosecond, Budget: 1})
	got := workload(t, on)
	if a, b := requestShapes(off), requestShapes(got); !slices.Equal(a, b) {
		t.Errorf("requests with hedging on:\n%v\nwant those with hedging off:\n%v", b, a)
	}
	if h := hedgingStatusOf(on.gme.hedger.Group("default")); h.Sent != 0 || h.Hedgeable != 0 {
		t.Errorf("hedging status %+v, want nothing hedgeable or sent", *h)
	}
}
