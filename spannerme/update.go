package spannerme

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"google.golang.org/grpc"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// UpdateMultiEndpoints applies a new configuration while calls flow. It returns once new
// pools are dialed (dials do not wait for connections) and the new routing is in force;
// concurrent calls to it, and Close, wait for it. Groups are matched by
// name: new ones are created, missing ones removed, kept ones get the new endpoint list
// (their endpoints' states are kept). Endpoints are
// matched by address: a new one gets a new pool; one no group lists any more is retired: it
// takes no new calls, its in-flight calls (unary and streaming) finish, and it is closed when
// they are done or after Settings.DrainTimeout. GRPCgcpConfig and DialFunc of meOpts are
// ignored: pools keep the configuration they were dialed with.
//
// RecoveryTimeout and SwitchingDelay: a new group takes the update's, zero meaning zero, as
// at creation. A kept group keeps its own where the update leaves them zero, as upstream's
// UpdateMultiEndpoints does (it changes only the endpoint lists of kept groups, so code
// written for it passes groups that list only Endpoints); a non-zero value changes it (upstream
// ignores it). To set a kept group's durations to exactly what is given, zero included, call
// SetGroupTimeouts. A watched configuration file (WatchConfig) states them in full instead:
// each reload sets them as the file writes them, absent meaning zero.
//
// The whole configuration is validated and every new pool dialed before anything changes: on
// error nothing changes and the new pools are closed. Errors: a *ConfigError wrapping
// ErrInvalidConfig; a dial error naming the endpoint; ErrClosed after Close (and on a
// zero-value GCPMultiEndpoint).
func (gme *GCPMultiEndpoint) UpdateMultiEndpoints(meOpts *grpcgcp.GCPMultiEndpointOptions) error {
	if gme.zero() {
		return ErrClosed
	}
	cfg, err := parseConfig(meOpts)
	if err != nil {
		return err
	}
	cfg.collapseTo(gme.pl.emulator)
	gme.updateMu.Lock()
	defer gme.updateMu.Unlock()
	return gme.apply(cfg, keepUnsetDurations)
}

// SetGroupTimeouts sets the RecoveryTimeout and SwitchingDelay of the group named group to
// exactly recoveryTimeout and switchingDelay, zero included (zero: fail over at once, switch
// back at once; the meaning of each is that of multiendpoint.MultiEndpointOptions). It is the
// way to set a duration to zero at runtime, which UpdateMultiEndpoints cannot (a zero there
// keeps the group's value). The group's endpoints and their states are kept, and clocks
// already running keep their start: an endpoint Recovering since t becomes Unavailable at
// t + recoveryTimeout (at once if that is past), and a pending switch lands SwitchingDelay
// after its target's return (at once if that is past). Calls flow meanwhile; it is serialized
// with UpdateMultiEndpoints and Close. A later UpdateMultiEndpoints with non-zero durations
// for the group, or a reload of a watched configuration file, sets them again. The new values
// are in GroupStatus.RecoveryTimeout and SwitchingDelay once it returns.
//
// Errors: a *ConfigError wrapping ErrInvalidConfig, naming the group, for a group that is not
// configured or a negative duration; ErrClosed after Close (and on a zero-value
// GCPMultiEndpoint). On error nothing changes.
func (gme *GCPMultiEndpoint) SetGroupTimeouts(group string, recoveryTimeout, switchingDelay time.Duration) error {
	if gme.zero() {
		return ErrClosed
	}
	if err := multiendpoint.ValidateDurations(group, recoveryTimeout, switchingDelay); err != nil {
		return fromStateMachine(err)
	}
	gme.updateMu.Lock()
	defer gme.updateMu.Unlock()
	gme.mu.Lock()
	closed, me := gme.closed, gme.groups[group]
	gme.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if me == nil {
		return configErr(group, "", -1, "no such MultiEndpoint")
	}
	// Groups are closed only by Close and apply, under updateMu: me is open.
	return fromStateMachine(me.SetTimeouts(recoveryTimeout, switchingDelay))
}

// durationsFor returns the durations group g of a new configuration gives its kept state
// machine me under rule.
func durationsFor(g groupConfig, me *multiendpoint.MultiEndpoint, rule durationRule) (recoveryTimeout, switchingDelay time.Duration) {
	recoveryTimeout, switchingDelay = g.recoveryTimeout, g.switchingDelay
	if rule == keepUnsetDurations && (recoveryTimeout == 0 || switchingDelay == 0) {
		st := me.Status()
		if recoveryTimeout == 0 {
			recoveryTimeout = st.RecoveryTimeout
		}
		if switchingDelay == 0 {
			switchingDelay = st.SwitchingDelay
		}
	}
	return recoveryTimeout, switchingDelay
}

// apply moves to cfg: dial, create groups, publish, update groups, publish, retire. rule
// says what a kept group's zero durations mean.
// gme.updateMu must be held; gme.mu is taken only to read and write the maps, never across a
// dial or a state-machine call. Calls keep flowing on the published snapshot meanwhile.
func (gme *GCPMultiEndpoint) apply(cfg *config, rule durationRule) error {
	if err := assignTiers(cfg, gme.tierSettings, gme.pl.emulator != ""); err != nil {
		return err
	}
	gme.mu.Lock()
	if gme.closed || gme.zero() {
		gme.mu.Unlock()
		return ErrClosed
	}
	oldPools, oldGroups := gme.pools, gme.groups // replaced, never mutated, under updateMu
	gme.mu.Unlock()

	// 1. Dial new pools. Nothing is visible yet.
	want := cfg.endpoints()
	fresh := make(map[string]*pool.Pool)
	closeFresh := func() {
		for _, p := range fresh {
			p.Close()
		}
	}
	for _, g := range cfg.groups {
		for i, e := range g.endpoints {
			if oldPools[e] != nil || fresh[e] != nil {
				continue
			}
			obs := newPoolEvents(&gme.mechanisms, e, gme.endpointOpts[e].Name)
			w := pool.NewWatch(e, gme.pl.clock, obs)
			w.SetBackoff(gme.settings.reconnectBackoff()) // for connections that die young
			opts := pool.DialOptions(w, gme.gcpJSON, gme.dialOptionsFor(e), gme.pl.ownDialer, gme.pl.dns, gme.settings.Health.brownoutOn())
			conn, err := gme.dial(gme.dialCtx, e, opts...)
			if err == nil && conn == nil {
				err = errors.New("DialFunc returned no connection and no error")
			}
			if err != nil {
				w.Release()
				closeFresh()
				return fmt.Errorf("spannerme: group %q: endpoint %d %q: dial: %w", g.name, i, e, err)
			}
			fresh[e] = pool.New(e, conn, pool.Options{Observer: obs, Clock: gme.pl.clock, Watch: w,
				Health: gme.settings.Health.poolOptions(), LazyStreams: gme.lazyStreams, DecorateError: spannerreq.WithError,
				CallEnded: func(p *pool.Pool, c pool.CallInfo, method string, err error) {
					gme.steering.CallEnded(p, c.Tag, c.Class, method, err)
				}})
			gme.obs.Metrics().EndpointSeries(e, gme.endpointOpts[e].Name)
		}
	}
	// 2. Create new groups. An endpoint whose pool is already READY starts Available (F2);
	// a fresh pool has not connected yet.
	// The closure stays with the group for its later SetEndpoints, so it reads the snapshot
	// in force when it is called, never a map captured now (a re-added endpoint has a fresh
	// pool, not the retired one).
	initial := func(e string) multiendpoint.State {
		var p *pool.Pool
		if s := gme.snap.Load(); s != nil {
			p = s.Pools[e]
		}
		return initialState(p)
	}
	created := make(map[string]*multiendpoint.MultiEndpoint)
	for _, g := range cfg.groups {
		if oldGroups[g.name] != nil {
			continue
		}
		eps := g.endpoints
		if g.tiers != nil {
			eps = nil // the tiers list them
		}
		me, err := multiendpoint.New(multiendpoint.Options{
			Name: g.name, Endpoints: eps, Tiers: g.tiers, SlowStart: g.slowStart, RecoveryTimeout: g.recoveryTimeout, SwitchingDelay: g.switchingDelay,
			InitialState: initial, OnSwitch: gme.onSwitch, Clock: gme.pl.clock,
			SwitchingJitter: gme.settings.SwitchingJitter,
			// With RecoveryTimeout 0, a first connection attempt gets as long as gRPC gives it.
			ConnectGrace: gme.settings.MinConnectTimeout,
		})
		if err != nil { // unreachable after parseConfig; never leave a half-applied update
			for _, me := range created {
				me.Close()
			}
			closeFresh()
			return fromStateMachine(err)
		}
		created[g.name] = me
	}
	// A name is a label: kept pools take their endpoint's new one at once (fresh ones have
	// it), before the switches this update causes are logged. Nothing fails after this.
	for e, p := range oldPools {
		if ev := eventsOf(p); ev != nil && want[e] {
			ev.rename(gme.endpointOpts[e].Name)
		}
	}
	// 3. Publish the new groups over the union of old and new pools, then update kept groups:
	// a call that read the old snapshot and sees a new current endpoint retries on this one.
	union := make(map[string]*pool.Pool, len(oldPools)+len(fresh))
	for e, p := range oldPools {
		union[e] = p
	}
	for e, p := range fresh {
		union[e] = p
	}
	groups := make(map[string]*multiendpoint.MultiEndpoint, len(cfg.groups))
	for _, g := range cfg.groups {
		if me := oldGroups[g.name]; me != nil {
			groups[g.name] = me
		} else {
			groups[g.name] = created[g.name]
		}
	}
	gme.snap.Store(route.New(cfg.defaultName, groups, union, gme.directed, &gme.tiers))
	for _, g := range cfg.groups {
		if me := oldGroups[g.name]; me != nil {
			// Validated by parseConfig; it fails only after the group's Close, which only
			// Close and this function call, under updateMu.
			rt, sd := durationsFor(g, me, rule)
			if g.tiers != nil {
				_ = me.ReconfigureTiers(g.tiers, rt, sd)
			} else {
				_ = me.Reconfigure(g.endpoints, rt, sd)
			}
		}
	}
	gme.tiers.Update(tieredGroups(cfg), groups, gme.log)
	// 4. Publish the final snapshot: only configured endpoints. It comes after Tiering.Update:
	// route.New takes each group's Picker and members from it.
	pools := make(map[string]*pool.Pool, len(want))
	for e := range want {
		pools[e] = union[e]
	}
	gme.snap.Store(route.New(cfg.defaultName, groups, pools, gme.directed, &gme.tiers))
	gme.changed.Signal()
	// 5. Start monitoring the new pools; evaluate brownout again for the groups as they are
	// now (a degraded endpoint's fallback may be gone), then every group's verdicts (an
	// endpoint already READY that a group starts listing is Available at once).
	for _, p := range fresh {
		p.StartMonitor()
	}
	for _, p := range pools {
		gme.judge.SampleBrownout(gme.snap.Load(), p)
	}
	gme.judge.EvaluateAll()
	// 6. Retire what is gone.
	var gone []*pool.Pool
	gme.noteDialed(fresh, want)
	gme.mu.Lock()
	gme.groups, gme.pools = groups, pools
	for e, p := range oldPools {
		if !want[e] {
			gme.retired[p] = true
			gone = append(gone, p)
		}
	}
	gme.mu.Unlock()
	for name, me := range oldGroups {
		if groups[name] == nil {
			me.Close()
		}
	}
	gme.obs.RetainHistory(func(name string) bool { return groups[name] != nil })
	gme.judge.Retain(func(name string) bool { return groups[name] != nil })
	for _, p := range gone {
		gme.retire(p)
	}
	return nil
}

// onSwitch receives every group's switch events, synchronously: waiting calls pick again,
// the observer counts and remembers the event, and it is queued for the logger and
// Settings.OnSwitch, with the names of its endpoints as they are now.
func (gme *GCPMultiEndpoint) onSwitch(me multiendpoint.Event) {
	ev := switchEventOf(me)
	fromName, toName := gme.endpointName(ev.From), gme.endpointName(ev.To)
	gme.changed.Signal()
	gme.obs.Switched(me, ev.Reason.String(), toName)
	gme.events.push(ev, fromName, toName)
}

// retire stops new calls on p and closes it once drained. gme.updateMu must be held (it
// starts a goroutine counted by gme.wg).
func (gme *GCPMultiEndpoint) retire(p *pool.Pool) {
	p.Retire() // halts its health; the drain goroutine's close waits for the probes, not the update
	gme.wg.Add(1)
	go func() {
		defer gme.wg.Done()
		if p.DrainThenClose(gme.settings.DrainTimeout, gme.stop) {
			gme.log.Warn("spannerme: retired endpoint's pool closed with calls still in flight after the drain timeout",
				"endpoint", p.Endpoint(), "in_flight", p.InFlight(), "drain_timeout", gme.settings.DrainTimeout)
		}
		gme.mu.Lock()
		delete(gme.retired, p)
		gme.mu.Unlock()
	}()
}

// dialOptionsFor returns the dial options of endpoint e's pool: the GCPMultiEndpoint's, then
// those of its EndpointOptions. gme.updateMu must be held.
func (gme *GCPMultiEndpoint) dialOptionsFor(e string) []grpc.DialOption {
	eo, ok := gme.endpointOpts[e]
	if !ok || eo.Authority == "" {
		return gme.dialOpts
	}
	return append(append([]grpc.DialOption(nil), gme.dialOpts...), grpc.WithAuthority(eo.Authority))
}

// noteDialed records the options the pools of fresh endpoints were dialed with and forgets
// those of endpoints gone. gme.updateMu must be held.
func (gme *GCPMultiEndpoint) noteDialed(fresh map[string]*pool.Pool, want map[string]bool) {
	if gme.dialedOpts == nil {
		gme.dialedOpts = make(map[string]EndpointOptions)
	}
	for e := range fresh {
		gme.dialedOpts[e] = gme.endpointOpts[e].dialOnly()
	}
	for e := range gme.dialedOpts {
		if !want[e] {
			delete(gme.dialedOpts, e)
		}
	}
}

// updateWithEndpointOptions is UpdateMultiEndpoints that also replaces the endpoint options
// (Settings.EndpointOptions) new pools are dialed with. Pools already dialed keep theirs,
// except the Name, which every pool takes at once: it returns, sorted, the configured
// endpoints whose pool was dialed with options other than those of eo, Name aside (they
// apply once the endpoint is removed and added again, or at a restart).
// On error nothing changes. Errors as for UpdateMultiEndpoints, and a *ConfigError for eo.
func (gme *GCPMultiEndpoint) updateWithEndpointOptions(meOpts *grpcgcp.GCPMultiEndpointOptions, eo map[string]EndpointOptions) (stale []string, err error) {
	return gme.updateWithSettings(meOpts, eo, nil, true)
}

// updateFromFile is updateWithEndpointOptions of a watched file's parsed content f, that
// also replaces the directed read policies (Settings.DirectedReads) with f's, from the next
// call on. Errors as for UpdateMultiEndpoints (f is valid: a dial error, or ErrClosed).
func (gme *GCPMultiEndpoint) updateFromFile(f *parsedFile) (stale []string, err error) {
	stale, err = gme.updateParsed(f.cfg, f.endpointOpts, f.directed, f.tiers, false, durationsAsWritten)
	if err == nil {
		gme.hedger.Set(f.hedging)
	}
	return stale, err
}

// updateWithSettings parses meOpts, the endpoint options eo and the directed read policies
// dr, then applies them as updateParsed does; on error nothing changes.
func (gme *GCPMultiEndpoint) updateWithSettings(meOpts *grpcgcp.GCPMultiEndpointOptions, eo map[string]EndpointOptions,
	dr map[string]*spannerpb.DirectedReadOptions, keepDirected bool) (stale []string, err error) {
	if gme.zero() {
		return nil, ErrClosed
	}
	cfg, err := parseConfig(meOpts)
	if err != nil {
		return nil, err
	}
	opts, err := parseEndpointOptions(eo)
	if err != nil {
		return nil, err
	}
	directed, err := parseDirectedReads(dr)
	if err != nil {
		return nil, err
	}
	return gme.updateParsed(cfg, opts, directed, nil, keepDirected, keepUnsetDurations)
}

// updateParsed applies the validated cfg (which it modifies) with the endpoint options opts
// and, unless keepDirected, the directed read policies directed, kept groups' zero durations
// meaning what rule says; on error nothing changes.
// It returns, sorted, the configured endpoints whose pool was dialed with options other than
// opts', Name aside.
// Unless keepDirected, the tiers (Settings.Tiers, validated) are replaced by tiers too: a
// file states them in full.
func (gme *GCPMultiEndpoint) updateParsed(cfg *config, opts endpointOptions, directed directedReads, tiers map[string]tierConfig,
	keepDirected bool, rule durationRule) (stale []string, err error) {
	if gme.zero() {
		return nil, ErrClosed
	}
	cfg.collapseTo(gme.pl.emulator)
	gme.updateMu.Lock()
	defer gme.updateMu.Unlock()
	old, oldDirected, oldTiers := gme.endpointOpts, gme.directed, gme.tierSettings
	gme.endpointOpts = opts
	if !keepDirected {
		gme.directed = directed
		gme.tierSettings = tiers
	}
	if err := gme.apply(cfg, rule); err != nil {
		gme.endpointOpts, gme.directed, gme.tierSettings = old, oldDirected, oldTiers
		return nil, err
	}
	for e, dialed := range gme.dialedOpts {
		if dialed != opts[e].dialOnly() {
			stale = append(stale, e)
		}
	}
	sort.Strings(stale)
	return stale, nil
}

// initialState is what a group adding endpoint e knows of it: Available when its pool is
// available, Unavailable when the pool is known down (or ejected), Recovering while its
// first connection attempt is under way or for a fresh pool.
func initialState(p *pool.Pool) multiendpoint.State {
	switch {
	case p == nil: // a fresh pool: its first attempt is under way
		return multiendpoint.Recovering
	case p.Available():
		return multiendpoint.Available
	case p.Settled():
		return multiendpoint.Unavailable
	}
	return multiendpoint.Recovering
}
