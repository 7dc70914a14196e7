package spannerme

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
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
	if r.slowQueries.Load() && hedgeMethodIndex(info.FullMethod) >= 0 {
		<-ss.Context().Done()
		return status.FromContextError(ss.Context().Err()).Err()
	}
	if f := r.crowd.Load(); f != nil && hedgeMethodIndex(info.FullMethod) >= 0 {
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

// newHedgeRigOn is newHedgeRig in front of the backend at addr serving database db.
func newHedgeRigOn(t *testing.T, addr, db string, h *HedgingSettings) *hedgeRig {
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
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, db, fixture.ClientConfig(), o, s, append(clientOptions(), r.log.options()...)...)
	if err != nil {
		t.Fatalf("NewMultiEndpointClientWithSettings: %v", err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	r.client, r.gme = client, gme
	waitConnected(t, gme, r.e1.Addr())
	waitConnected(t, gme, r.e2.Addr())
	eventually(t, 10*time.Second, "E2 available to the group", func() bool {
		p, ok := gme.pickOther(gme.snap.Load().def, r.e1.Addr())
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

// The Spanner client's own requests, recorded at the pools while it runs each kind of
// transaction, decide the table: hedgeable are the streaming queries and reads of
// single-use and read-only transactions, and nothing of read-write transactions, DML,
// partitioned DML, mutations, Commit, Rollback or BeginTransaction. Requests the client
// sends that spannertest cannot serve (partitioned queries, batch DML) are captured on the
// emulator, and a few shapes are added by hand.
func TestHedgeableRequestsOfTheSpannerClient(t *testing.T) {
	// Hedging on, never firing: the IDs of read-only transactions begun inline are learnt
	// from the streams' first messages.
	h := &HedgingSettings{Delay: time.Hour}
	t.Run("spannertest", func(t *testing.T) { hedgeableTable(t, newHedgeRig(t, h), false) })
	t.Run("emulator", func(t *testing.T) {
		addr, db := startSeededEmulator(t)
		hedgeableTable(t, newHedgeRigOn(t, addr, db, h), true)
	})
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

// hedgeableTable runs each shape of transaction through r's Spanner client and checks what
// hedgeable says of each request it sent; emulatorOnly shapes (batch DML, partitioned
// queries: spannertest has neither) run when full is set.
func hedgeableTable(t *testing.T, r *hedgeRig, full bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	drain := func(it *spanner.RowIterator) error {
		defer it.Stop()
		for {
			if _, err := it.Next(); err != nil {
				if errors.Is(err, iterator.Done) {
					return nil
				}
				return err
			}
		}
	}
	query := spanner.Statement{SQL: "SELECT AccountId, Balance FROM Accounts"}
	cols := []string{"AccountId", "Balance"}
	shapes := []struct {
		name         string
		emulatorOnly bool
		run          func() error
		// want: hedgeable per method; every captured call of a method not listed must be
		// not hedgeable, and every method listed must have been seen.
		want map[string]bool
	}{
		{"single-use query", false, func() error { return drain(r.client.Single().Query(ctx, query)) },
			map[string]bool{spannerreq.MethodExecuteStreamingSQL: true}},
		{"single-use read", false, func() error { return drain(r.client.Single().Read(ctx, "Accounts", spanner.AllKeys(), cols)) },
			map[string]bool{spannerreq.MethodStreamingRead: true}},
		{"single-use stale query", false, func() error {
			return drain(r.client.Single().WithTimestampBound(spanner.ExactStaleness(time.Second)).Query(ctx, query))
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: true}},
		{"read-only transaction", false, func() error {
			tx := r.client.ReadOnlyTransaction()
			defer tx.Close()
			if err := drain(tx.Query(ctx, query)); err != nil {
				return err
			}
			return drain(tx.Read(ctx, "Accounts", spanner.AllKeys(), cols))
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: true, spannerreq.MethodStreamingRead: true}},
		{"read-only transaction begun inline", false, func() error {
			tx := r.client.ReadOnlyTransaction().WithBeginTransactionOption(spanner.InlinedBeginTransaction)
			defer tx.Close()
			if err := drain(tx.Query(ctx, query)); err != nil {
				return err
			}
			return drain(tx.Read(ctx, "Accounts", spanner.AllKeys(), cols))
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: false, spannerreq.MethodStreamingRead: true}}, // the begin is not; the read by ID is
		{"read-write transaction query and read", false, func() error {
			_, err := r.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				if err := drain(tx.Query(ctx, query)); err != nil {
					return err
				}
				return drain(tx.Read(ctx, "Accounts", spanner.AllKeys(), cols))
			})
			return err
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: false, spannerreq.MethodStreamingRead: false}},
		{"DML", false, func() error {
			_, err := r.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				_, err := tx.Update(ctx, spanner.Statement{SQL: "UPDATE Accounts SET Balance = Balance WHERE AccountId = 'none'"})
				return err
			})
			return err
		}, map[string]bool{spannerreq.MethodExecuteSQL: false}},
		{"mutations", false, func() error {
			_, err := r.client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("Orders",
				[]string{"OrderId", "AccountId", "Amount"}, []any{"hedge-order", "acct-0001", int64(1)})})
			return err
		}, map[string]bool{spannerreq.Service + "Commit": false}},
		{"rolled back read-write transaction", false, func() error {
			tx, err := spanner.NewReadWriteStmtBasedTransaction(ctx, r.client)
			if err != nil {
				return err
			}
			if err := drain(tx.Query(ctx, query)); err != nil {
				return err
			}
			tx.Rollback(ctx)
			return nil
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: false}},
		{"partitioned DML", false, func() error {
			_, err := r.client.PartitionedUpdate(ctx, spanner.Statement{SQL: "UPDATE Accounts SET Balance = Balance WHERE AccountId = 'none'"})
			return err
		}, map[string]bool{spannerreq.MethodExecuteSQL: false}},
		{"batch DML", true, func() error {
			_, err := r.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				_, err := tx.BatchUpdate(ctx, []spanner.Statement{{SQL: "UPDATE Accounts SET Balance = Balance WHERE AccountId = 'none'"}})
				return err
			})
			return err
		}, map[string]bool{spannerreq.Service + "ExecuteBatchDml": false}},
		{"partitioned query (batch read-only transaction)", true, func() error {
			tx, err := r.client.BatchReadOnlyTransaction(ctx, spanner.StrongRead())
			if err != nil {
				return err
			}
			defer tx.Close()
			parts, err := tx.PartitionQuery(ctx, query, spanner.PartitionOptions{})
			if err != nil {
				return err
			}
			for _, p := range parts {
				if err := drain(tx.Execute(ctx, p)); err != nil {
					return err
				}
			}
			return nil
		}, map[string]bool{spannerreq.MethodExecuteStreamingSQL: false, spannerreq.Service + "PartitionQuery": false}},
	}
	var table []string
	for _, sh := range shapes {
		if sh.emulatorOnly && !full {
			continue
		}
		r.log.take()
		if err := sh.run(); err != nil {
			if status.Code(err) == codes.Unimplemented {
				t.Logf("%s: spannertest cannot serve it: %v", sh.name, err)
				continue
			}
			t.Fatalf("%s: %v", sh.name, err)
		}
		seen := map[string]bool{}
		for _, c := range r.log.take() {
			ctx := metadata.NewOutgoingContext(context.Background(), c.md)
			got := c.stream && hedgeStreamMethod(c.method, &c.desc) && r.gme.roTxns.Hedgeable(ctx, c.req)
			name := strings.TrimPrefix(c.method, spannerreq.Service)
			table = append(table, fmt.Sprintf("%-40s %-20s hedgeable=%v", sh.name, name, got))
			want, listed := sh.want[c.method]
			if listed {
				seen[c.method] = true
			}
			if got != (listed && want) {
				t.Errorf("%s: %s (%v) hedgeable = %v, want %v", sh.name, name, c.req, got, listed && want)
			}
		}
		for m := range sh.want {
			if !seen[m] {
				t.Errorf("%s: the Spanner client sent no %s", sh.name, m)
			}
		}
	}
	t.Logf("requests the Spanner client sent, and whether they are hedgeable:\n%s", strings.Join(table, "\n"))

	// Shapes spannertest cannot serve, and the header: by hand.
	ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	singleUse := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: ro}}
	leader := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(spannerreq.RouteToLeaderHeader, "true"))
	for _, c := range []struct {
		name string
		ctx  context.Context
		req  any
		want bool
	}{
		{"partitioned query", context.Background(), &spannerpb.ExecuteSqlRequest{Transaction: singleUse, PartitionToken: []byte("p")}, false},
		{"partitioned read", context.Background(), &spannerpb.ReadRequest{Transaction: singleUse, PartitionToken: []byte("p")}, false},
		{"single-use query with route-to-leader", leader, &spannerpb.ExecuteSqlRequest{Transaction: singleUse}, false},
		{"query naming an unknown transaction", context.Background(), &spannerpb.ExecuteSqlRequest{
			Transaction: &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: []byte("unseen")}}}, false},
		{"single-use read-write (invalid, never sent)", context.Background(), &spannerpb.ExecuteSqlRequest{Transaction: &spannerpb.TransactionSelector{
			Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: &spannerpb.TransactionOptions{
				Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}}}}, false},
		{"no selector (temporary read-only)", context.Background(), &spannerpb.ExecuteSqlRequest{}, true},
		{"nil query", context.Background(), (*spannerpb.ExecuteSqlRequest)(nil), false},
		{"commit", context.Background(), &spannerpb.CommitRequest{}, false},
		{"batch DML", context.Background(), &spannerpb.ExecuteBatchDmlRequest{}, false},
	} {
		if got := r.gme.roTxns.Hedgeable(c.ctx, c.req); got != c.want {
			t.Errorf("%s: hedgeable = %v, want %v", c.name, got, c.want)
		}
	}
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
	if h := on.gme.hedgingStatus("default"); h.Sent != 0 || h.Hedgeable != 0 {
		t.Errorf("hedging status %+v, want nothing hedgeable or sent", *h)
	}
}
