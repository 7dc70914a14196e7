package integration_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// oneGroup is the configuration of most scenarios: default = [e1, e2, e3].
func oneGroup(e1, e2, e3 string) *grpcgcp.GCPMultiEndpointOptions {
	return options(map[string]*multiendpointOptions{"default": group(recoveryTimeout, switchingDelay, e1, e2, e3)})
}

// Scenario 1 (F6): queries, reads, read-write transactions (fixture.Transfer) and DML
// transactions through the default group and through a routed group; the endpoints' byte
// counters prove which endpoint carried each.
func testReadsAndTransactionsByGroup(t *testing.T, b backend) {
	h := newHarness(t, b, func(e1, e2, e3 string) *grpcgcp.GCPMultiEndpointOptions {
		return options(map[string]*multiendpointOptions{
			"default": group(recoveryTimeout, switchingDelay, e1, e2, e3),
			"west":    group(recoveryTimeout, switchingDelay, e2, e3, e1),
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	payer, payee, dmlAccount := seedAccounts[0], seedAccounts[1], seedAccounts[7]
	for _, tc := range []struct {
		group string
		ctx   context.Context
		want  []bool // per endpoint: carried the call
	}{
		{"default", ctx, []bool{true, false, false}},
		{"west", spannerme.NewMEContext(ctx, "west"), []bool{false, true, false}},
	} {
		ops := []struct {
			name string
			run  func() error
		}{
			{"query", func() error { return h.countAccounts(tc.ctx) }},
			{"read", func() error {
				row, err := h.client.Single().ReadRow(tc.ctx, fixture.TableAccounts, spanner.Key{payer.AccountID}, []string{"AccountId"})
				if err != nil {
					return err
				}
				var id string
				if err := row.Column(0, &id); err != nil || id != payer.AccountID {
					return fmt.Errorf("ReadRow = %q, %v; want %q", id, err, payer.AccountID)
				}
				return nil
			}},
			{"transfer", func() error {
				return fixture.Transfer(tc.ctx, h.client, "s1-"+tc.group, payer.AccountID, payee.AccountID, 7, tc.group)
			}},
			{"DML transaction", func() error {
				_, err := h.client.ReadWriteTransaction(tc.ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
					// UPDATE, not INSERT: spannertest applies DML outside the transaction, so a
					// retried transaction would find its own inserted row.
					n, err := tx.Update(ctx, spanner.Statement{
						SQL:    "UPDATE Accounts SET Region = @g WHERE AccountId = @a",
						Params: map[string]any{"g": tc.group, "a": dmlAccount.AccountID},
					})
					if err == nil && n != 1 {
						err = fmt.Errorf("UPDATE changed %d rows, want 1", n)
					}
					return err
				})
				return err
			}},
		}
		for _, op := range ops {
			h.quiesce()
			var err error
			got := h.served(func() { err = op.run() })
			t.Logf("%s through group %q: served by e1/e2/e3 = %v, err %v", op.name, tc.group, got, err)
			if err != nil {
				t.Errorf("%s through group %q: %v", op.name, tc.group, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%s through group %q: carried by e1/e2/e3 = %v, want %v", op.name, tc.group, got, tc.want)
			}
		}
	}
	// The writes are there, once each.
	for _, g := range []string{"default", "west"} {
		row, err := h.client.Single().ReadRow(ctx, fixture.TableOrders, spanner.Key{"s1-" + g}, []string{"AccountId", "Amount", "Writer"})
		if err != nil {
			t.Errorf("order s1-%s: %v", g, err)
			continue
		}
		var acct, writer string
		var amount int64
		if err := row.Columns(&acct, &amount, &writer); err != nil || acct != payer.AccountID || amount != 7 || writer != g {
			t.Errorf("order s1-%s = %s %d %s (%v), want %s 7 %s", g, acct, amount, writer, err, payer.AccountID, g)
		}
	}
	if n, err := fixture.CountRows(ctx, h.client, fixture.TableOrders); err != nil || n != 2 {
		t.Errorf("Orders rows = %d, %v; want 2", n, err)
	}
	row, err := h.client.Single().ReadRow(ctx, fixture.TableAccounts, spanner.Key{payer.AccountID}, []string{"Balance"})
	var bal int64
	if err == nil {
		err = row.Column(0, &bal)
	}
	if err != nil || bal != payer.Balance-14 {
		t.Errorf("balance of %s = %d, %v; want %d", payer.AccountID, bal, err, payer.Balance-14)
	}
	if sum, err := fixture.TotalBalance(ctx, h.client); err != nil || sum != seedTotal() {
		t.Errorf("total balance = %d, %v; want %d", sum, err, seedTotal())
	}
}

// failover takes the primary e1 out with fault under a load of readers and writers and
// measures the failover: from the fault until the default group's current endpoint is e2 and
// e2 carries bytes. Every read must succeed (the Spanner client retries UNAVAILABLE); every
// acknowledged commit must be present exactly once.
func failover(t *testing.T, b backend, prefix, faultName string, fault func(e *spannermetest.Endpoint), minFailover, maxFailover time.Duration) {
	h := newHarness(t, b, oneGroup)
	l := startLoad(h.client, loadSpec{readers: 2, writers: b.writers, prefix: prefix})
	defer l.stop()
	l.waitOps(h, 10*time.Second, "load running", 20, 3)
	reads0, writes0 := l.reads.Load(), l.writes.Load()

	e2Before := h.e2.Stats().BytesFromBackend
	at := time.Now()
	h.mark(faultName)
	fault(h.e1)
	h.waitFor(maxFailover+5*time.Second, "e2 current and carrying bytes", func() bool {
		return h.group("default").Current == h.e2.Addr() && h.e2.Stats().BytesFromBackend-e2Before > controlBytes
	})
	took := time.Since(at)
	ev := h.waitSwitch("default", h.e2.Addr(), at)
	l.waitOps(h, 10*time.Second, "load continues on e2", 20, 3)
	h.waitServing(5*time.Second, "traffic on e2 only", h.e2)
	l.stop()

	t.Logf("%s: %s; failover (e2 current and carrying bytes) %s after the fault, switch event at +%s (%s), RecoveryTimeout %s; during the load: %s (%d reads, %d writes before the fault)",
		b.name, faultName, ms(took), ms(ev.At.Sub(at)), ev.Reason, ms(recoveryTimeout), l.summary(), reads0, writes0)
	if took < minFailover || took > maxFailover {
		t.Errorf("failover took %s, want between %s and %s", ms(took), ms(minFailover), ms(maxFailover))
	}
	reportFailures(t, "failed reads", l.failed(func(f failure) bool { return f.kind != "write" }))
	reportWriteFailures(t, l.failed(nil))
	l.verifyWrites(t, h.client)
}

// Scenario 2: the primary goes DOWN (connections refused and reset) mid-load.
func testPrimaryDownUnderLoad(t *testing.T, b backend) {
	failover(t, b, "s2", "e1 down", func(e *spannermetest.Endpoint) { e.Down() },
		recoveryTimeout-50*time.Millisecond, recoveryTimeout+5*time.Second)
}

// Scenario 3 (F3(b)): the primary is BLACKHOLED mid-load: live connections die, new ones are
// accepted but never answered (the HTTP/2 handshake never completes). Failover must follow
// RecoveryTimeout, not gRPC's connect timeout.
func testPrimaryBlackholedUnderLoad(t *testing.T, b backend) {
	failover(t, b, "s3", "e1 blackholed and its connections dropped", func(e *spannermetest.Endpoint) { e.Blackhole(); e.Drop() },
		recoveryTimeout-50*time.Millisecond, recoveryTimeout+5*time.Second)
}

// Scenario 4: after a failover, e1 comes back; traffic returns to e1 no earlier than
// SwitchingDelay after e1 became Available, with zero errors.
func testSwitchBack(t *testing.T, b backend) {
	h := newHarness(t, b, oneGroup)
	l := startLoad(h.client, loadSpec{readers: 2, writers: b.writers, prefix: "s4"})
	defer l.stop()
	l.waitOps(h, 10*time.Second, "load running", 20, 3)
	h.mark("e1 down")
	h.e1.Down()
	h.waitFor(recoveryTimeout+10*time.Second, "failover to e2", func() bool { return h.group("default").Current == h.e2.Addr() })
	l.waitOps(h, 10*time.Second, "load on e2", 20, 3)

	up := time.Now()
	h.mark("e1 up")
	if err := h.e1.Up(); err != nil {
		t.Fatal(err)
	}
	switchBack := h.timeSwitchBack("default", h.e1, up)
	l.waitOps(h, 10*time.Second, "load on e1", 20, 3)
	h.waitServing(5*time.Second, "traffic on e1 only", h.e1)
	l.stop()
	t.Logf("%s: switch-back: %s; load: %s", b.name, switchBack, l.summary())
	// e1 going down may leave an ambiguous commit (see ambiguousCommit); from e1.Up on, nothing
	// may fail at all.
	beforeUp := l.failed(func(f failure) bool { return f.start.Before(up) })
	reportFailures(t, "failed reads during the failover", l.failed(func(f failure) bool { return f.kind != "write" && f.start.Before(up) }))
	reportWriteFailures(t, beforeUp)
	reportFailures(t, "failed operations during the switch-back", l.failed(func(f failure) bool { return !f.start.Before(up) }))
	l.verifyWrites(t, h.client)
}

// timeSwitchBack waits, after e was brought back at up, until e is Available in group name and
// then until traffic is back on it; it checks that the switch came no earlier than the
// group's SwitchingDelay after e became Available, and returns the figures.
func (h *harness) timeSwitchBack(name string, e *spannermetest.Endpoint, up time.Time) string {
	h.t.Helper()
	// availableSeen is when the last poll that found e not Available began: e became Available
	// after it, so the switch-back can be observed no earlier than SwitchingDelay after it, however
	// late a poll on a loaded machine returns (taking the time after the poll that finds it
	// Available measured 450ms for a 500ms delay whose switch came 502ms after Available).
	availableSeen := time.Now()
	h.waitFor(10*time.Second, h.name(e.Addr())+" Available", func() bool {
		polled := time.Now()
		st, _ := h.endpointState(name, e.Addr())
		if st.State == spannerme.Available {
			return true
		}
		availableSeen = polled
		return false
	})
	h.waitFor(switchingDelay+10*time.Second, h.name(e.Addr())+" current again", func() bool { return h.group(name).Current == e.Addr() })
	currentSeen := time.Since(availableSeen)
	before := e.Stats().BytesFromBackend
	h.waitFor(10*time.Second, h.name(e.Addr())+" carrying bytes", func() bool { return e.Stats().BytesFromBackend-before > controlBytes })
	servingSeen := time.Since(availableSeen)
	st, _ := h.endpointState(name, e.Addr()) // Since: when it last became Available
	ev := h.waitSwitch(name, e.Addr(), up)
	sd := h.group(name).SwitchingDelay
	exact := ev.At.Sub(st.Since)
	if exact < sd {
		h.t.Errorf("switched back to %s %s after it became Available, before SwitchingDelay %s", h.name(e.Addr()), ms(exact), ms(sd))
	}
	if currentSeen < sd-50*time.Millisecond {
		h.t.Errorf("observed %s current %s after observing it Available, before SwitchingDelay %s", h.name(e.Addr()), ms(currentSeen), ms(sd))
	}
	if exact > sd+time.Second {
		h.t.Errorf("switched back to %s %s after it became Available, long after SwitchingDelay %s", h.name(e.Addr()), ms(exact), ms(sd))
	}
	return fmt.Sprintf("%s Available %s after Up; switch event (%s) %s after it became Available (SwitchingDelay %s); observed current %s and carrying bytes %s after it was observed Available",
		h.name(e.Addr()), ms(st.Since.Sub(up)), ev.Reason, ms(exact), ms(sd), ms(currentSeen), ms(servingSeen))
}

// Scenario 5: every endpoint down, then only e3 up: it takes traffic at once (the current
// endpoint is Unavailable, so no SwitchingDelay); then e1 up: traffic returns to e1 after
// SwitchingDelay. Reads issued while everything is down may fail; from the moment e3 is
// Available, none may.
func testAllDownThenRecover(t *testing.T, b backend) {
	h := newHarness(t, b, oneGroup)
	var short atomic.Bool // short per-read deadlines while everything is down
	l := startLoad(h.client, loadSpec{readers: 2, prefix: "s5", opTimeout: func() time.Duration {
		if short.Load() {
			return time.Second
		}
		return 30 * time.Second
	}})
	defer l.stop()
	l.waitOps(h, 10*time.Second, "load running", 20, 0)

	short.Store(true)
	down := time.Now()
	h.mark("e1, e2, e3 down")
	for _, e := range h.eps {
		e.Down()
	}
	h.waitFor(recoveryTimeout+10*time.Second, "every endpoint Unavailable", func() bool {
		g := h.group("default")
		for _, e := range g.Endpoints {
			if e.State != spannerme.Unavailable {
				return false
			}
		}
		return true
	})
	allUnavailable := time.Since(down)
	if cur := h.group("default").Current; cur != h.e1.Addr() {
		t.Errorf("with nothing available the current endpoint is %s, want e1 kept", h.name(cur))
	}

	up := time.Now()
	h.mark("e3 up")
	if err := h.e3.Up(); err != nil {
		t.Fatal(err)
	}
	upTook := time.Since(up)
	var e3Since time.Time
	h.waitFor(10*time.Second, "e3 Available", func() bool {
		st, _ := h.endpointState("default", h.e3.Addr())
		e3Since = st.Since
		return st.State == spannerme.Available
	})
	short.Store(false)
	countFrom := time.Now()
	// A query through e3 succeeds within a few seconds of e3 being up.
	var firstOK time.Duration
	var lastErr error
	h.waitFor(5*time.Second, "a query served by e3", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		before := h.e3.Stats().BytesFromBackend
		lastErr = h.countAccounts(ctx)
		ok := lastErr == nil && h.e3.Stats().BytesFromBackend-before > controlBytes
		if ok {
			firstOK = time.Since(up)
		}
		return ok
	})
	ev := h.waitSwitch("default", h.e3.Addr(), down)
	immediate := ev.At.Sub(e3Since)
	if immediate >= switchingDelay/2 {
		t.Errorf("switched to e3 %s after it became Available; want at once (the current endpoint was Unavailable)", ms(immediate))
	}
	if cur := h.group("default").Current; cur != h.e3.Addr() {
		t.Errorf("current endpoint %s, want e3", h.name(cur))
	}
	l.waitOps(h, 10*time.Second, "load on e3", 20, 0)
	h.waitServing(5*time.Second, "traffic on e3 only", h.e3)

	up1 := time.Now()
	h.mark("e1 up")
	if err := h.e1.Up(); err != nil {
		t.Fatal(err)
	}
	switchBack := h.timeSwitchBack("default", h.e1, up1)
	l.waitOps(h, 10*time.Second, "load on e1", 20, 0)
	h.waitServing(5*time.Second, "traffic on e1 only", h.e1)
	l.stop()

	whileDown := l.failed(func(f failure) bool { return f.start.Before(countFrom) })
	t.Logf("%s: all endpoints Unavailable %s after all went down; e3.Up took %s, e3 Available %s after Up, switch to e3 (%s) %s after that (no SwitchingDelay); first query served by e3 %s after e3.Up; then %s; load: %s, of which %d failures while everything was down (not counted)",
		b.name, ms(allUnavailable), ms(upTook), ms(e3Since.Sub(up)), ev.Reason, ms(immediate), ms(firstOK), switchBack, l.summary(), len(whileDown))
	reportFailures(t, "failed reads issued after e3 was Available", l.failed(func(f failure) bool { return !f.start.Before(countFrom) }))
}

// Scenario 6: runtime reconfiguration under load: add e3 on top, remove e1, reorder and
// change durations, add and remove a group, re-add e1; readers (default and routed) and
// writers never fail, traffic ends on the expected endpoints, and a removed endpoint's pool
// closes once drained.
func testReconfigurationUnderLoad(t *testing.T, b backend) {
	h := newHarness(t, b, func(e1, e2, e3 string) *grpcgcp.GCPMultiEndpointOptions {
		return options(map[string]*multiendpointOptions{
			"default": group(recoveryTimeout, switchingDelay, e1, e2),
			"west":    group(recoveryTimeout, switchingDelay, e2, e1),
		})
	})
	e1, e2, e3 := h.e1.Addr(), h.e2.Addr(), h.e3.Addr()
	// "east" is not configured at first: its calls use the default group.
	l := startLoad(h.client, loadSpec{readers: 2, routed: []string{"west", "east"}, writers: b.writers, prefix: "s6"})
	defer l.stop()
	l.waitOps(h, 10*time.Second, "load running", 20, 3)
	h.waitServing(5*time.Second, "default and east on e1, west on e2", h.e1, h.e2)

	steps := []struct {
		name        string
		groups      map[string]*multiendpointOptions
		wantDefault string
		serving     []*spannermetest.Endpoint
		before      func() // before the update
		check       func()
	}{
		{
			name: "add e3 on top",
			groups: map[string]*multiendpointOptions{
				"default": group(recoveryTimeout, switchingDelay, e3, e1, e2),
				"west":    group(recoveryTimeout, switchingDelay, e2, e1),
			},
			wantDefault: e3, serving: []*spannermetest.Endpoint{h.e3, h.e2},
		},
		{
			name: "remove e1",
			groups: map[string]*multiendpointOptions{
				"default": group(recoveryTimeout, switchingDelay, e3, e2),
				"west":    group(recoveryTimeout, switchingDelay, e2),
			},
			wantDefault: e3, serving: []*spannermetest.Endpoint{h.e3, h.e2},
			check: func() {
				h.waitFor(10*time.Second, "e1's pool closed", func() bool { return !h.hasPool(e1) })
				h.waitFor(10*time.Second, "e1's connections closed", func() bool { return h.e1.Stats().Active == 0 })
			},
		},
		{
			name: "reorder, RecoveryTimeout 1s, SwitchingDelay 200ms",
			groups: map[string]*multiendpointOptions{
				"default": group(time.Second, 200*time.Millisecond, e2, e3),
				"west":    group(recoveryTimeout, switchingDelay, e2),
			},
			wantDefault: e2, serving: []*spannermetest.Endpoint{h.e2},
			check: func() {
				if g := h.group("default"); g.RecoveryTimeout != time.Second || g.SwitchingDelay != 200*time.Millisecond {
					t.Errorf("default group durations %v/%v, want 1s/200ms", g.RecoveryTimeout, g.SwitchingDelay)
				}
			},
		},
		{
			name: "add group east, remove group west",
			groups: map[string]*multiendpointOptions{
				"default": group(time.Second, 200*time.Millisecond, e2, e3),
				"east":    group(recoveryTimeout, switchingDelay, e3, e2),
			},
			wantDefault: e2, serving: []*spannermetest.Endpoint{h.e2, h.e3},
			check: func() {
				n := h.gme.Status().UnknownGroups["west"]
				h.waitFor(5*time.Second, `calls naming the removed group "west" counted as unknown`, func() bool {
					return h.gme.Status().UnknownGroups["west"] > n
				})
			},
		},
		{
			// An update's zero keeps a kept group's value: SetGroupTimeouts sets zero.
			name: "SwitchingDelay 0, then re-add e1 on top",
			before: func() {
				if err := h.gme.SetGroupTimeouts("default", recoveryTimeout, 0); err != nil {
					t.Fatalf("SetGroupTimeouts: %v", err)
				}
			},
			groups: map[string]*multiendpointOptions{
				"default": group(0, 0, e1, e2, e3),
				"east":    group(recoveryTimeout, switchingDelay, e3, e2),
			},
			wantDefault: e1, serving: []*spannermetest.Endpoint{h.e1, h.e3},
			check: func() {
				if g := h.group("default"); g.RecoveryTimeout != recoveryTimeout || g.SwitchingDelay != 0 {
					t.Errorf("default group durations %v/%v, want %v/0", g.RecoveryTimeout, g.SwitchingDelay, recoveryTimeout)
				}
			},
		},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		start := time.Now()
		h.mark("update: " + s.name)
		if err := h.gme.UpdateMultiEndpoints(options(s.groups)); err != nil {
			t.Fatalf("%s: UpdateMultiEndpoints: %v", s.name, err)
		}
		updated := time.Since(start)
		h.waitFor(switchingDelay+10*time.Second, s.name+": default group's current endpoint", func() bool {
			return h.group("default").Current == s.wantDefault
		})
		current := time.Since(start)
		h.waitServing(10*time.Second, s.name+": traffic on the expected endpoints", s.serving...)
		settled := time.Since(start)
		if s.check != nil {
			s.check()
		}
		l.waitOps(h, 10*time.Second, s.name+": load continues", 10, 2)
		var serving []string
		for _, e := range s.serving {
			serving = append(serving, h.name(e.Addr()))
		}
		t.Logf("%s: %s: update returned in %s, default group on %s after %s, traffic settled on %v after %s",
			b.name, s.name, ms(updated), h.name(s.wantDefault), ms(current), serving, ms(settled))
	}
	l.stop()
	st := h.gme.Status()
	var pools []string
	for _, p := range st.Pools {
		pools = append(pools, fmt.Sprintf("%s(retired=%v)", h.name(p.Endpoint), p.Retired))
	}
	sort.Strings(pools)
	t.Logf("%s: load: %s; pools at the end: %s; unknown group calls: %v", b.name, l.summary(), strings.Join(pools, " "), st.UnknownGroups)
	if fmt.Sprint(pools) != "[e1(retired=false) e2(retired=false) e3(retired=false)]" {
		t.Errorf("pools at the end: %v, want e1, e2 and e3, none retired", pools)
	}
	reportFailures(t, "failed operations", l.failed(nil))
	l.verifyWrites(t, h.client)
}

// Scenario 7: client.Close returns promptly even when every endpoint is blackholed (its
// connections dropped, reconnects never answered), with reads and writes in flight; the
// operations in flight end promptly too.
func testCloseAllBlackholed(t *testing.T, b backend) {
	h := newHarness(t, b, oneGroup)
	l := startLoad(h.client, loadSpec{readers: 2, writers: b.writers, prefix: "s7"})
	defer l.stop()
	l.waitOps(h, 10*time.Second, "load running", 20, 3)
	h.mark("e1, e2, e3 blackholed and dropped")
	for _, e := range h.eps {
		e.Blackhole()
		e.Drop()
	}
	h.waitFor(10*time.Second, "no pool READY", func() bool {
		for _, p := range h.gme.Status().Pools {
			if p.Connectivity == "READY" {
				return false
			}
		}
		return true
	})
	// Calls now wait for connections that never complete their handshake: in flight on a
	// pool, or waiting for it to connect before they are sent.
	inFlight := int64(0)
	h.waitFor(5*time.Second, "calls in flight on, or waiting for, the blackholed pools", func() bool {
		st := h.gme.Status()
		inFlight = st.WaitingCalls
		for _, p := range st.Pools {
			inFlight += p.InFlight
		}
		return inFlight > 0
	})
	took, ok := closeWithin(10*time.Second, func() { h.client.Close() })
	if !ok {
		t.Fatalf("client.Close did not return within %s with every endpoint blackholed; status:\n%s", ms(took), h.statusString())
	}
	stopped, ok := closeWithin(10*time.Second, l.stop)
	if !ok {
		t.Fatalf("operations in flight did not end within %s of client.Close", ms(stopped))
	}
	gmeClose, ok := closeWithin(5*time.Second, func() { h.gme.Close() })
	if !ok {
		t.Fatalf("gme.Close after client.Close did not return within %s", ms(gmeClose))
	}
	var errs []string
	for _, f := range l.failed(nil) {
		msg := f.err.Error()
		if len(msg) > 160 {
			msg = msg[:160] + "..."
		}
		errs = append(errs, fmt.Sprintf("%s: %v (%s)", f.kind, spanner.ErrCode(f.err), msg))
	}
	t.Logf("%s: client.Close with every endpoint blackholed and %d calls in flight returned in %s; the load stopped %s later; gme.Close %s; load: %s; error codes: %s",
		b.name, inFlight, ms(took), ms(stopped), ms(gmeClose), l.summary(), summarizeCodes(errs))
	if took >= 5*time.Second {
		t.Errorf("client.Close took %s, want < 5s", ms(took))
	}
	if !h.gme.Status().Closed {
		t.Error("GCPMultiEndpoint not closed after client.Close")
	}
}

// reportWriteFailures fails t for every failed write among fs that is not an ambiguous commit,
// and logs the ambiguous ones: they are the backend's answer to a retried Commit whose first
// attempt committed, not an error of the multi-endpoint layer.
func reportWriteFailures(t *testing.T, fs []failure) {
	t.Helper()
	var bad []failure
	for _, f := range fs {
		switch {
		case f.kind != "write":
		case ambiguousCommit(f):
			t.Logf("ambiguous commit (Commit retried after its response was lost with the connection): %v", f)
		default:
			bad = append(bad, f)
		}
	}
	reportFailures(t, "failed writes", bad)
}

// summarizeCodes counts equal strings: "read: Canceled x3, write: Canceled x1".
func summarizeCodes(errs []string) string {
	counts := map[string]int{}
	var order []string
	for _, e := range errs {
		if counts[e] == 0 {
			order = append(order, e)
		}
		counts[e]++
	}
	var parts []string
	for _, e := range order {
		parts = append(parts, fmt.Sprintf("%s x%d", e, counts[e]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
