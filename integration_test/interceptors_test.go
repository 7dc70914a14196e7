package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
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

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// interceptorSoak is how long TestInterceptorsOverAMinute runs its mixed work.
const interceptorSoak = 61 * time.Second

// opKey marks the context of one operation of the work with its number.
type opKey struct{}

// opCalls is a caller's interceptor that records each call under the operation whose context
// it carries (-1: none, such as the session's creation). Safe for concurrent use.
type opCalls struct {
	mu    sync.Mutex
	calls map[int][]string
}

func (o *opCalls) add(ctx context.Context, call string) {
	id, ok := ctx.Value(opKey{}).(int)
	if !ok {
		id = -1
	}
	o.mu.Lock()
	o.calls[id] = append(o.calls[id], call)
	o.mu.Unlock()
}

func (o *opCalls) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			o.add(ctx, "unary "+shortMethod(method))
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			o.add(ctx, "stream "+shortMethod(method))
			return streamer(ctx, desc, cc, method, opts...)
		})),
	}
}

// of returns op's calls, sorted, as one string.
func (o *opCalls) of(op int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := slices.Clone(o.calls[op])
	sort.Strings(c)
	return strings.Join(c, ", ")
}

// mixedOps are the operations of the mixed work, run in turn: hedgeable streaming queries and
// reads, a read-write transaction begun inline by DML, one with a mutation, a read-only
// transaction of two queries.
var mixedOps = []struct {
	name string
	run  func(ctx context.Context, c *spanner.Client) error
}{
	{"query", func(ctx context.Context, c *spanner.Client) error {
		return c.Single().Query(ctx, spanner.Statement{SQL: "SELECT AccountId FROM Accounts"}).Do(func(*spanner.Row) error { return nil })
	}},
	{"read", func(ctx context.Context, c *spanner.Client) error {
		return c.Single().Read(ctx, "Accounts", spanner.AllKeys(), []string{"AccountId"}).Do(func(*spanner.Row) error { return nil })
	}},
	{"dml transaction", func(ctx context.Context, c *spanner.Client) error {
		_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.Update(ctx, spanner.Statement{SQL: "UPDATE Accounts SET Region = 'soak' WHERE AccountId = 'none'"})
			return err
		})
		return err
	}},
	{"mutation transaction", func(ctx context.Context, c *spanner.Client) error {
		_, err := c.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("Orders",
			[]string{"OrderId", "AccountId", "Amount"}, []any{"soak-order", "soak-account", int64(1)})})
		return err
	}},
	{"read-only transaction", func(ctx context.Context, c *spanner.Client) error {
		tx := c.ReadOnlyTransaction()
		defer tx.Close()
		for range 2 {
			if err := tx.Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil }); err != nil {
				return err
			}
		}
		return nil
	}},
}

// An interceptor passed with option.WithGRPCDialOption sees, over a minute of mixed work
// with health and latency probes every 50ms and a group that hedges every streaming read
// slower than 1ms, exactly what it sees on a plain client doing the same work at the same
// frontend, operation by operation, plus one stream for each hedge sent
// (docs/transport.md, "Interceptors and stats handlers"), and never a probe.
func TestInterceptorsOverAMinute(t *testing.T) {
	b := startSpannertest(t)
	front := spannermetest.NewFrontendTB(t, b.addr)
	e1, e2 := spannermetest.NewEndpointTB(t, front.Addr()), spannermetest.NewEndpointTB(t, front.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), interceptorSoak+60*time.Second)
	defer cancel()
	plainCalls := &opCalls{calls: map[int][]string{}}
	plain, err := spanner.NewClientWithConfig(ctx, b.database, fixture.ClientConfig(),
		append(append(offlineOptions(), option.WithEndpoint(front.Addr())), plainCalls.options()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	meCalls := &opCalls{calls: map[int][]string{}}
	settings := spannerme.Settings{ReconnectMaxDelay: 100 * time.Millisecond, MinConnectTimeout: time.Second,
		Logger:  slog.New(slog.DiscardHandler),
		Hedging: map[string]spannerme.HedgingSettings{"default": {Delay: time.Millisecond, Budget: 1}}}
	settings.Health.ProbeInterval = 50 * time.Millisecond
	settings.Health.Brownout.ProbeInterval = 50 * time.Millisecond
	groups := map[string]*multiendpoint.MultiEndpointOptions{"default": {Endpoints: []string{e1.Addr(), e2.Addr()}}}
	me, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(),
		&grpcgcp.GCPMultiEndpointOptions{MultiEndpoints: groups, Default: "default"}, settings, append(offlineOptions(), meCalls.options()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	defer me.Close()

	// The same work through both clients at once, each operation numbered the same.
	errs := make(chan error, 2)
	end := time.Now().Add(interceptorSoak)
	work := func(c *spanner.Client, id func() int) {
		for time.Now().Before(end) {
			op := id()
			if err := mixedOps[op%len(mixedOps)].run(context.WithValue(ctx, opKey{}, op), c); err != nil {
				errs <- fmt.Errorf("operation %d (%s): %w", op, mixedOps[op%len(mixedOps)].name, err)
				return
			}
		}
		errs <- nil
	}
	var plainOps, meOps atomic.Int64
	go work(plain, func() int { return int(plainOps.Add(1) - 1) })
	go work(me, func() int { return int(meOps.Add(1) - 1) })
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Each spannerme operation's calls against the plain client's same operation (or, past
	// the plain client's last, its first of the same kind); an extra stream of the
	// operation's streaming methods is a hedge.
	extra := 0
	for op := range int(meOps.Load()) {
		ref := op
		if int64(op) >= plainOps.Load() {
			ref = op % len(mixedOps)
		}
		want, got := plainCalls.of(ref), meCalls.of(op)
		if want == got {
			continue
		}
		g := strings.Split(got, ", ")
		for _, m := range []string{"stream ExecuteStreamingSql", "stream StreamingRead"} {
			for strings.Count(strings.Join(g, ", "), m) > strings.Count(want, m) {
				g = slices.Delete(g, slices.Index(g, m), slices.Index(g, m)+1)
				extra++
			}
		}
		if strings.Join(g, ", ") != want {
			t.Errorf("operation %d (%s): the interceptor saw\n\tplain:     %s\n\tspannerme: %s", op, mixedOps[op%len(mixedOps)].name, want, got)
		}
	}
	if want, got := plainCalls.of(-1), meCalls.of(-1); want != got {
		t.Errorf("calls of no operation (the session; a probe would be one):\n\tplain:     %s\n\tspannerme: %s", want, got)
	}
	h := gme.Status().Groups[0].Hedging
	if h == nil || h.Sent == 0 {
		t.Fatalf("no hedge was sent (%+v): the hedging part of the test tests nothing", h)
	}
	// Each hedge opened is one stream more: Sent counts those whose request went out, and a
	// hedge cancelled while it opened (its primary answered meanwhile) is a stream too; at
	// most one per hedgeable stream.
	if int64(extra) < h.Sent || int64(extra) > h.Hedgeable-h.Refused-h.NoEndpoint {
		t.Errorf("the interceptor saw %d streams more than on the plain client; want between the %d hedges sent and the %d hedgeable streams not refused",
			extra, h.Sent, h.Hedgeable-h.Refused-h.NoEndpoint)
	}
	t.Logf("%v of mixed work: operations plain %d, spannerme %d; the interceptor saw the plain client's calls plus %d hedge streams (hedges: %s); calls of no operation: %s",
		interceptorSoak, plainOps.Load(), meOps.Load(), extra, h, meCalls.of(-1))
}
