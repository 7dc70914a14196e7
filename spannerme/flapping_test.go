package spannerme

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// streamCounter counts the ExecuteStreamingSql streams each endpoint's pool starts: a stream
// interceptor in the pools' dial options, so it sees the pool (its target) of every attempt,
// retries included.
type streamCounter struct {
	mu      sync.Mutex // guards started
	started map[string]int
}

func (c *streamCounter) option() option.ClientOption {
	return option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc,
		cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if strings.HasSuffix(method, "/ExecuteStreamingSql") {
			c.mu.Lock()
			c.started[cc.Target()]++
			c.mu.Unlock()
		}
		return streamer(ctx, desc, cc, method, opts...)
	}))
}

// take returns the counts for the endpoints (matched by address within the pool's target)
// and resets them.
func (c *streamCounter) take(endpoints ...string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, len(endpoints))
	for target, n := range c.started {
		for i, e := range endpoints {
			if strings.Contains(target, e) {
				out[i] += n
			}
		}
	}
	clear(c.started)
	return out
}

// Rule 2 end to end, through the Spanner client (issue 13): [E1, E2], RecoveryTimeout 1s,
// SwitchingDelay 0; E1 is down 300ms and up 400ms, again and again. Once E1's first
// RecoveryTimeout has run out, every later drop (during the probation of its return) makes it
// Unavailable at once, so a query made 150ms into an outage is served by E2 without waiting
// for E1.
//
// Waiting would show: E1 comes back 150ms after the query is made, so a query held for E1
// (in spannerme, in gRPC, or by the Spanner client's retries) would be sent on E1's pool.
// The test therefore asserts where the query's streams went (counted by an interceptor in
// the pools), not how long it took; durations are logged.
func TestCase_F4_FlappingThroughSpannerClientServedByFallbackAtOnce(t *testing.T) {
	const (
		rt         = time.Second
		downFor    = 300 * time.Millisecond
		upFor      = 400 * time.Millisecond
		queryAfter = 150 * time.Millisecond
		cycles     = 8
	)
	b := startSpannerBackend(t, 2)
	e1, e2 := b.eps[0], b.eps[1]
	counter := &streamCounter{started: map[string]int{}}
	o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(rt, 0, e1.Addr(), e2.Addr())})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(), o, fastSettings(nil),
		append(clientOptions(), counter.option())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); gme.Close() })
	for _, e := range []string{e1.Addr(), e2.Addr()} {
		waitConnected(t, gme, e)
	}
	if _, err := countAccounts(ctx, client); err != nil { // the session exists
		t.Fatal(err)
	}
	if got := counter.take(e1.Addr(), e2.Addr()); got[0] == 0 || got[1] != 0 {
		t.Fatalf("warm-up query: streams per endpoint %v, want on E1 only", got)
	}

	type result struct {
		cycle     int
		took      time.Duration
		err       error
		streams   []int // on E1, E2
		e2Bytes   int64 // from the backend through E2 during the query
		stateAtQ  string
		currentAt string
	}
	var results []result
	firstDrop := time.Now()
	for cycle := range cycles {
		outage := time.Now()
		e1.Down()
		var done chan result
		if outage.Sub(firstDrop) >= rt { // past E1's first RecoveryTimeout
			time.Sleep(queryAfter)
			g := groupOf(gme, "default")
			r := result{cycle: cycle, stateAtQ: g.Endpoints[0].State.String(), currentAt: g.Current}
			counter.take() // reset
			done = make(chan result, 1)
			go func() {
				before := e2.Stats().BytesFromBackend
				start := time.Now()
				_, r.err = countAccounts(ctx, client)
				r.took = time.Since(start)
				r.e2Bytes = e2.Stats().BytesFromBackend - before
				r.streams = counter.take(e1.Addr(), e2.Addr())
				done <- r
			}()
		}
		time.Sleep(time.Until(outage.Add(downFor)))
		if err := e1.Up(); err != nil { // on schedule, whether the query has ended or not
			t.Fatal(err)
		}
		if done != nil {
			select {
			case r := <-done:
				results = append(results, r)
			case <-ctx.Done():
				t.Fatalf("cycle %d: the query did not end", cycle)
			}
		}
		time.Sleep(time.Until(outage.Add(downFor + upFor)))
	}
	if len(results) < cycles-2 {
		t.Fatalf("only %d queries made during outages past the first RecoveryTimeout", len(results))
	}
	for _, r := range results {
		t.Logf("cycle %d: at the query E1 %s, current %s; query took %v, streams on E1/E2 %v, %d bytes through E2, err %v",
			r.cycle, r.stateAtQ, r.currentAt, r.took.Round(time.Millisecond), r.streams, r.e2Bytes, r.err)
		if r.err != nil {
			t.Errorf("cycle %d: query failed: %v", r.cycle, r.err)
			continue
		}
		if r.streams[0] != 0 || r.streams[1] == 0 || r.e2Bytes == 0 {
			t.Errorf("cycle %d: query streams on E1/E2 = %v, %d bytes through E2; want served by E2 alone (E1 %s and current %s at the query)",
				r.cycle, r.streams, r.e2Bytes, r.stateAtQ, r.currentAt)
		}
	}
}
