package spannerme

// Retry elsewhere and the overload cooldown through the Spanner client: fake frontends
// (spannermetest) in front of ONE in-memory Spanner, every address on loopback. Figures are
// logged (go test -v -run 'TestRetryElsewhere_Client|TestOverloadCooldown_Client').

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
	"github.com/spannerme/spanner-multiendpoint/internal/retry"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// The load durations of these tests: short by default, for CI; issue 27 asks for 20 s of
// point reads and 10 s of a fault everywhere (-retry-elsewhere.duration=20s
// -retry-elsewhere.outage=10s).
var (
	retryLoadDuration = flag.Duration("retry-elsewhere.duration", 4*time.Second, "how long TestRetryElsewhere_Client_PartialFailure reads")
	retryOutage       = flag.Duration("retry-elsewhere.outage", 5*time.Second, "how long every endpoint fails in TestRetryElsewhere_Client_FaultEverywhere")
)

// recordingBackend is ONE seeded in-memory Spanner with n frontends recording every call.
func recordingBackend(t *testing.T, n int) (*frontendBackend, []*spannermetest.Frontend) {
	t.Helper()
	addr, db := startSeededSpannertest(t)
	b := &frontendBackend{addr: addr, database: db}
	for range n {
		b.fes = append(b.fes, spannermetest.NewFrontendTB(t, addr, spannermetest.WithAttemptRecording(1_000_000)))
	}
	return b, b.fes
}

// methodRead is the Spanner client's streaming read, with which ReadRow reads.
const methodRead = "/google.spanner.v1.Spanner/StreamingRead"

// pointReads reads one row by key on workers goroutines until ctx ends, and returns each
// read's latency and the errors (at most 5 kept) with their count.
type pointReads struct {
	mu     sync.Mutex
	took   []time.Duration
	errs   []error
	failed atomic.Int64
	done   sync.WaitGroup
}

func startPointReads(ctx context.Context, client *spanner.Client, workers int) *pointReads {
	r := &pointReads{}
	for w := range workers {
		r.done.Add(1)
		go func() {
			defer r.done.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("acct-%04d", 1+(w+i)%8)
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				_, err := client.Single().ReadRow(rctx, "Accounts", spanner.Key{key}, []string{"Balance"})
				took := time.Since(start)
				cancel()
				r.mu.Lock()
				r.took = append(r.took, took)
				if err != nil {
					r.failed.Add(1)
					if len(r.errs) < 5 {
						r.errs = append(r.errs, err)
					}
				}
				r.mu.Unlock()
			}
		}()
	}
	return r
}

// percentile returns the q-quantile (0 to 1) of the reads' latencies.
func (r *pointReads) percentile(q float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.took) == 0 {
		return 0
	}
	s := slices.Clone(r.took)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// percentiles returns the p50, p95, p99 and p99.9 of the reads' latencies, "a/b/c/d".
func (r *pointReads) percentiles() string {
	var out []string
	for _, q := range []float64{0.5, 0.95, 0.99, 0.999} {
		out = append(out, r.percentile(q).Round(100*time.Microsecond).String())
	}
	return strings.Join(out, "/")
}

func (r *pointReads) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.took)
}

// attemptNumber returns the request key and the attempt number of a Spanner request ID.
func attemptNumber(id string) (string, int) {
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		return id, 0
	}
	n, _ := strconv.Atoi(id[i+1:])
	return id[:i], n
}

// E1 fails 5 % of calls with UNAVAILABLE (below the ejection thresholds), E2 is healthy, 8
// workers of point reads: no read fails; every streaming read that failed on E1 was sent
// again at once to E2 (internal/steer), as the same attempt (the same request ID, attempt number
// included), and answered there; every attempt the Spanner client itself retried (attempt
// number > 1: a unary call, or a resend the budget refused) is served by E2, its previous
// attempt having failed on E1. A plain Spanner client reads at the same time through its
// own frontend with the same fault: the p50 and p99 of both are logged (a figure, not an
// assertion: the machine is shared).
func TestRetryElsewhere_Client_PartialFailure(t *testing.T) {
	b, fes := recordingBackend(t, 3)
	e1, e2, plainFE := fes[0], fes[1], fes[2]
	reader, mp := newMetricReader()
	s := fastSettings(nil)
	s.MeterProvider = mp
	client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(10*time.Second, time.Second, e1.Addr(), e2.Addr()),
	}), s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := fixture.NewClient(ctx, plainFE.Addr(), b.database)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := countAccounts(ctx, plain); err != nil {
		t.Fatal(err)
	}
	for _, fe := range fes {
		fe.ResetStats()
		if err := fe.FailFraction(0.05, codes.Unavailable); err != nil {
			t.Fatal(err)
		}
	}
	e2.Pass()
	before := gme.Status().Retries
	lctx, stop := context.WithTimeout(context.Background(), *retryLoadDuration)
	defer stop()
	ours, theirs := startPointReads(lctx, client, 8), startPointReads(lctx, plain, 8)
	ours.done.Wait()
	theirs.done.Wait()
	for _, fe := range fes {
		fe.Pass()
	}
	if n := ours.failed.Load(); n != 0 {
		t.Fatalf("%d of %d reads failed: %v", n, ours.count(), ours.errs)
	}
	type attempt struct {
		fe     string
		method string
		code   codes.Code
	}
	byID := map[string][]attempt{}
	for _, fe := range []*spannermetest.Frontend{e1, e2} {
		for _, a := range fe.Attempts() {
			byID[a.RequestID] = append(byID[a.RequestID], attempt{a.Frontend, a.Method, a.Code})
		}
	}
	// A streaming read that failed on E1 was answered by E2 under the same request ID.
	resent, retried := 0, 0
	for id, as := range byID {
		failedOnE1, okOnE2 := false, false
		for _, a := range as {
			failedOnE1 = failedOnE1 || (a.fe == e1.Addr() && a.code == codes.Unavailable)
			okOnE2 = okOnE2 || (a.fe == e2.Addr() && a.code == codes.OK)
		}
		if failedOnE1 && as[0].method == methodRead {
			resent++
			if !okOnE2 || len(as) != 2 {
				t.Errorf("read %s: attempts %+v; want its failure on E1 resent once to E2 and answered there", id, as)
			}
		}
	}
	// Every attempt after the first of a request is on E2; its previous attempt failed on E1.
	for id, as := range byID {
		key, n := attemptNumber(id)
		if n <= 1 {
			continue
		}
		retried++
		prev, ok := byID[fmt.Sprintf("%s.%d", key, n-1)]
		if as[0].fe != e2.Addr() || !ok || prev[0].fe != e1.Addr() || prev[0].code != codes.Unavailable {
			t.Errorf("attempt %s served by %+v (previous attempt: %+v, found %v); want E2 after a failure on E1", id, as, prev, ok)
		}
	}
	if resent == 0 {
		t.Fatal("no read failed on E1: the test exercised nothing")
	}
	after := gme.Status().Retries
	if got := after.Resent - before.Resent; got != int64(resent) {
		t.Errorf("Status.Retries.Resent grew by %d, want the %d reads that failed on E1", got, resent)
	}
	// The resends metric: every resend, from E1 to E2.
	if v, _ := valueWhere(collect(t, reader), observe.MetricResends, attribute.String(AttrMultiEndpoint, "default"),
		attribute.String(AttrResendFrom, e1.Addr()), attribute.String(AttrEndpoint, e2.Addr())); v != after.Resent {
		t.Errorf("%s{from E1, to E2} = %d, want Status.Retries.Resent %d", observe.MetricResends, v, after.Resent)
	}
	t.Logf("resend at once, E1 failing 5%% UNAVAILABLE, 8 workers for %v: %d reads, 0 failed; %d reads failed on E1 and were resent to E2 (resent %d, refused %d), %d attempts retried by the client (steered %d, refused %d), tokens %.1f; "+
		"p50/p95/p99/p99.9 spannerme %s, plain client (same fault, same run) %s over %d reads (%d failed)",
		*retryLoadDuration, ours.count(), resent, after.Resent-before.Resent, after.ResendRefused-before.ResendRefused,
		retried, after.Steered-before.Steered, after.Refused-before.Refused, after.Tokens,
		ours.percentiles(), theirs.percentiles(), theirs.count(), theirs.failed.Load())
}

// Every endpoint fails every call with UNAVAILABLE: the extra attempts retry elsewhere sends
// (retries steered to the other endpoint, and streams resent at once there) stay within the
// budget: at most retry.MaxTokens/2 failures empty it to the threshold, plus the attempts of
// the 8 workers in flight at that moment; after that the budget refuses them.
func TestRetryElsewhere_Client_FaultEverywhere(t *testing.T) {
	b, fes := recordingBackend(t, 2)
	e1, e2 := fes[0], fes[1]
	client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(10*time.Second, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	const workers = 8
	before := gme.Status().Retries
	for _, fe := range fes {
		fe.ResetStats()
		if err := fe.FailAll(codes.Unavailable); err != nil {
			t.Fatal(err)
		}
	}
	lctx, stop := context.WithTimeout(context.Background(), *retryOutage)
	defer stop()
	reads := startPointReads(lctx, client, workers)
	reads.done.Wait()
	for _, fe := range fes {
		fe.Pass()
	}
	after := gme.Status().Retries
	steered, resent := after.Steered-before.Steered, after.Resent-before.Resent
	attempts := e1.Stats().Received + e2.Stats().Received
	if bound := int64(retry.MaxTokens/2 + workers); steered+resent > bound {
		t.Fatalf("%d attempts steered and %d resent elsewhere during the fault everywhere, want at most %d together (budget)", steered, resent, bound)
	}
	if resent == 0 || after.ResendRefused == before.ResendRefused {
		t.Fatalf("resent %d, refused %d: the test exercised nothing", resent, after.ResendRefused-before.ResendRefused)
	}
	t.Logf("fault everywhere for %v, %d workers: %d calls reached the frontends; extra attempts of retry elsewhere: %d steered + %d resent = %d (bound %d), %d steers and %d resends refused by the budget, tokens %.1f",
		*retryOutage, workers, attempts, steered, resent, steered+resent, retry.MaxTokens/2+workers,
		after.Refused-before.Refused, after.ResendRefused-before.ResendRefused, after.Tokens)
}

// E1 answers RESOURCE_EXHAUSTED with a 3 s RetryInfo, through the Spanner client: the query
// that meets it starts E1's cooldown, and is resent at once to E2 (internal/steer: the delay is
// E1's); meanwhile every new query goes to E2 (E1 healed at once: only the cooldown
// keeps it out); E1 gets queries again when its cooldown ends, never before.
func TestOverloadCooldown_Client(t *testing.T) {
	b, fes := recordingBackend(t, 2)
	e1, e2 := fes[0], fes[1]
	client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(10*time.Second, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil))
	query := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := countAccounts(ctx, client)
		return err
	}
	e1.SetRetryDelay(3 * time.Second)
	if err := e1.FailAll(codes.ResourceExhausted); err != nil {
		t.Fatal(err)
	}
	e1.ResetStats()
	e2.ResetStats()
	first := make(chan error, 1)
	go func() { first <- query() }()
	var cd *CooldownStatus
	eventually(t, 10*time.Second, "E1 cooling", func() bool {
		p, _ := poolOf(gme, e1.Addr())
		cd = p.Cooldown
		return cd != nil && cd.Cooling
	})
	e1.Pass()
	if cd.Length != 3*time.Second || !cd.FromRetryInfo {
		t.Fatalf("E1 cooldown: %+v, want 3 s from RetryInfo", cd)
	}
	for range 5 {
		if err := query(); err != nil {
			t.Fatal(err)
		}
	}
	if n := e1.Stats().Methods[methodQuery].Received; n != 1 {
		t.Fatalf("%d queries reached E1, want the 1 that met RESOURCE_EXHAUSTED: %+v", n, e1.Attempts())
	}
	if err := <-first; err != nil {
		t.Fatalf("the query that met RESOURCE_EXHAUSTED: %v", err)
	}
	// The query that met RESOURCE_EXHAUSTED (with a RetryInfo, which the client retries) was
	// resent at once to E2 as the same attempt (internal/steer), not retried after 3 s.
	var exhaustedID string
	for _, a := range e1.Attempts() {
		if a.Method == methodQuery && a.Code == codes.ResourceExhausted {
			exhaustedID = a.RequestID
		}
	}
	var resentOn []string
	for _, a := range e2.Attempts() {
		if a.RequestID == exhaustedID {
			resentOn = append(resentOn, a.Frontend+" "+a.Code.String())
		}
	}
	if exhaustedID == "" || len(resentOn) != 1 || resentOn[0] != e2.Addr()+" OK" {
		t.Fatalf("the query that met RESOURCE_EXHAUSTED (%q): on E2 %v, want resent once to E2 and answered", exhaustedID, resentOn)
	}
	// E1 gets queries again once its cooldown is over, and not before.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for e1.Stats().Methods[methodQuery].Forwarded == 0 {
		if err := query(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("E1 got no query within 20 s\n%s", statusString(gme))
		case <-time.After(20 * time.Millisecond):
		}
	}
	if now := time.Now(); now.Before(cd.Until) {
		t.Fatalf("E1 served a query before its cooldown ended (%v early)", cd.Until.Sub(now))
	}
	t.Logf("overload cooldown through the Spanner client: E1 cooled for %v after one RESOURCE_EXHAUSTED; 5 queries meanwhile on E2; E1 served again %v after the cooldown ended",
		cd.Length, time.Since(cd.Until).Round(time.Millisecond))
}
