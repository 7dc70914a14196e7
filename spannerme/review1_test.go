package spannerme

import (
	"github.com/spannerme/spanner-multiendpoint/internal/pool"

	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// Regression tests for defects found in the review of issues 11 and 13.

// Issue 13, defect 3, through the Spanner client: WaitForReady as a default call option given
// in the client options (option.WithGRPCDialOption, the only way to give dial options to
// NewMultiEndpointClient*) behaves as a per-call WaitForReady. Group (RecoveryTimeout 2s)
// [E1, E2], E1 down; a query made while E1 is still current (Recovering) waits in spannerme
// and is served by E2 once the group fails over, instead of being held in E1's failed pool
// until its deadline.
func TestWaitForReadyDefaultInClientOptionsFollowsFailover(t *testing.T) {
	const rt = 2 * time.Second
	b := startSpannerBackend(t, 2)
	e1, e2 := b.eps[0], b.eps[1]
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(rt, 0, e1.Addr(), e2.Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, fastSettings(nil),
		append(clientOptions(), option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.WaitForReady(true))))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	if _, err := countAccounts(ctx, client); err != nil { // the session exists
		t.Fatal(err)
	}
	e1.Down()
	eventually(t, 10*time.Second, "E1's pool failing", func() bool { p, _ := poolOf(gme, e1.Addr()); return p.Connectivity == "TRANSIENT_FAILURE" })
	if g := groupOf(gme, "default"); g.Current != e1.Addr() {
		t.Fatalf("the group failed over before the query; the test needs a longer RecoveryTimeout\n%s", statusString(gme))
	}
	qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
	defer qcancel()
	start := time.Now()
	var n int64
	on := served([]*spannermetest.Endpoint{e2}, func() { n, err = countAccounts(qctx, client) })
	if err != nil || !on[0] {
		t.Fatalf("query with WaitForReady as a default call option: %d, %v, served by E2: %v; want served by E2 after the failover\n%s",
			n, err, on[0], statusString(gme))
	}
	t.Logf("served by E2 %v after the query started", time.Since(start))
}

// The default call options are read from client options without a connection: a caller's
// dialer is not called, a caller's grpc.WithBlock is not waited for, and no interceptor of
// the caller sees a call.
func TestWaitForReadyDefaultFromClientOptions(t *testing.T) {
	var dialed, seen atomic.Int64
	dialer := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		dialed.Add(1)
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	})
	wfr := option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	for _, tc := range []struct {
		name string
		opts []option.ClientOption
		want bool
	}{
		{"none", clientOptions(), false},
		{"default", append(clientOptions(), wfr), true},
		// TLS and credentials, as in production (an API key: no look-up of its own).
		{"with TLS and credentials", []option.ClientOption{option.WithAPIKey("key"), wfr}, true},
		{"last default wins", append(clientOptions(), wfr, option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.WaitForReady(false)))), false},
		{"with the caller's dialer and interceptors", append(clientOptions(), wfr, option.WithGRPCDialOption(dialer),
			option.WithGRPCDialOption(grpc.WithUnaryInterceptor(counting(&seen))),
			option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(counting(&seen)))), true},
		// A blocking dial needs a connection: the default is not seen (documented), at once.
		{"with a blocking dial", append(clientOptions(), wfr, option.WithGRPCDialOption(dialer),
			option.WithGRPCDialOption(grpc.WithBlock())), false}, //lint:ignore SA1019 a caller may give it
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			if got := pool.WaitForReady(false, clientDefaultCallOptions(tc.opts)); got != tc.want {
				t.Errorf("WaitForReady default = %v, want %v", got, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("reading the default call options took %v", d)
			}
		})
	}
	if dialed.Load() != 0 || seen.Load() != 0 {
		t.Errorf("the caller's dialer was called %d times and interceptors saw %d calls, want 0", dialed.Load(), seen.Load())
	}
}

// An edit made while WatchConfig reads and applies the file the first time is applied: the
// directory is watched before the first reading, so no edit falls between the two (with
// Resync off, nothing else would ever find it). The edit is made from inside the first
// reload's dial of a new endpoint's pool.
func TestWatchConfigEditDuringFirstReading(t *testing.T) {
	one, two, three := startEndpoint(t, "one"), startEndpoint(t, "two"), startEndpoint(t, "three")
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	writeFile(t, path, watchConfigYAML("", two.Addr()))
	edited := watchConfigYAML("", three.Addr())
	var editOnce sync.Once
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, one.Addr())})
	o.DialFunc = func(ctx context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		if target == two.Addr() { // the first reading applies the file
			editOnce.Do(func() { writeByRename(t, path, edited) })
		}
		return grpc.NewClient(target, opts...)
	}
	gme := newGME(t, o, fastSettings(nil))
	w, err := WatchConfig(gme, path, WatchOptions{Debounce: 20 * time.Millisecond, Resync: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	h := hashOf(edited)
	eventually(t, 20*time.Second, "the edit made during the first reading applied", func() bool { return w.Status().Hash == h })
	waitServedBy(t, context.Background(), gme, "three", 15*time.Second)
}

// A bad file that stays bad is logged once, not at every re-read (Resync, or events that do
// not change it); the status keeps the error and when it was last seen. A different error
// is logged again.
func TestWatchRepeatedErrorLoggedOnce(t *testing.T) {
	one := startEndpoint(t, "one")
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	writeFile(t, path, watchConfigYAML("", one.Addr()))
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, one.Addr())}), fastSettings(nil))
	var logs syncBuffer
	w, err := WatchConfig(gme, path, WatchOptions{Debounce: time.Millisecond, Resync: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rejected := func() int { return strings.Count(logs.String(), "configuration edit rejected") }
	writeFile(t, path, watchConfigYAML("    recoveryTime: 2s\n", one.Addr()))
	eventually(t, 20*time.Second, "the bad edit reported", func() bool { return w.Status().LastError != nil })
	for range 3 { // three more re-reads of the same bad file
		seen := w.Status().LastErrorAt
		eventually(t, 20*time.Second, "a re-read", func() bool { return w.Status().LastErrorAt.After(seen) })
	}
	if n := rejected(); n != 1 {
		t.Errorf("the same bad file was logged %d times, want once:\n%s", n, logs.String())
	}
	writeFile(t, path, watchConfigYAML("    switchingDelay: soon\n", one.Addr()))
	eventually(t, 20*time.Second, "the other error logged", func() bool { return rejected() == 2 })
	if s := w.Status(); !strings.Contains(fmt.Sprint(s.LastError), "soon") {
		t.Errorf("LastError = %v, want the new error", s.LastError)
	}
}
