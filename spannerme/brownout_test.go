package spannerme

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/attribute"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// timedLoad runs queries on workers goroutines until end, each with its own deadline, and
// keeps when each one started, how long it took and its error.
type timedLoad struct {
	mu      sync.Mutex // guards runs
	runs    []timedQuery
	stop    context.CancelFunc
	done    sync.WaitGroup
	endOnce sync.Once
}

type timedQuery struct {
	start time.Time
	took  time.Duration
	err   error
}

func startTimedLoad(t *testing.T, client *spanner.Client, workers int, deadline time.Duration) *timedLoad {
	l := &timedLoad{}
	var ctx context.Context
	ctx, l.stop = context.WithCancel(context.Background())
	runQueries(ctx, &l.done, client, workers, deadline, func(start time.Time, took time.Duration, err error) {
		l.mu.Lock()
		l.runs = append(l.runs, timedQuery{start: start, took: took, err: err})
		l.mu.Unlock()
	})
	t.Cleanup(l.end)
	return l
}

// end stops the load and waits for its queries. Idempotent.
func (l *timedLoad) end() { l.endOnce.Do(func() { l.stop(); l.done.Wait() }) }

// since returns the median duration and the errors of the queries started at or after from.
func (l *timedLoad) since(from time.Time) (n int, median time.Duration, failed []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var took []time.Duration
	for _, q := range l.runs {
		if q.start.Before(from) {
			continue
		}
		if q.err != nil {
			failed = append(failed, q.err)
		}
		took = append(took, q.took)
	}
	if len(took) == 0 {
		return 0, 0, failed
	}
	slices.Sort(took)
	return len(took), took[len(took)/2], failed
}

// failures returns the errors of every query so far.
func (l *timedLoad) failures() []error {
	_, _, failed := l.since(time.Time{})
	return failed
}

// share counts the queries the two frontends received during d from now.
func share(e1, e2 *spannermetest.Frontend, d time.Duration) (on1, on2 int64) {
	q1, q2 := queries(e1), queries(e2)
	time.Sleep(d) // a measuring window, not a wait for a state
	return queries(e1) - q1, queries(e2) - q2
}

// brownoutOf returns the brownout status of endpoint in group.
func brownoutOf(gme *GCPMultiEndpoint, group, endpoint string) (*BrownoutStatus, EndpointState) {
	for _, e := range groupOf(gme, group).Endpoints {
		if e.Endpoint == endpoint {
			return e.Brownout, e.State
		}
	}
	return nil, Unavailable
}

// F26: a brownout. E1 answers every call, probes included, 400ms late; E2 20ms late. With
// the default brownout settings (Ratio 4, Margin 200ms, Window 10s, latency probes every
// 2s), E1 is degraded and the group moves to E2: from 20s on at least 90% of the queries
// are served by E2 and the median query takes at most 150ms; no query fails. Once E1 heals
// (20ms), at least 90% of the queries are back on E1 within 30s.
//
// The defaults are used, not shorter ones: this is the case the defaults must handle
// (degraded after about Window + 2 probe intervals, then RecoveryTimeout).
func TestCase_F26_Brownout(t *testing.T) {
	const (
		rt, sd  = time.Second, time.Second
		slow    = 400 * time.Millisecond
		fast    = 20 * time.Millisecond
		workers = 4
	)
	b := startFrontendBackend(t, 2)
	e1, e2 := b.fes[0], b.fes[1]
	e1.SetLatency(slow)
	e2.SetLatency(fast)
	fault := time.Now()
	tl := newEventLog()
	s := tl.settings(fastSettings(nil)) // Health and Brownout: every default
	client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(rt, sd, e1.Addr(), e2.Addr()),
	}), s)
	l := startTimedLoad(t, client, workers, 5*time.Second)

	_, switchedAt := tl.waitSwitch(t, e2.Addr(), 0, 25*time.Second)
	bs, state := brownoutOf(gme, "default", e1.Addr())
	if bs == nil || !bs.Degraded || state == Available || bs.Fallback != e2.Addr() || bs.Latency < slow || bs.FallbackLatency >= slow {
		t.Fatalf("after the switch to E2, E1 in the group: %v, brownout %+v; want degraded against E2\n%s", state, bs, tl)
	}
	from := fault.Add(20 * time.Second)
	time.Sleep(time.Until(from))
	on1, on2 := share(e1, e2, 5*time.Second)
	n, med, failed := l.since(from)
	if on2*10 < (on1+on2)*9 || med > 150*time.Millisecond || len(failed) != 0 {
		t.Fatalf("from 20s into the brownout: %d queries on E1, %d on E2 (want >= 90%% on E2); median of %d queries %v "+
			"(want <= 150ms); %d failed %v\n%s", on1, on2, n, med, len(failed), errors.Join(failed...), tl)
	}

	e1.SetLatency(fast) // E1 heals
	healed := time.Now()
	_, _, idx, _ := tl.switchTo(e2.Addr(), 0)
	_, backAt := tl.waitSwitch(t, e1.Addr(), idx+1, 28*time.Second)
	back1, back2 := share(e1, e2, 2*time.Second)
	backWithin := time.Since(healed)
	if back1*10 < (back1+back2)*9 || backWithin > 30*time.Second {
		t.Fatalf("after E1 healed: %d queries on E1, %d on E2 in the 2s ending %v after (want >= 90%% on E1 within 30s)\n%s",
			back1, back2, backWithin.Round(time.Millisecond), tl)
	}
	if bs, _ := brownoutOf(gme, "default", e1.Addr()); bs == nil || bs.Degraded {
		t.Fatalf("E1 healed and served again, brownout %+v, want not degraded", bs)
	}
	l.end()
	if failed := l.failures(); len(failed) != 0 {
		t.Fatalf("%d queries failed: %v\n%s", len(failed), errors.Join(failed...), tl)
	}
	t.Logf("F26 figures (E1 %v, E2 %v; RecoveryTimeout %v, SwitchingDelay %v, brownout defaults): switched to E2 %v after "+
		"the fault; from 20s: %d queries on E1, %d on E2, median query %v; E1 healed: traffic back %v later, then %d on E1, "+
		"%d on E2 in 2s; no query failed\n%s", slow, fast, rt, sd, switchedAt.Round(time.Millisecond), on1, on2, med,
		(backAt - healed.Sub(tl.start)).Round(time.Millisecond), back1, back2, tl)
}

// Traffic moves only off an endpoint much slower than its fallback: an endpoint that is
// merely farther (60ms against 20ms: 3x but 40ms), endpoints equally slow (400ms each), and
// a brownout with detection disabled never switch; the same settings do switch a 400ms
// endpoint against a 20ms one (so the cases that stay are not vacuous). The rule's Window
// and the probe interval are shortened so that each case sees many windows in seconds.
func TestBrownoutOnlyMuchSlowerEndpointsSwitch(t *testing.T) {
	const (
		rt, sd  = 200 * time.Millisecond, 200 * time.Millisecond
		window  = time.Second
		observe = 5 * window
	)
	for _, tc := range []struct {
		name       string
		e1, e2     time.Duration
		disabled   bool
		wantSwitch bool
	}{
		{"farther fallback 60ms against 20ms", 60 * time.Millisecond, 20 * time.Millisecond, false, false},
		{"equally slow 400ms and 400ms", 400 * time.Millisecond, 400 * time.Millisecond, false, false},
		{"brownout detection disabled", 400 * time.Millisecond, 20 * time.Millisecond, true, false},
		{"much slower 400ms against 20ms", 400 * time.Millisecond, 20 * time.Millisecond, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startFrontendBackend(t, 2)
			e1, e2 := b.fes[0], b.fes[1]
			e1.SetLatency(tc.e1)
			e2.SetLatency(tc.e2)
			tl := newEventLog()
			s := tl.settings(fastSettings(nil))
			s.Health.Brownout = BrownoutSettings{Disabled: tc.disabled, Window: window, ProbeInterval: 100 * time.Millisecond}
			client, gme := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
				"default": group(rt, sd, e1.Addr(), e2.Addr()),
			}), s)
			l := startTimedLoad(t, client, 2, 5*time.Second)
			if tc.wantSwitch {
				tl.waitSwitch(t, e2.Addr(), 0, 10*time.Second)
				return
			}
			if !tc.disabled {
				// Both endpoints measured: the rule is being evaluated.
				eventually(t, 10*time.Second, "latencies of both endpoints", func() bool {
					b1, _ := brownoutOf(gme, "default", e1.Addr())
					b2, _ := brownoutOf(gme, "default", e2.Addr())
					return b1 != nil && b2 != nil && b1.Latency >= tc.e1 && b2.Latency >= tc.e2 && b1.Fallback == e2.Addr()
				})
			}
			on1, on2 := share(e1, e2, observe)
			bs, state := brownoutOf(gme, "default", e1.Addr())
			if _, switches := tl.counts(); switches != 0 || on2 != 0 || state != Available {
				t.Fatalf("E1 %v, E2 %v: %d switches, %d queries on E1 and %d on E2 over %v, E1 %v (brownout %+v); want no switch\n%s",
					tc.e1, tc.e2, switches, on1, on2, observe, state, bs, tl)
			}
			if tc.disabled != (bs == nil) || bs != nil && bs.Degraded {
				t.Fatalf("E1's brownout status %+v with detection disabled %v", bs, tc.disabled)
			}
			l.end()
			if failed := l.failures(); len(failed) != 0 {
				t.Fatalf("%d queries failed: %v", len(failed), errors.Join(failed...))
			}
		})
	}
}

// waitUntil polls cond every 10ms until it holds or within passes.
func waitUntil(within time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

// fakeLatencies is the latency of each endpoint, set by a test (plumbing.latency).
type fakeLatencies struct {
	mu  sync.Mutex // guards lat
	lat map[string]time.Duration
}

func (f *fakeLatencies) set(endpoint string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lat[endpoint] = d
}

func (f *fakeLatencies) of(p *pool.Pool) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.lat[p.Endpoint()]
	return d, ok
}

// The wiring of the brownout rule, on a fake clock: at each latency probe (every
// ProbeInterval) the rule is evaluated for every group that lists the endpoint, and the
// endpoint is degraded in a group where it is far slower than its fallback, and only there:
// that group treats it as down (Recovering, then Unavailable after RecoveryTimeout: the
// group fails over), another group where it is not slower keeps it current. A latency
// between the entry and exit thresholds changes nothing (hysteresis); back to fast, it is no
// longer degraded after Window and the group switches back after SwitchingDelay. Each
// transition is one log line (WARN, then INFO), never one per probe; Status and the gauge
// spannerme.endpoint.degraded say so.
func TestBrownoutDegradesPerGroupOnTheProbeClock(t *testing.T) {
	const (
		rt, sd   = time.Second, time.Second
		interval = 2 * time.Second  // BrownoutSettings.ProbeInterval default
		window   = 10 * time.Second // BrownoutSettings.Window default
	)
	a, b, c := startServer(t, "A"), startServer(t, "B"), startServer(t, "C")
	clk := clock.NewFake(time.Time{})
	lat := &fakeLatencies{lat: map[string]time.Duration{}} // unknown until the first probe
	logs := &syncBuffer{}
	s := fastSettings(logs)
	reader, mp := newMetricReader()
	s.MeterProvider = mp
	gme := newGMEWith(t, options("g1", map[string]*multiendpoint.MultiEndpointOptions{
		"g1": group(rt, sd, a, b),
		"g2": group(rt, sd, a, c),
	}), s, plumbing{clock: clk, latency: lat.of})
	eventually(t, 10*time.Second, "every endpoint Available", func() bool {
		for _, g := range []string{"g1", "g2"} {
			for _, e := range groupOf(gme, g).Endpoints {
				if e.State != Available {
					return false
				}
			}
		}
		return true
	})
	start := clk.Now()
	lat.set(a, 400*time.Millisecond)
	lat.set(b, 20*time.Millisecond)
	lat.set(c, 400*time.Millisecond)
	// tick moves the fake clock to the k-th latency probe of every pool (probes start
	// ProbeInterval after the pools were created, at start).
	k := 0
	tick := func() { k++; clk.Set(start.Add(time.Duration(k) * interval)) }
	// degradedLines counts the lines of A's transitions in g1 (once A is fast, C, a standby
	// of g2 at 400ms, is degraded in g2 against it: that is another line).
	degradedLines := func() (warn, info int) {
		for _, line := range strings.Split(logs.String(), "\n") {
			if !strings.Contains(line, "multiendpoint=g1 endpoint="+a+" ") {
				continue
			}
			switch {
			case strings.Contains(line, "level=WARN msg=\"spannerme: endpoint degraded (brownout)"):
				warn++
			case strings.Contains(line, "level=INFO msg=\"spannerme: endpoint no longer degraded (brownout)"):
				info++
			}
		}
		return warn, info
	}

	// The condition holds from the first probe (2s); A is degraded in g1 at the first probe
	// Window later (12s), not before.
	for clk.Now().Before(start.Add(interval + window - interval)) {
		tick()
		if bs, st := brownoutOf(gme, "g1", a); bs == nil || bs.Degraded || st != Available {
			t.Fatalf("at %v A in g1 is %v, brownout %+v: degraded before Window", clk.Now().Sub(start), st, bs)
		}
	}
	tick() // 12s
	bs, st := brownoutOf(gme, "g1", a)
	if bs == nil || !bs.Degraded || st != Recovering || bs.Fallback != b || bs.Latency != 400*time.Millisecond ||
		bs.FallbackLatency != 20*time.Millisecond || !bs.Since.Equal(clk.Now()) {
		t.Fatalf("at %v A in g1: %v, brownout %+v; want degraded against B, Recovering", clk.Now().Sub(start), st, bs)
	}
	if bs2, st2 := brownoutOf(gme, "g2", a); bs2 == nil || bs2.Degraded || st2 != Available || groupOf(gme, "g2").Current != a {
		t.Fatalf("A in g2 (as slow as C): %v, brownout %+v, current %q; want Available and current", st2, bs2, groupOf(gme, "g2").Current)
	}
	if g := groupOf(gme, "g1"); g.Current != a {
		t.Fatalf("g1 left A before RecoveryTimeout: %+v", g)
	}
	clk.Advance(rt)
	if g := groupOf(gme, "g1"); g.Current != b || g.Endpoints[0].State != Unavailable {
		t.Fatalf("g1 RecoveryTimeout after A was degraded: %+v; want failover to B", g)
	}
	rm := collect(t, reader)
	for _, w := range []struct {
		group, endpoint string
		want            int64
	}{{"g1", a, 1}, {"g1", b, 0}, {"g2", a, 0}, {"g2", c, 0}} {
		v, ok := valueWhere(rm, observe.MetricDegraded, attribute.String(AttrMultiEndpoint, w.group), attribute.String(AttrEndpoint, w.endpoint))
		if !ok || v != w.want {
			t.Errorf("%s{%s, %s} = %d (reported %v), want %d", observe.MetricDegraded, w.group, w.endpoint, v, ok, w.want)
		}
	}

	// 150ms against 20ms: neither above the entry thresholds (margin 130ms < 200ms) nor below
	// the exit ones (7.5x >= 2x, 130ms >= 100ms): A stays degraded.
	lat.set(a, 150*time.Millisecond)
	for range 3 * window / interval {
		tick()
		if bs, _ := brownoutOf(gme, "g1", a); !bs.Degraded {
			t.Fatalf("at %v A at 150ms left the degraded state (hysteresis)", clk.Now().Sub(start))
		}
	}
	lat.set(a, 20*time.Millisecond)
	healed := clk.Now()
	for {
		tick()
		if bs, _ := brownoutOf(gme, "g1", a); !bs.Degraded {
			break
		}
		if clk.Now().Sub(healed) > window+interval {
			t.Fatalf("A fast again for %v and still degraded", clk.Now().Sub(healed))
		}
	}
	if d := clk.Now().Sub(healed); d < window {
		t.Fatalf("A left the degraded state %v after it was fast again, before Window", d)
	}
	if g := groupOf(gme, "g1"); g.Current != b || g.PendingSwitch != a {
		t.Fatalf("g1 as A is no longer degraded: %+v; want a switch back pending", g)
	}
	clk.Advance(sd)
	if g := groupOf(gme, "g1"); g.Current != a {
		t.Fatalf("g1 SwitchingDelay after A recovered: %+v; want A current", g)
	}
	// Log lines are delivered asynchronously.
	if !waitUntil(5*time.Second, func() bool { w, i := degradedLines(); return w == 1 && i == 1 }) {
		w, i := degradedLines()
		t.Fatalf("%d degraded and %d recovered log lines, want one each:\n%s", w, i, logs)
	}
	tick()
	tick()
	if w, i := degradedLines(); w != 1 || i != 1 {
		t.Fatalf("%d degraded and %d recovered log lines, want one each:\n%s", w, i, logs)
	}
	if bs, st := brownoutOf(gme, "g2", c); !bs.Degraded || st == Available || groupOf(gme, "g2").Current != a {
		t.Fatalf("C at 400ms in g2 against A at 20ms: %v, brownout %+v; want degraded, A current", st, bs)
	}
}

// Bad brownout settings are configuration errors naming the field; nothing is dialed.
func TestBrownoutSettingsValidation(t *testing.T) {
	for _, tc := range []struct {
		field string
		b     BrownoutSettings
	}{
		{"Ratio", BrownoutSettings{Ratio: 0.5}},
		{"Ratio", BrownoutSettings{Ratio: -4}},
		{"Ratio", BrownoutSettings{Ratio: math.NaN()}},
		{"Ratio", BrownoutSettings{Ratio: math.Inf(1)}},
		{"Margin", BrownoutSettings{Margin: -time.Millisecond}},
		{"Window", BrownoutSettings{Window: -time.Second}},
		{"ProbeInterval", BrownoutSettings{ProbeInterval: -1}},
	} {
		t.Run(fmt.Sprintf("%s %+v", tc.field, tc.b), func(t *testing.T) {
			o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, "127.0.0.1:1")})
			gme, err := NewGCPMultiEndpointWithSettings(o, Settings{Health: HealthSettings{Brownout: tc.b}}, insecureDial)
			if gme != nil {
				gme.Close()
				t.Fatal("a GCPMultiEndpoint was returned with the error")
			}
			var ce *ConfigError
			if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || !strings.Contains(ce.Problem, "Settings.Health.Brownout."+tc.field) {
				t.Fatalf("error %v, want a *ConfigError naming Settings.Health.Brownout.%s", err, tc.field)
			}
		})
	}
}

// The zero BrownoutSettings mean Ratio 4, Margin 200ms, Window 10s, ProbeInterval 2s, on;
// given values are kept; 1 is a valid Ratio.
func TestBrownoutSettingsDefaults(t *testing.T) {
	want := BrownoutSettings{Ratio: 4, Margin: 200 * time.Millisecond, Window: 10 * time.Second, ProbeInterval: 2 * time.Second}
	if got := (HealthSettings{}).withDefaults().Brownout; got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	given := BrownoutSettings{Disabled: true, Ratio: 1, Margin: time.Second, Window: time.Minute, ProbeInterval: 5 * time.Second}
	if err := given.validate(); err != nil {
		t.Fatal(err)
	}
	if got := given.withDefaults(); got != given {
		t.Fatalf("withDefaults(%+v) = %+v", given, got)
	}
	if (HealthSettings{Brownout: BrownoutSettings{Disabled: true}}).poolOptions().Latency != nil {
		t.Fatal("latency probes with brownout detection disabled")
	}
	if (HealthSettings{}).withDefaults().poolOptions().Latency == nil {
		t.Fatal("no latency probes with brownout detection on")
	}
	if (HealthSettings{Disabled: true}).brownoutOn() {
		t.Fatal("brownout detection on with health disabled")
	}
}

// settings.health.brownout in a configuration file maps to Settings.Health.Brownout; a bad
// value names its field and line; a change needs a restart.
func TestBrownoutInConfigFile(t *testing.T) {
	const head = "default: g\nmultiEndpoints:\n  g:\n    endpoints: [\"127.0.0.1:1\"]\nsettings:\n  health:\n    brownout:\n"
	fc, err := ParseConfig([]byte(head + `      disabled: true
      ratio: 5.5
      margin: 300ms
      window: 30s
      probeInterval: 5s
`))
	if err != nil {
		t.Fatal(err)
	}
	want := BrownoutSettings{Disabled: true, Ratio: 5.5, Margin: 300 * time.Millisecond, Window: 30 * time.Second, ProbeInterval: 5 * time.Second}
	if got := fc.Settings.Health.Brownout; got != want {
		t.Fatalf("Settings.Health.Brownout = %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ body, field, text string }{
		{"      ratio: 0.5\n", "settings.health.brownout.ratio", "want a number of at least 1"},
		{"      ratio: fast\n", "settings.health.brownout.ratio", "want a number of at least 1"},
		{"      ratio: .inf\n", "settings.health.brownout.ratio", "want a number of at least 1"},
		{"      window: -1s\n", "settings.health.brownout.window", "negative duration"},
		{"      margin: 2\n", "settings.health.brownout.margin", "invalid duration"},
		{"      probInterval: 1s\n", "settings.health.brownout.probInterval", "did you mean probeInterval?"},
	} {
		_, err := ParseConfig([]byte(head + tc.body))
		var fe *ConfigFileError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Line != 8 || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%q: error %v, want one naming %s at line 8 saying %q", tc.body, err, tc.field, tc.text)
		}
	}
	gme := newGME(t, fc.Options, fastSettings(nil))
	if got := restartNeeded(gme, fc); !slices.Contains(got, "settings.health") {
		t.Fatalf("restartNeeded = %v, want settings.health listed", got)
	}
}

// A BrownoutStatus is written with its latencies as duration strings and read back.
func TestBrownoutStatusJSON(t *testing.T) {
	in := BrownoutStatus{Degraded: true, Since: time.Date(2026, 1, 1, 0, 0, 12, 0, time.UTC), Latency: 402 * time.Millisecond,
		Fallback: "e2:443", FallbackLatency: 21 * time.Millisecond}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"degraded":true,"since":"2026-01-01T00:00:12Z","fallback":"e2:443","latency":"402ms","fallbackLatency":"21ms"}`
	if string(b) != want {
		t.Fatalf("JSON %s, want %s", b, want)
	}
	var out BrownoutStatus
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("read back %+v, %v; want %+v", out, err, in)
	}
	if b, _ := json.Marshal(BrownoutStatus{}); string(b) != `{"degraded":false}` {
		t.Fatalf("zero BrownoutStatus as JSON: %s", b)
	}
}
