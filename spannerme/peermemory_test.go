package spannerme

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/steer"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// failingWith returns the server option of a frontend that, while on is set, answers one
// call in every `every` (every call for 1) with code and message itself, before forwarding
// anything, and counts them in failed. The frontend takes every call as a stream (it
// forwards any method), so a stream interceptor sees them all.
func failingWith(on *atomic.Bool, every int64, failed *atomic.Int64, code codes.Code, message string) spannermetest.FrontendOption {
	var calls atomic.Int64
	return spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(
		func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if on.Load() && calls.Add(1)%every == 0 {
				failed.Add(1)
				return status.Error(code, message)
			}
			return h(srv, ss)
		}))
}

// countingWriter counts the bytes written to it and keeps none.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// Issue 40, done when (bounded memory from peers): E1 of [E1 E2] answers calls with an error
// of an 8 MB message. 90 queries through the Spanner client all succeed, and the heap in use
// after a GC (heapInUse: the live heap after a collection) grows by at most 16 MiB: what
// spannerme keeps of a server's answers is cut to bounded.ServerText bytes. The cases:
//
//   - every other call UNAVAILABLE, health from call outcomes off: E1 stays current, each
//     failing query is sent again to E2 at once, and the retry memory keeps each failed
//     attempt (the case of the issue: 8 MB each until now);
//   - every call UNAVAILABLE: E1 fails calls until it is ejected, then its probes fail (the
//     last probe's error, the ejection's detail);
//   - every call RESOURCE_EXHAUSTED: E1 cools down between the calls it fails.
//
// The heap is measured after E1 is closed and the client's connections to it have gone, and
// read again for up to 30 s until it is within the bound (what spannerme keeps stays, a
// closed transport's buffers go): gRPC's HTTP/2 transport keeps, per connection, buffers as
// large as the largest header block it sent or received (up to grpc-go's 16 MiB MaxHeaderListSize), on the client as on the
// test's in-process frontend, until the connection closes; a plain client keeps the same. The
// figure with E1 still open is logged. The caller of a call that met the error gets it
// whole: only what is kept is cut. The log is counted, not kept (a test's log buffer would
// hold what the log lines quote).
func TestPeerErrorsAreKeptBounded(t *testing.T) {
	big := strings.Repeat("x", 8<<20)
	for _, tc := range []struct {
		name     string
		code     codes.Code
		every    int64
		noHealth bool
	}{
		{"every other call UNAVAILABLE, health off", codes.Unavailable, 2, true},
		{"UNAVAILABLE", codes.Unavailable, 1, false},
		{"RESOURCE_EXHAUSTED", codes.ResourceExhausted, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, db := startSeededSpannertest(t)
			var on atomic.Bool
			var failed atomic.Int64
			b := &frontendBackend{addr: addr, database: db, fes: []*spannermetest.Frontend{
				spannermetest.NewFrontendTB(t, addr, failingWith(&on, tc.every, &failed, tc.code, big)),
				spannermetest.NewFrontendTB(t, addr),
			}}
			e1, e2 := b.fes[0], b.fes[1]
			s := fastSettings(nil)
			logged := &countingWriter{}
			s.Logger = slog.New(slog.NewTextHandler(logged, nil))
			s.Health.Disabled = tc.noHealth
			client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
				"default": group(time.Second, time.Second, e1.Addr(), e2.Addr()),
			}), s)
			// Two collections: the first moves what sync.Pools hold (hpack's scratch buffers
			// among them) to their victim caches, the second frees it.
			runtime.GC()
			before := heapInUse()
			on.Store(true)

			if tc.every == 1 {
				// The caller gets the server's error as it came (8 MB of trailer take seconds
				// under -race on a busy machine).
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				err := gme.Invoke(ctx, methodGetSession, &spannerpb.GetSessionRequest{Name: db + "/sessions/s"}, &spannerpb.Session{})
				if s := status.Convert(err); s.Code() != tc.code || s.Message() != big {
					t.Fatalf("the call on E1 ended with %v and a message of %d bytes, want %v and the server's %d", s.Code(), len(s.Message()), tc.code, len(big))
				}
				err = nil
			}

			onE1, onE2 := failed.Load(), queries(e2)
			refused := 0
			for i := range 90 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := countAccounts(ctx, client)
				cancel()
				if err != nil && tc.code == codes.ResourceExhausted && status.Code(err) == codes.ResourceExhausted && refused < steer.OverloadStreak+5 {
					// Without a RetryInfo a RESOURCE_EXHAUSTED is the query's, surfaced as by a
					// plain client, until OverloadStreak of them in a row have E1 probed and the
					// probe is refused too: E1's, which then cools (internal/steer NoteOverload).
					// The few queries sent while the probe is out are refused as well.
					refused++
					continue
				}
				if err != nil {
					t.Fatalf("query %d: %v", i, status.Code(err))
				}
			}
			open := heapInUse()
			if err := e1.Close(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "the client's connections to E1 gone", func() bool {
				for _, p := range gme.Status().Pools {
					if p.Endpoint == e1.Addr() {
						return p.Connectivity != "READY"
					}
				}
				return false
			})
			// A transport that was closed is freed once its reader has seen the close: read
			// the heap again (every 250 ms, 30 s at most) until it is within the bound.
			var after uint64
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
				runtime.GC()
				after = heapInUse()
				if int64(after)-int64(before) <= 16<<20 || time.Now().After(deadline) {
					break
				}
			}
			grew := int64(after) - int64(before)
			mib := func(n int64) float64 { return float64(n) / (1 << 20) }
			t.Logf("peer memory figures (%s, 8 MB messages): 90 queries, E1 failed %d calls, E2 received %d queries; heap in use after GC %.1f MiB before, "+
				"%.1f MiB after (%.1f MiB with E1's connections still open): %+.1f MiB; %d bytes logged",
				tc.name, failed.Load()-onE1, queries(e2)-onE2, mib(int64(before)), mib(int64(after)), mib(int64(open)), mib(grew), logged.n.Load())
			if grew > 16<<20 {
				t.Errorf("the heap in use after GC grew by %.1f MiB over 90 queries, want at most 16 MiB", mib(grew))
			}
			runtime.KeepAlive(client)
		})
	}
}
