package spannerme

// What an update does to the RecoveryTimeout and SwitchingDelay of a kept group (upstream's
// meaning: an update that leaves them zero keeps them), how a caller sets them exactly
// (SetGroupTimeouts), and what a configuration file's reload does (the file states them in
// full). The state machines run on a fake clock: a test waits in real time only for
// connections, bounded, and moves the clock itself.

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// endpointsOnly is a group as upstream's reconfiguration code writes it: its endpoints, no
// durations.
func endpointsOnly(endpoints ...string) *multiendpoint.MultiEndpointOptions {
	return &multiendpoint.MultiEndpointOptions{Endpoints: endpoints}
}

// stateIn returns the state of endpoint e in group g, and whether g lists e.
func stateIn(gme *GCPMultiEndpoint, g, e string) (EndpointState, bool) {
	for _, es := range groupOf(gme, g).Endpoints {
		if es.Endpoint == e {
			return es.State, true
		}
	}
	return Unavailable, false
}

// waitStateIn waits, in real time, until endpoint e of group g is in state want.
func waitStateIn(t *testing.T, gme *GCPMultiEndpoint, g, e string, want EndpointState) {
	t.Helper()
	eventually(t, 10*time.Second, e+" "+want.String()+" in group "+g, func() bool {
		s, ok := stateIn(gme, g, e)
		return ok && s == want
	})
}

// wantDurations checks the durations in force in group g.
func wantDurations(t *testing.T, gme *GCPMultiEndpoint, g string, rt, sd time.Duration) {
	t.Helper()
	if s := groupOf(gme, g); s.RecoveryTimeout != rt || s.SwitchingDelay != sd {
		t.Fatalf("group %s: RecoveryTimeout %v, SwitchingDelay %v; want %v, %v", g, s.RecoveryTimeout, s.SwitchingDelay, rt, sd)
	}
}

// wantCurrent checks group g's current endpoint, and that a call through g is served by it.
func wantCurrent(t *testing.T, gme *GCPMultiEndpoint, g string, e endpoint) {
	t.Helper()
	if cur := groupOf(gme, g).Current; cur != e.Addr() {
		t.Fatalf("group %s: current %s; want %s (%s)\n%s", g, cur, e.Addr(), e.name, statusString(gme))
	}
	if got, err := call(NewMEContext(context.Background(), g), gme); err != nil || got != e.name {
		t.Fatalf("call through group %s served by %q, %v; want %s", g, got, err, e.name)
	}
}

// advanceUntilMoved moves the clock d on, in a step to 1 ms before and a step to the moment:
// group g must still be on from after the first (its current endpoint in Status), and on to
// after the second (its current endpoint, serving a call).
func advanceUntilMoved(t *testing.T, clk *clock.Fake, gme *GCPMultiEndpoint, g string, d time.Duration, from, to endpoint) {
	t.Helper()
	clk.Advance(d - time.Millisecond)
	if s := groupOf(gme, g); s.Current != from.Addr() {
		t.Fatalf("group %s left %s (%s) before %v: %+v", g, from.name, from.Addr(), d, s)
	}
	clk.Advance(time.Millisecond)
	wantCurrent(t, gme, g, to)
}

// grpcgcp's TestGCPMultiEndpointWithDelays (grpcgcp v1.6.0, test_grpc), in our words, on a
// fake clock: its reconfigurations list only Endpoints, and the groups keep their delays
// through them. Where upstream sleeps to just before and just after a delay, the clock is
// moved to 1 ms before and to the moment.
func TestUpstreamScenarioWithDelays(t *testing.T) {
	const rt, sd = 500 * time.Millisecond, 700 * time.Millisecond
	leader, follower := startEndpoint(t, "leader"), startEndpoint(t, "follower")
	newE, newE2 := startEndpoint(t, "new"), startEndpoint(t, "new2")
	leader.Down() // we start with the leader unavailable
	clk := clock.NewFake(time.Time{})
	gme := newGMEWith(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default":  group(rt, sd, leader.Addr(), follower.Addr()),
		"follower": group(rt, sd, follower.Addr(), leader.Addr()),
	}), fastSettings(nil), plumbing{clock: clk})
	L, F, N, N2 := leader.Addr(), follower.Addr(), newE.Addr(), newE2.Addr()

	// The follower-first group works from the start; the default group keeps its
	// unreachable leader for RecoveryTimeout, then uses the follower.
	waitStateIn(t, gme, "default", F, Available)
	wantCurrent(t, gme, "follower", follower)
	waitStateIn(t, gme, "default", L, Recovering)
	advanceUntilMoved(t, clk, gme, "default", rt, leader, follower)

	// The leader comes up: the default group returns to it after SwitchingDelay; the
	// follower group stays on the follower.
	if err := leader.Up(); err != nil {
		t.Fatal(err)
	}
	waitStateIn(t, gme, "default", L, Available)
	advanceUntilMoved(t, clk, gme, "default", sd, follower, leader)
	wantCurrent(t, gme, "follower", follower)

	// The follower goes down: the follower group moves to the leader after RecoveryTimeout,
	// and back to the follower SwitchingDelay after it returns.
	follower.Down()
	waitStateIn(t, gme, "follower", F, Recovering)
	advanceUntilMoved(t, clk, gme, "follower", rt, follower, leader)
	if err := follower.Up(); err != nil {
		t.Fatal(err)
	}
	waitStateIn(t, gme, "follower", F, Available)
	advanceUntilMoved(t, clk, gme, "follower", sd, leader, follower)

	update := func(groups map[string]*multiendpoint.MultiEndpointOptions) {
		t.Helper()
		if err := gme.UpdateMultiEndpoints(options("default", groups)); err != nil {
			t.Fatal(err)
		}
	}
	// A new endpoint on top of the follower group: the group switches to it SwitchingDelay
	// after it is available, not at once.
	update(map[string]*multiendpoint.MultiEndpointOptions{
		"default":  endpointsOnly(L, F),
		"follower": endpointsOnly(N, F, L),
	})
	wantDurations(t, gme, "default", rt, sd)
	wantDurations(t, gme, "follower", rt, sd)
	waitStateIn(t, gme, "follower", N, Available)
	advanceUntilMoved(t, clk, gme, "follower", sd, follower, newE)

	// The same endpoint on top of the default group: it is ready already, and the switch
	// still waits SwitchingDelay.
	update(map[string]*multiendpoint.MultiEndpointOptions{
		"default":  endpointsOnly(N, L, F),
		"follower": endpointsOnly(N, F, L),
	})
	wantDurations(t, gme, "default", rt, sd)
	advanceUntilMoved(t, clk, gme, "default", sd, leader, newE)

	// Endpoints rearranged: the new top one is used after SwitchingDelay.
	update(map[string]*multiendpoint.MultiEndpointOptions{
		"default":  endpointsOnly(F, N, L),
		"follower": endpointsOnly(N, F, L),
	})
	wantDurations(t, gme, "default", rt, sd)
	advanceUntilMoved(t, clk, gme, "default", sd, newE, follower)

	// The follower group renamed: a new group, which takes the update's durations (none),
	// as upstream's new groups do.
	update(map[string]*multiendpoint.MultiEndpointOptions{
		"default":   endpointsOnly(F, N, L),
		"follower2": endpointsOnly(N, F, L),
	})
	wantDurations(t, gme, "default", rt, sd)
	wantDurations(t, gme, "follower2", 0, 0)
	wantCurrent(t, gme, "follower2", newE)

	// The follower endpoint replaced by another new one, not connected yet: the default group
	// uses the next available endpoint until the new one is available, then switches to it
	// after SwitchingDelay.
	update(map[string]*multiendpoint.MultiEndpointOptions{
		"default":   endpointsOnly(N2, N, L),
		"follower2": endpointsOnly(N, N2, L),
	})
	wantDurations(t, gme, "default", rt, sd)
	wantCurrent(t, gme, "default", newE)
	waitStateIn(t, gme, "default", N2, Available)
	advanceUntilMoved(t, clk, gme, "default", sd, newE, newE2)

	// The follower endpoint back in place of the new ones: its pool was closed, so the leader
	// serves until the follower's new pool connects, and SwitchingDelay later the follower
	// does.
	update(map[string]*multiendpoint.MultiEndpointOptions{
		"default":   endpointsOnly(F, L),
		"follower2": endpointsOnly(F, L),
	})
	wantDurations(t, gme, "default", rt, sd)
	wantCurrent(t, gme, "default", leader)
	waitStateIn(t, gme, "default", F, Available)
	advanceUntilMoved(t, clk, gme, "default", sd, leader, follower)
}

// A group with RecoveryTimeout 2 s and SwitchingDelay 3 s, then an update that lists only its
// endpoints (as code written for upstream does), then a 1 s drop of its first endpoint: the
// group keeps the endpoint through the drop. No switch is made, and a call made during the
// drop that waits for ready is served by it once it is back, not by the second endpoint.
func TestEndpointsOnlyUpdateThenBriefDropMakesNoSwitch(t *testing.T) {
	const rt, sd = 2 * time.Second, 3 * time.Second
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	clk := clock.NewFake(time.Time{})
	gme := newGMEWith(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(rt, sd, e1.Addr(), e2.Addr()),
	}), fastSettings(nil), plumbing{clock: clk})
	waitStateIn(t, gme, "g", e1.Addr(), Available)
	waitStateIn(t, gme, "g", e2.Addr(), Available)
	wantCurrent(t, gme, "g", e1)
	if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": endpointsOnly(e1.Addr(), e2.Addr()),
	})); err != nil {
		t.Fatal(err)
	}
	wantDurations(t, gme, "g", rt, sd)
	switches := len(groupOf(gme, "g").Switches)

	e1.Down()
	eventually(t, 10*time.Second, "E1's drop seen", func() bool { s, _ := stateIn(gme, "g", e1.Addr()); return s != Available })
	if s, _ := stateIn(gme, "g", e1.Addr()); s != Recovering {
		t.Fatalf("E1 %v at its drop; want Recovering for RecoveryTimeout\n%s", s, statusString(gme))
	}
	served := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// WaitForReady: the call waits for the group's endpoint (without it, a call on a
		// pool in TRANSIENT_FAILURE fails fast with UNAVAILABLE, for the caller to retry).
		resp, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true))
		if err != nil {
			served <- err.Error()
			return
		}
		served <- resp.Username
	}()
	clk.Advance(time.Second)
	if err := e1.Up(); err != nil {
		t.Fatal(err)
	}
	waitStateIn(t, gme, "g", e1.Addr(), Available)
	if got := <-served; got != "E1" {
		t.Errorf("the call made during the drop: %s; want served by E1", got)
	}
	clk.Advance(2 * sd) // past every timer the drop could have started
	g := groupOf(gme, "g")
	if g.Current != e1.Addr() || len(g.Switches) != switches {
		t.Fatalf("after the drop: current %s, switches %v; want E1 and no switch", g.Current, g.Switches[switches:])
	}
}

// How a caller changes a kept group's durations at runtime: a non-zero value in an update
// changes it (a zero one keeps it), and SetGroupTimeouts sets both exactly, zero included.
func TestChangingDurationsAtRuntime(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	clk := clock.NewFake(time.Time{})
	gme := newGMEWith(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(2*time.Second, 3*time.Second, e1.Addr(), e2.Addr()),
		"h": group(time.Second, time.Second, e2.Addr()),
	}), fastSettings(nil), plumbing{clock: clk})
	update := func(g *multiendpoint.MultiEndpointOptions) {
		t.Helper()
		if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{
			"g": g, "h": endpointsOnly(e2.Addr()),
		})); err != nil {
			t.Fatal(err)
		}
	}
	update(group(5*time.Second, 0, e1.Addr(), e2.Addr()))
	wantDurations(t, gme, "g", 5*time.Second, 3*time.Second)
	update(group(0, 4*time.Second, e1.Addr(), e2.Addr()))
	wantDurations(t, gme, "g", 5*time.Second, 4*time.Second)
	wantDurations(t, gme, "h", time.Second, time.Second)

	if err := gme.SetGroupTimeouts("g", 0, 0); err != nil {
		t.Fatal(err)
	}
	wantDurations(t, gme, "g", 0, 0)
	wantDurations(t, gme, "h", time.Second, time.Second)
	update(endpointsOnly(e1.Addr(), e2.Addr()))
	wantDurations(t, gme, "g", 0, 0)

	// Zero is in force: with the clock standing still, a drop of E1 is a failover at once,
	// and its return a switch back at once.
	waitStateIn(t, gme, "g", e1.Addr(), Available)
	waitStateIn(t, gme, "g", e2.Addr(), Available)
	e1.Down()
	waitStateIn(t, gme, "g", e1.Addr(), Unavailable)
	wantCurrent(t, gme, "g", e2)
	if err := e1.Up(); err != nil {
		t.Fatal(err)
	}
	waitStateIn(t, gme, "g", e1.Addr(), Available)
	wantCurrent(t, gme, "g", e1)

	if err := gme.SetGroupTimeouts("g", 1500*time.Millisecond, 2500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wantDurations(t, gme, "g", 1500*time.Millisecond, 2500*time.Millisecond)

	for _, tc := range []struct {
		group  string
		rt, sd time.Duration
	}{
		{"nope", time.Second, time.Second},
		{"g", -time.Second, 0},
		{"g", 0, -time.Nanosecond},
	} {
		err := gme.SetGroupTimeouts(tc.group, tc.rt, tc.sd)
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Group != tc.group {
			t.Errorf("SetGroupTimeouts(%q, %v, %v) = %v; want a *ConfigError naming the group", tc.group, tc.rt, tc.sd, err)
		}
		wantDurations(t, gme, "g", 1500*time.Millisecond, 2500*time.Millisecond)
	}
	if err := gme.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gme.SetGroupTimeouts("g", 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("SetGroupTimeouts after Close = %v; want ErrClosed", err)
	}
	if err := new(GCPMultiEndpoint).SetGroupTimeouts("g", 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("SetGroupTimeouts of a zero GCPMultiEndpoint = %v; want ErrClosed", err)
	}
}

// A configuration file states the whole configuration: a reload of a file without a
// group's durations sets them to zero, their default.
func TestWatchReloadSetsDurationsAsWritten(t *testing.T) {
	f := newWatchFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	with := watchConfigYAML("    recoveryTimeout: 2s\n    switchingDelay: 3s\n", f.eps[0].Addr())
	writeFile(t, f.path, with)
	f.waitApplied(t, with)
	wantDurations(t, f.gme, "g", 2*time.Second, 3*time.Second)
	without := watchConfigYAML("", f.eps[0].Addr(), f.eps[1].Addr())
	writeFile(t, f.path, without)
	f.waitApplied(t, without)
	wantDurations(t, f.gme, "g", 0, 0)
}
