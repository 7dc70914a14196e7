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
	// (issue 8), so failed calls under silent faults are bounded (one per worker per fault)
	// instead of only counted.
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
)

// clientSettings are the client's settings during a run: quick reconnects and connection
// attempts, and compressed health settings, so that recoveries follow the schedule closely.
//
// The tiered groups get their tiers (topology.tiers).
func clientSettings(logger *slog.Logger, switches *rig.SwitchLog, health *healthLog, topo *topology) spannerme.Settings {
	return spannerme.Settings{
		Tiers:             topo.tiers(),
		ReconnectMaxDelay: 250 * time.Millisecond,
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

	l := newLoad(client, accounts, be.Emulator)
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
	w40.stop()
	fmt.Fprintf(out, "%7.1fs ** load stopped; verifying through a direct client\n", time.Since(start).Seconds())

	vctx, vcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer vcancel()
	v, verr := verify(vctx, direct, l)

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
	r.Failover = failoverTable(eps, &x.timeline, r.failed, buckets, t0, time.Now())
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

// executor applies the plan's steps at their times and records when it did.
type executor struct {
	plan *Plan
	topo *topology
	gme  *spannerme.GCPMultiEndpoint
	out  io.Writer

	mu       sync.Mutex // guards timeline.steps (appended) and errs
	timeline faultTimeline
	errs     []string
	// db follows the database-wide faults (nil without frontends).
	db *dbWatch
	// w40 dates issue 40's overloads (nil in tests that build an executor alone).
	w40 *issue40Watch
}

// state returns the state in force now.
func (x *executor) state() State {
	x.mu.Lock()
	defer x.mu.Unlock()
	if n := len(x.timeline.steps); n > 0 {
		return x.timeline.steps[n-1].step.After
	}
	return x.timeline.initial
}

// run applies every step at start + its At, in order. When ctx ends first it heals what is
// in force and returns how long the schedule ran; it returns 0 after the whole schedule.
func (x *executor) run(ctx context.Context, start time.Time) (interrupted time.Duration) {
	for _, s := range x.plan.Steps {
		select {
		case <-time.After(time.Until(start.Add(s.At))):
		case <-ctx.Done():
			x.healNow(start)
			return max(time.Since(start), time.Nanosecond)
		}
		x.apply(start, s)
	}
	return 0
}

// apply performs s and records it.
func (x *executor) apply(start time.Time, s Step) {
	var err error
	x.db.before(s)
	prev, current := x.state(), x.currentEndpoints(s)
	if s.Kind == KindReconfigure {
		err = x.gme.UpdateMultiEndpoints(x.topo.options(s.Groups, RecoveryTimeout, SwitchingDelay))
	} else {
		err = x.topo.apply(s)
	}
	at := time.Now()
	x.mu.Lock()
	x.timeline.steps = append(x.timeline.steps, applied{at: at, step: s})
	if err != nil {
		x.errs = append(x.errs, fmt.Sprintf("%s: %v", s, err))
	}
	x.mu.Unlock()
	x.db.after(s, at)
	x.w40.after(s, at)
	x.topo.fo.after(s, at, prev, current)
	line := fmt.Sprintf("%7.1fs ** %s", at.Sub(start).Seconds(), s)
	if err != nil {
		line += fmt.Sprintf(" FAILED: %v", err)
	}
	fmt.Fprintln(x.out, line)
}

// currentEndpoints returns each group's current endpoint (an index, -1 for none) before a
// fault step that may start a failover (see failoverWatch.after); all -1 for other steps.
func (x *executor) currentEndpoints(s Step) [numGroups]int {
	cur := [numGroups]int{-1, -1, -1}
	if s.Endpoint < 0 || kinds[s.Kind].heal == 0 {
		return cur
	}
	for _, g := range x.gme.Status().Groups {
		if i := slices.Index(groupNames[:], g.Name); i >= 0 {
			for e := range NumEndpoints {
				if x.topo.addr(e) == g.Current {
					cur[i] = e
				}
			}
		}
	}
	return cur
}

// healNow heals every fault in force, at once (the run was interrupted).
func (x *executor) healNow(start time.Time) {
	s := x.state()
	if f := s.Database; f.active() {
		s.Database = Fault{}
		x.apply(start, Step{Kind: kinds[f.Kind].heal, Endpoint: -1, Phase: "interrupted", After: s})
	}
	for e := range NumEndpoints {
		if f := s.TCP[e]; f.active() {
			s.TCP[e] = Fault{}
			x.apply(start, Step{Kind: kinds[f.Kind].heal, Endpoint: e, Phase: "interrupted", After: s})
		}
		if f := s.Frontend[e]; f.active() {
			s.Frontend[e] = Fault{}
			x.apply(start, Step{Kind: kinds[f.Kind].heal, Endpoint: e, Phase: "interrupted", After: s})
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

// invariantsOfData adds the rows about what the database holds.
func (r *Report) invariantsOfData(v *verdict, verr error, l *load) {
	if verr != nil {
		r.Invariants = append(r.Invariants, Invariant{Name: "the database could be verified", Status: Fail, Result: verr.Error()})
		return
	}
	inv := Invariant{Name: "total balance conserved", Status: Pass, Result: fmt.Sprintf("%d at the end, %d seeded", v.total, v.wantTotal)}
	if v.total != v.wantTotal {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	inv = Invariant{Name: "every balance = seed + the transfers that committed", Status: Pass,
		Result: fmt.Sprintf("%d accounts, %d differ", len(l.accounts), len(v.balances)), Details: firstLines(v.balances, 20)}
	if len(v.balances) > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	r.Acked = v.transfersAcked + v.insertsAcked
	r.Lost = v.lost()
	inv = Invariant{Name: "every acknowledged commit present exactly once", Status: Pass,
		Result:  fmt.Sprintf("%d transfers + %d inserts acknowledged; %d missing, %d duplicated", v.transfersAcked, v.insertsAcked, len(v.missing), len(v.duplicated)),
		Details: firstLines(append(append([]string(nil), v.missing...), v.duplicated...), 20)}
	if r.Lost > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	inv = Invariant{Name: "no unexplained rows (double commits, failed-then-committed)", Status: Pass,
		Result: fmt.Sprintf("%d unexplained rows", len(v.wrong)), Details: firstLines(v.wrong, 20)}
	if len(v.wrong) > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	r.UnknownCommitted = v.unknownCommitted
	r.Invariants = append(r.Invariants, Invariant{Name: "commits with unknown outcome settled by their ID", Status: Pass,
		Result: fmt.Sprintf("%d failed writes had sent Commit: %d committed (counted as done), %d did not (failed calls below)",
			v.unknown, v.unknownCommitted, v.unknown-v.unknownCommitted)})
	l.mu.Lock()
	anomalies := append([]string(nil), l.anomalies...)
	l.mu.Unlock()
	inv = Invariant{Name: "every successful read consistent (sum, rows, balances >= 0)", Status: Pass,
		Result:  fmt.Sprintf("%d reads, %d wrong", l.ok[opPointRead].Load()+l.ok[opSum].Load()+l.ok[opStream].Load(), len(anomalies)),
		Details: firstLines(anomalies, 20)}
	if len(anomalies) > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
}

// invariantsOfCalls classifies every failed call and adds the rows about them.
func (r *Report) invariantsOfCalls(cfg Config, l *load, v *verdict, tl *faultTimeline) {
	l.mu.Lock()
	failures := append([]outcome(nil), l.failures...)
	l.mu.Unlock()
	sort.Slice(failures, func(i, j int) bool { return failures[i].start.Before(failures[j].start) })
	var byClass [numClasses][]classified
	for _, f := range failures {
		if v != nil && f.kind.isWrite() && v.settled[f.id] {
			continue // committed: settled by its ID
		}
		c := classify(f, tl)
		byClass[c.class] = append(byClass[c.class], c)
		r.failed = append(r.failed, c)
	}
	r.Unexplained, r.Silent, r.NoHealthy = len(byClass[classUnexplained]), len(byClass[classSilent]), len(byClass[classNoHealthy])
	r.overloaded = byClass[classOverload]
	list := func(cs []classified, n int) []string {
		var out []string
		for _, c := range cs {
			msg := c.err.Error()
			if len(msg) > 200 {
				msg = msg[:200] + "..."
			}
			out = append(out, fmt.Sprintf("%7.1fs %-16s %v after %v; faults in force: %s; %s",
				c.start.Sub(tl.start).Seconds(), c.worker, c.code(), c.end.Sub(c.start).Round(time.Millisecond), c.faults, msg))
		}
		return firstLines(out, n)
	}
	inv := Invariant{Name: "failed calls while every group had a healthy endpoint", Status: Pass,
		Result:  fmt.Sprintf("%d, none allowed (no silent fault on their groups either)", r.Unexplained),
		Details: list(byClass[classUnexplained], 30)}
	if r.Unexplained > 0 {
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	r.Invariants = append(r.Invariants, tierInvariant(byClass[classUnexplained], tl, list))

	silent := byClass[classSilent]
	inv = Invariant{Name: "failed calls under silent faults (READY but failing/hung)", Details: list(silent, 30)}
	summary := countBy(silent)
	if !cfg.HealthDetection {
		inv.Status = Counted
		inv.Result = fmt.Sprintf("%d (%s); this build has no outcome-based health (issue 8), so a group stays on such an endpoint: bound = every call routed there during the fault", len(silent), summary)
	} else {
		over := overSilentBound(silent)
		inv.Status = Pass
		inv.Result = fmt.Sprintf("%d (%s); bound per worker per fault: 1 + ceil(%v / its deadline) (the call in flight, and those before failover)",
			len(silent), summary, silentDetection)
		if len(over) > 0 {
			inv.Status = Fail
			inv.Details = append(firstLines(over, 10), inv.Details...)
		}
	}
	r.Invariants = append(r.Invariants, inv)
	r.Invariants = append(r.Invariants, Invariant{Name: "failed calls while a group had no healthy endpoint", Status: Counted,
		Result:  fmt.Sprintf("%d (%s); allowed: nothing could serve them", r.NoHealthy, countBy(byClass[classNoHealthy])),
		Details: list(byClass[classNoHealthy], 10)})
	perOp := map[string]int{}
	for _, c := range byClass[classOverload] {
		perOp[c.kind.String()]++
	}
	var ops []string
	for k, n := range perOp {
		ops = append(ops, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ops)
	r.Invariants = append(r.Invariants, Invariant{Name: "failed calls the database refused (query-overload, db-overload)", Status: Counted,
		Result:  fmt.Sprintf("%d (%s); RESOURCE_EXHAUSTED from the database at every endpoint, as a plain client gets it: no loss, judged by the overload rows", len(byClass[classOverload]), joinOr(ops, "none")),
		Details: list(byClass[classOverload], 5)})
}

// countBy summarizes failed calls by code: "DeadlineExceeded x3, Unavailable x1", or "none".
func countBy(cs []classified) string {
	counts := map[string]int{}
	for _, c := range cs {
		counts[c.code().String()]++
	}
	var parts []string
	for code, n := range counts {
		parts = append(parts, fmt.Sprintf("%s x%d", code, n))
	}
	sort.Strings(parts)
	return joinOr(parts, "none")
}

// invariantsOfRun adds the rows about the schedule and the client's recovery.
func (r *Report) invariantsOfRun(x *executor, settled time.Duration, settleErr error, switches *rig.SwitchLog, health *healthLog) {
	x.mu.Lock()
	errs := append([]string(nil), x.errs...)
	n := len(x.timeline.steps)
	x.mu.Unlock()
	var applied []string
	for k := KindNone + 1; k < numKinds; k++ {
		if c := r.Applied[k]; c > 0 {
			applied = append(applied, fmt.Sprintf("%s %d", k, c))
		}
	}
	inv := Invariant{Name: "every scheduled step applied", Status: Pass,
		Result: fmt.Sprintf("%d of %d steps: %s", n, len(x.plan.Steps), strings.Join(applied, ", ")), Details: firstLines(errs, 20)}
	switch {
	case len(errs) > 0:
		inv.Status = Fail
	case r.Interrupted > 0:
		inv.Status = NotChecked
		inv.Result = fmt.Sprintf("interrupted at %v: ", r.Interrupted.Round(100*time.Millisecond)) + inv.Result
	case n < len(x.plan.Steps):
		inv.Status = Fail
	}
	r.Invariants = append(r.Invariants, inv)
	reasons := map[string]int{}
	for _, ev := range switches.Events() {
		reasons[ev.Reason.String()]++
	}
	var rs []string
	for k, v := range reasons {
		rs = append(rs, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(rs)
	inv = Invariant{Name: "client settled after the last heal", Status: Pass,
		Result: fmt.Sprintf("every group on an Available, READY endpoint %v after the last heal; switches: %s; health: %s; KB served by e1/e2/e3: %d/%d/%d",
			settled.Round(time.Millisecond), joinOr(rs, "none"), health.summary(), r.Served[0], r.Served[1], r.Served[2])}
	if settleErr != nil {
		inv.Status, inv.Result = Fail, settleErr.Error()
	}
	r.Invariants = append(r.Invariants, inv)
}
