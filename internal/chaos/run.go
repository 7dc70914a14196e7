package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/rig"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// Config is one run.
type Config struct {
	// Seed draws the schedule and the load's choices: the same seed, duration and topology
	// give the same schedule.
	Seed uint64
	// Duration is the whole schedule, warm-up and cool-down included; at least 10s.
	Duration time.Duration
	// Emulator selects the Cloud Spanner emulator as the backend; false is the in-memory
	// spannertest.
	Emulator bool
	// Out receives the header, the schedule as it is applied, the timeline and the table.
	// Nil discards them.
	Out io.Writer
	// Logger receives spannerme's logs. Nil discards them.
	Logger *slog.Logger
	// Interval is the timeline's period; zero means Duration/120, at least 1s.
	Interval time.Duration
	// NoFrontends leaves out the gRPC frontends: the TCP fakes forward straight to the
	// backend, and no frontend fault or GOAWAY storm is drawn.
	NoFrontends bool
	// HealthDetection says that the client under test ejects endpoints from call outcomes
	// (issue 8), so failed calls under silent faults are bounded (silentBound per worker and
	// fault) instead of only counted.
	HealthDetection bool
	// RaceReports, when set, returns how many data races the race detector has reported so
	// far (the program counts them on its stderr). Nil: not checked by the run (a test under
	// -race fails by itself).
	RaceReports func() int
	// Reproduce is the command line printed to replay the run; empty means a make chaos line.
	Reproduce string
}

// The client's durations during a run.
const (
	RecoveryTimeout = 500 * time.Millisecond
	SwitchingDelay  = time.Second
	// settleTimeout bounds the wait, after the last heal, for every group to be on an
	// Available, READY endpoint.
	settleTimeout = 30 * time.Second
	// heapBound is how much more heap, after Close and GC, than before the run is allowed.
	// What stays is gRPC's and the Spanner client's lazily built global state (codecs,
	// metric instruments, resolver and balancer registries), measured at about 1-3 MiB.
	heapBound = 16 << 20
	// reconnectMaxDelay is the client's Settings.ReconnectMaxDelay in a run.
	reconnectMaxDelay = 250 * time.Millisecond
)

// clientSettings are the client's settings during a run: quick reconnects and connection
// attempts, and compressed health settings, so that recoveries follow the schedule closely.
//
// The tiered groups get their tiers (topology.tiers).
func clientSettings(logger *slog.Logger, switches *rig.SwitchLog, health *healthLog, topo *topology) spannerme.Settings {
	return spannerme.Settings{
		Tiers:             topo.tiers(),
		ReconnectMaxDelay: reconnectMaxDelay,
		MinConnectTimeout: time.Second,
		DrainTimeout:      30 * time.Second,
		Logger:            logger,
		OnSwitch:          switches.Add,
		Health:            healthSettings,
		OnHealth:          health.add,
	}
}

// Run runs the soak and returns its report; it returns an error only when the run could not
// be set up (the backend or a listener did not start). ctx cancels the schedule early: every
// fault is then healed and the run verified as usual.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = max(time.Second, (cfg.Duration / 120).Round(time.Second))
	}
	plan, err := NewPlan(cfg.Seed, cfg.Duration, !cfg.NoFrontends)
	if err != nil {
		return nil, err
	}
	if cfg.Reproduce == "" {
		cfg.Reproduce = fmt.Sprintf("make chaos SEED=%d DURATION=%v", cfg.Seed, cfg.Duration)
		if cfg.Emulator {
			cfg.Reproduce += " ARGS=-emulator"
		}
	}
	out := &rig.LockedWriter{W: cfg.Out}

	// Baselines, before anything of the run exists.
	baseline := goleak.IgnoreCurrent()
	baseGoroutines := runtime.NumGoroutine()
	baseHeap := heapAfterGC()

	r, err := runSoak(ctx, cfg, plan, out)
	if err != nil {
		return nil, err
	}
	// Everything of the run is closed: goroutines and heap must be back.
	leakErr := findLeaks(baseline)
	inv := Invariant{Name: "goroutines back to their baseline after Close (goleak)", Status: Pass,
		Result: fmt.Sprintf("%d before the run, %d after Close", baseGoroutines, runtime.NumGoroutine())}
	if leakErr != nil {
		inv.Status = Fail
		inv.Details = firstLines(strings.Split(leakErr.Error(), "\n"), 40)
	}
	r.Invariants = append(r.Invariants, inv)
	endHeap := heapAfterGC()
	inv = Invariant{Name: fmt.Sprintf("heap after Close and GC within %d MiB of its baseline", heapBound>>20), Status: Pass,
		Result: fmt.Sprintf("%.1f MiB before the run, %.1f MiB after (%+.1f MiB)", mib(baseHeap), mib(endHeap), mib(endHeap)-mib(baseHeap))}
	if endHeap > baseHeap+heapBound {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	inv = Invariant{Name: "no data race (race detector)"}
	switch {
	case !RaceEnabled:
		inv.Status, inv.Result = NotChecked, "not built with -race (make chaos and make race are)"
	case cfg.RaceReports == nil:
		inv.Status, inv.Result = NotChecked, "built with -race; a race fails the test (go test) that runs this"
	default:
		n := cfg.RaceReports()
		inv.Status, inv.Result = Pass, fmt.Sprintf("built with -race: %d races reported", n)
		if n > 0 {
			inv.Status = Fail
		}
	}
	r.Invariants = append(r.Invariants, inv)
	r.Print(out)
	return r, nil
}

// silentDetection bounds how long, with outcome-based health, a silent fault on a group's
// current endpoint keeps the group there: a hang shows when the shortest call deadline of the
// load (3s) passes, which makes the endpoint suspect; the probe sent at once times out after
// the default ProbeTimeout (2s) and ejects it; the group fails over RecoveryTimeout later.
// UNAVAILABLE answers eject sooner (consecutive failures, within about a second).
const silentDetection = 3*time.Second + healthProbeTimeout + RecoveryTimeout

// silentBound is the most calls of the named worker one silent fault may fail when the client
// has outcome-based health: the call in flight when the fault began, and the calls it started
// before the group failed over (each held to its deadline d): 1 + ceil(silentDetection / d).
// A group held to a bandwidth limit with no path out (State.limitedOnly) never fails over; the
// bound holds there because such a fault lasts at most faultMax (5s), shorter than
// silentDetection: the calls it overlaps number at most 1 + floor((faultMax + d) / d).
func silentBound(worker string) int {
	for _, w := range workers {
		if w.name == worker {
			return 1 + int((silentDetection+w.deadline-1)/w.deadline)
		}
	}
	return 1
}

// overSilentBound returns a line for each worker and silent fault (by the step that began
// it) whose failed calls exceed silentBound.
func overSilentBound(silent []classified) []string {
	perFault := map[string]int{}
	var over []string
	for _, c := range silent {
		bound := silentBound(c.worker)
		for _, s := range c.silentSteps {
			key := fmt.Sprintf("%d %s", s, c.worker)
			if perFault[key]++; perFault[key] == bound+1 {
				over = append(over, fmt.Sprintf("worker %s failed more than %d calls under the fault of step %d", c.worker, bound, s))
			}
		}
	}
	return over
}

// findLeaks returns goleak's report of the goroutines not in baseline, after giving them up
// to leakWait to end (closed connections' goroutines take a moment).
func findLeaks(baseline goleak.Option) error {
	deadline := time.Now().Add(leakWait)
	for {
		err := goleak.Find(baseline)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leakWait bounds how long goroutines may take to end after Close.
const leakWait = 10 * time.Second

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// runSoak sets the run up, runs the schedule under load, verifies, and closes everything.
func runSoak(ctx context.Context, cfg Config, plan *Plan, out io.Writer) (*Report, error) {
	setupCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	be, err := rig.StartBackend(setupCtx, cfg.Emulator)
	if err != nil {
		return nil, fmt.Errorf("chaos: starting the backend: %w", err)
	}
	defer be.Close()
	direct, err := fixture.NewClient(setupCtx, be.Addr, be.Database)
	if err != nil {
		return nil, err
	}
	defer direct.Close()
	if err := fixture.FillEvents(setupCtx, direct, eventRows, eventPayload); err != nil {
		return nil, err
	}
	accounts, err := fixture.Accounts()
	if err != nil {
		return nil, err
	}
	topo, err := startTopology(be, plan)
	if err != nil {
		return nil, err
	}
	defer topo.close()
	switches := &rig.SwitchLog{}
	health := &healthLog{out: out, start: time.Now(), name: topo.name}
	rule4 := newLastResortLog(cfg.Logger.Handler(), topo.name)
	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(setupCtx, be.Database, fixture.ClientConfig(),
		topo.options(initialGroups, RecoveryTimeout, SwitchingDelay), clientSettings(slog.New(rule4), switches, health, topo), spannermetest.ClientOptions()...)
	if err != nil {
		return nil, fmt.Errorf("chaos: client: %w", err)
	}
	closeClient := sync.OnceFunc(func() { client.Close(); _ = gme.Close() })
	defer closeClient()
	if err := rig.WaitReady(setupCtx, gme, NumEndpoints); err != nil {
		return nil, err
	}
	printHeader(out, cfg, plan, be, topo)

	l := newLoad(client, accounts, be.Emulator, topo.name)
	x := &executor{plan: plan, topo: topo, gme: gme, out: out}
	w40 := startIssue40Watch(gme, topo, l)
	x.w40 = w40
	if plan.Frontends {
		x.db = &dbWatch{gme: gme, topo: topo}
	}
	x.timeline.initial = plan.Initial
	start := time.Now()
	x.timeline.start = start
	health.mu.Lock()
	health.start, health.counts, health.events = start, nil, nil // events before the load are the pools' first connections
	health.mu.Unlock()
	topo.fo.begin(start, l)
	l.start(cfg.Seed)
	tl := startTimeline(out, cfg.Interval, start, topo, gme, l, x)
	brown := startBrownoutLog(out, start, topo, gme)
	trace := startTierTrace(start, topo, gme)

	interrupted := x.run(ctx, start)
	settled, settleErr := settle(ctx, gme, topo)
	if wait := time.Until(start.Add(cfg.Duration)); wait > 0 && ctx.Err() == nil {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	l.halt()
	tl.stop()
	brown.stop()
	trace.stop()
	w40.stop()
	fmt.Fprintf(out, "%7.1fs ** load stopped; verifying through a direct client\n", time.Since(start).Seconds())

	vctx, vcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer vcancel()
	// A new direct client: the setup's has been idle since the load began, and the backend
	// deletes sessions idle for an hour (Spanner does, https://cloud.google.com/spanner/docs/sessions;
	// the emulator answered a 60-minute run's verification "Session not found").
	checker, err := fixture.NewClient(vctx, be.Addr, be.Database)
	if err != nil {
		return nil, fmt.Errorf("chaos: a direct client to verify the database: %w", err)
	}
	defer checker.Close()
	v, verr := verify(vctx, checker, l)

	r := &Report{Seed: cfg.Seed, Duration: cfg.Duration, Backend: be.Name, Reproduce: cfg.Reproduce, Applied: map[Kind]int{}, Interrupted: interrupted}
	for _, a := range x.timeline.steps {
		r.Applied[a.step.Kind]++
	}
	for i := range topo.eps {
		r.Served[i] = topo.eps[i].tcp.Stats().BytesFromBackend >> 10
	}
	ok, failed := l.totals()
	r.Calls, r.FailedCalls = ok+failed, failed
	r.invariantsOfData(v, verr, l)
	r.invariantsOfCalls(cfg, l, v, &x.timeline)
	r.invariantsOfRun(x, settled, settleErr, switches, health)
	if cfg.HealthDetection {
		bad, n := health.unjustified(&x.timeline)
		inv := Invariant{Name: "every ejection while a fault was in force on that endpoint", Status: Pass,
			Result:  fmt.Sprintf("%d ejections, %d with no fault on their endpoint in the %v before (connection events and the GOAWAY storm are none)", n, len(bad), justifyLookback),
			Details: firstLines(bad, 20)}
		if len(bad) > 0 {
			inv.Status = Fail
		}
		r.Invariants = append(r.Invariants, inv)
	}
	bad := brown.unjustified(&x.timeline)
	inv := Invariant{Name: "every degradation while a brownout/latency fault was on it", Status: Pass,
		Result: fmt.Sprintf("%s, %d fe-brownout applied; %d with no fe-brownout, fe-latency or slow on their endpoint in force or ended within %v (Window+5s) before",
			brown.summary(), r.Applied[KindFrontendBrownout], len(bad), degradeLookback),
		Details: firstLines(bad, 20)}
	if len(bad) > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	r.Invariants = append(r.Invariants, dbInvariant(x.db.collect(), switches.Events(), topo.name, start, plan.Frontends))
	var refused [NumEndpoints][]time.Time
	for i, e := range topo.eps {
		if e.calls != nil {
			refused[i] = e.calls.refused()
		}
	}
	health.mu.Lock()
	evs := append([]healthEvent(nil), health.events...)
	health.mu.Unlock()
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	r.Invariants = append(r.Invariants, commitInvariant(commitRuns(&x.timeline, time.Now()), refused, evs, rule4.spans(), &x.timeline, plan.Frontends))
	r.Invariants = append(r.Invariants, flapInvariant(memberFlaps(&x.timeline), switches.Events(), evs, &x.timeline, topo.name))
	eps, buckets, t0 := topo.fo.collect()
	ejectedAtHeal(eps, evs)
	var sw []groupSwitch
	for _, ev := range switches.Events() {
		if g, e := slices.Index(groupNames[:], ev.Name), topo.index(ev.To); g >= 0 && e >= 0 {
			sw = append(sw, groupSwitch{group: g, to: e, at: ev.At})
		}
	}
	slices.SortStableFunc(sw, func(a, b groupSwitch) int { return a.at.Compare(b.at) })
	r.Failover = failoverTable(eps, &x.timeline, r.failed, buckets, t0, time.Now(), sw)
	switchesOfWorst(r.Failover, switches.Events(), topo.name, &x.timeline)
	traceWorst(r.Failover, trace.all(), buckets, t0)
	r.Invariants = append(r.Invariants, failoverInvariant(r.Failover, plan.Frontends))
	r.Invariants = append(r.Invariants, dieYoungInvariant(dieYoungRuns(&x.timeline), w40.connSamples(), start))
	r.Invariants = append(r.Invariants, overloadInvariants(w40.overloads(), r.overloaded, switches.Events(), &x.timeline, topo.name, plan.Frontends)...)
	return r, nil // the deferred closes run before Run's leak check
}

// settle waits until every group's current endpoint is Available with a READY pool, and
// returns how long that took. Errors: settleTimeout passes first.
func settle(ctx context.Context, gme *spannerme.GCPMultiEndpoint, topo *topology) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	for {
		st := gme.Status()
		ready := map[string]bool{}
		for _, p := range st.Pools {
			if !p.Retired && p.Connectivity == "READY" {
				ready[p.Endpoint] = true
			}
		}
		ok := true
		var where []string
		for _, g := range st.Groups {
			avail := false
			for _, e := range g.Endpoints {
				if e.Endpoint == g.Current && e.State == spannerme.Available {
					avail = true
				}
			}
			if !avail || !ready[g.Current] {
				ok = false
			}
			where = append(where, g.Name+"->"+topo.name(g.Current))
		}
		if ok {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("not settled after %v: %s", settleTimeout, strings.Join(where, " "))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// printHeader prints what the run is: seed, topology, groups, load and fault odds.
func printHeader(out io.Writer, cfg Config, plan *Plan, be *rig.Backend, topo *topology) {
	p := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	p("spannerme chaos soak: seed %d, duration %v", cfg.Seed, cfg.Duration)
	p("  reproduce: %s", cfg.Reproduce)
	p("  backend: %s at %s, ONE database behind every endpoint (sessions and transactions live there)", be.Name, be.Addr)
	for i, e := range topo.eps {
		if e.fe != nil {
			p("  %s: client pool -> TCP fake %s (the PSC address) -> gRPC frontend %s (HTTP/2 ends here, as at a Google frontend) -> backend", endpointName(i), e.tcp.Addr(), e.fe.Addr())
		} else {
			p("  %s: client pool -> TCP fake %s (the PSC address) -> backend (no gRPC frontend: -no-frontends)", endpointName(i), e.tcp.Addr())
		}
	}
	if plan.Frontends {
		p("  GOAWAY storm for the whole run: %v", plan.Storm)
	}
	p("  groups: %v; RecoveryTimeout %v, SwitchingDelay %v; session RPCs use the default group; tiered keeps its tiers (slow start %v), the others are reconfigured",
		initialGroups, RecoveryTimeout, SwitchingDelay, tierSlowStart)
	p("  health from call outcomes: ejection %v × its count up to %v, interval %v, standby probes every %v, probe timeout %v (compressed like the schedule; other fields default)",
		healthSettings.BaseEjectionTime, healthSettings.MaxEjectionTime, healthSettings.Interval, healthSettings.ProbeInterval, healthProbeTimeout)
	p("  load (each worker's calls have its own deadline; west and tiered calls are routed with spannerme.NewMEContext):")
	for _, w := range workers {
		p("    %-17s %-13s through %-8s deadline %v", w.name, w.kind, w.group, w.deadline)
	}
	if be.Emulator {
		p("    (read-write transactions run one at a time: the emulator fails concurrent ones)")
	}
	p("  faults: one drawn every %v-%v; each holds %v-%v (fe-brownout %v-%v, fe-commit-fail-long %v-%v, only where the phase leaves it room); odds per draw (kinds that cannot apply are left out of that draw):",
		gapMin, gapMax, faultMin, faultMax, brownoutMin, brownoutMax, commitLongMin, commitLongMax)
	total := 0
	var ks []Kind
	for k, w := range weights {
		if !k.needsFrontends() || plan.Frontends {
			total += w
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	var odds []string
	for _, k := range ks {
		odds = append(odds, fmt.Sprintf("%s %.0f%%", k, 100*float64(weights[k])/float64(total)))
	}
	p("    %s", strings.Join(odds, ", "))
	p("  phases: every group keeps a healthy endpoint (no hard fault) for %v-%v, then every endpoint is down for %v-%v; %v warm-up, %v cool-down",
		time.Duration(0.3*float64(min(phaseMax, cfg.Duration/2))).Round(time.Second), min(phaseMax, cfg.Duration/2), allDownMin, allDownMax, warmup, cooldown)
	if plan.Frontends {
		p("  db-unavailable: one all-down phase in %d, where the run leaves it room, is instead %v without faults, then every endpoint's frontend answering UNAVAILABLE for %v-%v, then %v without faults",
			dbOdds, dbLeadIn, dbMin, dbMax, dbAfter)
	}
	p("  schedule: %d steps, printed below as they are applied (the whole plan: -plan)", len(plan.Steps))
}
