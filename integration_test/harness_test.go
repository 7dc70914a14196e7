package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/testutil"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// The durations every scenario uses, unless it says otherwise.
const (
	recoveryTimeout = 500 * time.Millisecond
	switchingDelay  = 500 * time.Millisecond
	// controlBytes is the most an idle connection may carry from the backend (HTTP/2 control
	// frames: a ping acknowledgement, a window update); more means it served a call.
	controlBytes = 64
	// minConnectTimeout bounds one connection attempt (Settings.MinConnectTimeout).
	minConnectTimeout = time.Second
	// poll is the interval of every polling loop.
	poll = 5 * time.Millisecond
)

// harness is one test's client: three fake PSC endpoints in front of ONE backend, and a
// multi-endpoint Spanner client over them.
type harness struct {
	t        *testing.T
	b        backend
	e1       *spannermetest.Endpoint
	e2       *spannermetest.Endpoint
	e3       *spannermetest.Endpoint
	eps      []*spannermetest.Endpoint
	client   *spanner.Client
	gme      *spannerme.GCPMultiEndpoint
	logs     *syncBuffer
	switches *switchLog
	timeline *syncBuffer // state changes seen by recordTimeline, printed if the test fails
	start    time.Time   // when the harness was created: the timeline's zero
}

// newHarness starts three endpoints in front of b, builds the client with the configuration
// cfg returns for their addresses, waits until every configured endpoint's pool is READY and
// makes one query (so that the session exists). Everything is closed at the end of the test;
// the client's logs and status are printed if the test failed.
func newHarness(t *testing.T, b backend, cfg func(e1, e2, e3 string) *grpcgcp.GCPMultiEndpointOptions) *harness {
	t.Helper()
	h := &harness{t: t, b: b, logs: &syncBuffer{}, switches: &switchLog{}, timeline: &syncBuffer{}, start: time.Now()}
	for range 3 {
		h.eps = append(h.eps, spannermetest.NewEndpointTB(t, b.addr))
	}
	h.e1, h.e2, h.e3 = h.eps[0], h.eps[1], h.eps[2]
	o := cfg(h.e1.Addr(), h.e2.Addr(), h.e3.Addr())
	settings := spannerme.Settings{
		ReconnectMaxDelay: 200 * time.Millisecond,
		MinConnectTimeout: minConnectTimeout,
		Logger:            slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnSwitch:          h.switches.add,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, settings,
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatalf("NewMultiEndpointClientWithSettings: %v", err)
	}
	h.client, h.gme = client, gme
	stopTimeline := h.recordTimeline()
	t.Cleanup(func() {
		stopTimeline()
		if t.Failed() {
			t.Logf("client status at the end:\n%s", h.statusString())
			t.Logf("client log:\n%s", h.logs.String())
			t.Logf("timeline (every change of the groups' and pools' states, polled every 2ms):\n%s", h.timeline.String())
		}
		// Bounded: a hang here would otherwise hang the whole test binary.
		if d, ok := closeWithin(10*time.Second, func() { client.Close(); gme.Close() }); !ok {
			t.Errorf("closing the client did not return within %v", d)
		}
	})
	for _, g := range o.MultiEndpoints {
		for _, e := range g.Endpoints {
			h.waitFor(10*time.Second, h.name(e)+" READY", func() bool { return h.pool(e).Connectivity == "READY" })
		}
	}
	if err := h.countAccounts(ctx); err != nil {
		t.Fatalf("first query: %v", err)
	}
	return h
}

// recordTimeline polls the client's status every 2ms and writes every change, with the time
// since the harness started and each endpoint's state and its start, to h.timeline. It
// returns a function that stops it and waits.
func (h *harness) recordTimeline() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		for {
			var b strings.Builder
			st := h.gme.Status()
			for _, g := range st.Groups {
				fmt.Fprintf(&b, "%s->%s[", g.Name, h.name(g.Current))
				for _, e := range g.Endpoints {
					fmt.Fprintf(&b, " %s=%v@%s", h.name(e.Endpoint), e.State, h.since(e.Since))
				}
				b.WriteString(" ] ")
			}
			for _, p := range st.Pools {
				fmt.Fprintf(&b, "%s:%s ", h.name(p.Endpoint), p.Connectivity)
			}
			if cur := b.String(); cur != last {
				fmt.Fprintf(h.timeline, "  %s %s\n", h.since(time.Now()), cur)
				last = cur
			}
			select {
			case <-quit:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() { close(quit); <-done }
}

// since formats t relative to the harness's start: "+1.234s".
func (h *harness) since(t time.Time) string { return "+" + ms(t.Sub(h.start)) }

// mark writes a line into the timeline, e.g. a fault injected by the test.
func (h *harness) mark(what string) {
	fmt.Fprintf(h.timeline, "  %s *** %s\n", h.since(time.Now()), what)
}

// waitSwitch waits until the switch event of group to endpoint to (at or after since) has
// been delivered: events reach Settings.OnSwitch asynchronously, after Current changed.
func (h *harness) waitSwitch(group, to string, since time.Time) spannerme.SwitchEvent {
	h.t.Helper()
	var ev spannerme.SwitchEvent
	h.waitFor(5*time.Second, "switch event to "+h.name(to), func() bool {
		var ok bool
		ev, ok = h.switches.find(group, to, since)
		return ok
	})
	return ev
}

// closeWithin runs f in a goroutine and waits up to limit for it; it returns how long f took
// (or limit) and whether it returned.
func closeWithin(limit time.Duration, f func()) (time.Duration, bool) {
	start := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return time.Since(start), true
	case <-time.After(limit):
		return limit, false
	}
}

// multiendpointOptions is one group's configuration (upstream's type).
type multiendpointOptions = multiendpoint.MultiEndpointOptions

// options builds a configuration; the default group is "default".
func options(groups map[string]*multiendpointOptions) *grpcgcp.GCPMultiEndpointOptions {
	return &grpcgcp.GCPMultiEndpointOptions{MultiEndpoints: groups, Default: "default"}
}

func group(rt, sd time.Duration, endpoints ...string) *multiendpointOptions {
	return &multiendpointOptions{Endpoints: endpoints, RecoveryTimeout: rt, SwitchingDelay: sd}
}

// name returns "e1", "e2" or "e3" for an endpoint address, for messages.
func (h *harness) name(addr string) string {
	for i, e := range h.eps {
		if e.Addr() == addr {
			return fmt.Sprintf("e%d", i+1)
		}
	}
	if addr == "" {
		return "none"
	}
	return addr
}

// waitFor polls cond every 5ms until it holds; it fails the test after within.
func (h *harness) waitFor(within time.Duration, what string, cond func() bool) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			h.t.Fatalf("timed out after %v waiting for %s; status:\n%s", within, what, h.statusString())
		case <-time.After(poll):
		}
	}
}

// group returns the status of the named group (zero if absent).
func (h *harness) group(name string) spannerme.GroupStatus {
	for _, g := range h.gme.Status().Groups {
		if g.Name == name {
			return g
		}
	}
	return spannerme.GroupStatus{}
}

// endpointState returns the state and its start of endpoint addr in group name.
func (h *harness) endpointState(name, addr string) (spannerme.EndpointStatus, bool) {
	for _, e := range h.group(name).Endpoints {
		if e.Endpoint == addr {
			return e, true
		}
	}
	return spannerme.EndpointStatus{}, false
}

// pool returns the status of the (non-retired, if any) pool of endpoint addr.
func (h *harness) pool(addr string) spannerme.PoolStatus {
	for _, p := range h.gme.Status().Pools {
		if p.Endpoint == addr {
			return p // non-retired first
		}
	}
	return spannerme.PoolStatus{}
}

func (h *harness) hasPool(addr string) bool {
	for _, p := range h.gme.Status().Pools {
		if p.Endpoint == addr {
			return true
		}
	}
	return false
}

func (h *harness) statusString() string {
	var b strings.Builder
	s := h.gme.Status()
	for _, g := range s.Groups {
		fmt.Fprintf(&b, "  group %s current=%s pending=%s rt=%v sd=%v:", g.Name, h.name(g.Current), h.name(g.PendingSwitch), g.RecoveryTimeout, g.SwitchingDelay)
		for _, e := range g.Endpoints {
			fmt.Fprintf(&b, " %s=%v", h.name(e.Endpoint), e.State)
		}
		b.WriteString("\n")
	}
	for _, p := range s.Pools {
		fmt.Fprintf(&b, "  pool %s %s in-flight=%d retired=%v\n", h.name(p.Endpoint), p.Connectivity, p.InFlight, p.Retired)
	}
	for i, e := range h.eps {
		fmt.Fprintf(&b, "  endpoint e%d mode=%v %+v\n", i+1, e.Mode(), e.Stats())
	}
	fmt.Fprintf(&b, "  unknown groups %v, closed %v\n", s.UnknownGroups, s.Closed)
	return b.String()
}

// bytesFrom returns every endpoint's BytesFromBackend.
func (h *harness) bytesFrom() []int64 {
	out := make([]int64, len(h.eps))
	for i, e := range h.eps {
		out[i] = e.Stats().BytesFromBackend
	}
	return out
}

// served runs f and reports, per endpoint, whether it carried more than controlBytes from
// the backend meanwhile.
func (h *harness) served(f func()) []bool {
	before := h.bytesFrom()
	f()
	after := h.bytesFrom()
	out := make([]bool, len(h.eps))
	for i := range out {
		out[i] = after[i]-before[i] > controlBytes
	}
	return out
}

// quiesce waits until no byte moved through any endpoint for 100ms, so that byte counters
// then tell which endpoint served a call.
func (h *harness) quiesce() {
	h.t.Helper()
	last := ""
	stableSince := time.Now()
	h.waitFor(10*time.Second, "endpoints quiet", func() bool {
		var cur strings.Builder
		for _, e := range h.eps {
			s := e.Stats()
			fmt.Fprint(&cur, s.BytesFromBackend, s.BytesToBackend, " ")
		}
		if cur.String() != last {
			last, stableSince = cur.String(), time.Now()
		}
		return time.Since(stableSince) >= 100*time.Millisecond
	})
}

// waitServing waits until, within one 100ms window, every endpoint in want carried more than
// controlBytes from the backend and no other did: traffic under load has settled there. It
// returns when that window ended.
func (h *harness) waitServing(within time.Duration, what string, want ...*spannermetest.Endpoint) time.Time {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	wanted := make([]bool, len(h.eps))
	for _, w := range want {
		for i, e := range h.eps {
			if e == w {
				wanted[i] = true
			}
		}
	}
	var got []int64
	for {
		before := h.bytesFrom()
		select {
		case <-ctx.Done():
			h.t.Fatalf("timed out after %v waiting for %s (last window's bytes per endpoint: %v); status:\n%s", within, what, got, h.statusString())
		case <-time.After(100 * time.Millisecond):
		}
		after := h.bytesFrom()
		got = make([]int64, len(h.eps))
		ok := true
		for i := range h.eps {
			got[i] = after[i] - before[i]
			if (got[i] > controlBytes) != wanted[i] {
				ok = false
			}
		}
		if ok {
			return time.Now()
		}
	}
}

// countAccounts runs a query and checks its answer against the seed.
func (h *harness) countAccounts(ctx context.Context) error {
	return countAccounts(ctx, h.client)
}

func countAccounts(ctx context.Context, client *spanner.Client) error {
	var n int64
	err := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT COUNT(*) FROM Accounts"}).Do(func(r *spanner.Row) error {
		return r.Column(0, &n)
	})
	if err == nil && n != int64(len(seedAccounts)) {
		err = fmt.Errorf("SELECT COUNT(*) FROM Accounts = %d, want %d", n, len(seedAccounts))
	}
	return err
}

// seedAccounts are the Accounts rows of testdata/seed.sql.
var seedAccounts = func() []fixture.Account {
	a, err := fixture.Accounts()
	if err != nil {
		panic(err)
	}
	return a
}()

// switchLog records the client's switch events (Settings.OnSwitch), with their exact times.
type switchLog struct {
	mu     sync.Mutex
	events []spannerme.SwitchEvent
}

func (l *switchLog) add(ev spannerme.SwitchEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev)
}

// find returns the first switch of group to endpoint to at or after since.
func (l *switchLog) find(group, to string, since time.Time) (spannerme.SwitchEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.events {
		if ev.Name == group && ev.To == to && !ev.At.Before(since) {
			return ev, true
		}
	}
	return spannerme.SwitchEvent{}, false
}

// syncBuffer collects the client's log for a test.
type syncBuffer = testutil.SyncBuffer

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }
