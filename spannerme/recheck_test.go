package spannerme

import (
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
	"google.golang.org/grpc/codes"
)

// Every endpoint of group [E1 E2] answers UNAVAILABLE, so both are ejected and the group stays
// on E1 (rule 4 of internal/verdict). When the fault ends, E1's probe under way is one that
// started during the fault and hangs (its frontend held it), so E1's own probes would readmit
// it only after that probe's timeout (10s) and a ProbeInterval. E2's readmission re-probes E1
// at once (judge.Judge.RecheckEjected), so E1 is readmitted within the group's RecoveryTimeout of E2 (24ms
// measured) and the group never switches. Without the recheck the group moved to E2 RecoveryTimeout after
// E2's readmission and back after SwitchingDelay (the chaos soak's db-unavailable, seed 21,
// 3m: default e3->e1 at +0.6s and back at +2.0s after the heal).
func TestRecheckAfterAFaultEverywhere(t *testing.T) {
	// RecoveryTimeout 2s: far longer than the re-probe takes on a loaded machine, far shorter
	// than the held probe's timeout (10s) that E1 waits for without it.
	const rt, sd = 2 * time.Second, time.Second
	b := startFrontendBackend(t, 2)
	e1, e2 := b.fes[0], b.fes[1]
	tl := newEventLog()
	s := tl.settings(fastSettings(nil))
	s.Health = healthSettings(time.Second, time.Second)
	s.Health.ProbeTimeout = 10 * time.Second
	newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(rt, sd, e1.Addr(), e2.Addr()),
	}), s)
	tl.restart()
	for _, fe := range b.fes {
		if err := fe.FailAll(codes.Unavailable); err != nil {
			t.Fatal(err)
		}
	}
	tl.waitHealth(t, e1.Addr(), EndpointEjected, 10*time.Second)
	tl.waitHealth(t, e2.Addr(), EndpointEjected, 10*time.Second)
	// From now on E1's probes hang: its next one (within a ProbeInterval) is under way when
	// the fault ends, and stays so until its 10s timeout.
	e1.Hang()
	time.Sleep(2500 * time.Millisecond) // past the ejection time (1s) and a ProbeInterval
	if _, sw := tl.counts(); sw != 0 {
		t.Fatalf("%d switches while every endpoint failed\n%s", sw, tl)
	}
	e1.Pass()
	e2.Pass()
	_, e2Back := tl.waitHealth(t, e2.Addr(), EndpointReadmitted, 10*time.Second)
	_, e1Back := tl.waitHealth(t, e1.Addr(), EndpointReadmitted, 15*time.Second)
	time.Sleep(rt + sd) // a switch the readmissions caused would have happened by now
	if _, sw := tl.counts(); sw != 0 {
		t.Fatalf("%d switches after the fault ended: E2 readmitted at %v, E1 at %v\n%s", sw, e2Back, e1Back, tl)
	}
	if d := e1Back - e2Back; d > rt {
		t.Fatalf("E1 readmitted %v after E2, want within RecoveryTimeout %v\n%s", d, rt, tl)
	}
	t.Logf("fault everywhere, E1's probe hung at the heal: E2 readmitted at %v, E1 %v after it; 0 switches\n%s",
		e2Back.Round(time.Millisecond), (e1Back - e2Back).Round(time.Millisecond), tl)
}

// E1 is ejected (its frontend answers UNAVAILABLE), then its path goes down for longer than
// its ejection time: the probe due when the ejection time ends finds no connection and is
// skipped, and the next one is a ProbeInterval (20s) away. Its pool is probed as soon as it is
// READY again (the pool's monitor calls Recheck), so E1 is readmitted within seconds of its
// path coming back, not a ProbeInterval later.
func TestRecheckWhenAnEjectedEndpointIsConnectedAgain(t *testing.T) {
	const probeInterval = 20 * time.Second
	b := startFrontendBackend(t, 2)
	ep1 := spannermetest.NewEndpointTB(t, b.fes[0].Addr())
	e1, e2 := ep1.Addr(), b.fes[1].Addr()
	tl := newEventLog()
	s := tl.settings(fastSettings(nil))
	s.Health = healthSettings(time.Second, probeInterval)
	client, _ := newFrontendClient(t, b, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(500*time.Millisecond, time.Second, e1, e2),
	}), s)
	l := startLoad(client, 4, 5*time.Second)
	defer l.end()
	eventually(t, 10*time.Second, "queries on E1", func() bool { return queries(b.fes[0]) > 20 })
	if err := b.fes[0].FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	tl.waitHealth(t, e1, EndpointEjected, 10*time.Second)
	ep1.Down()
	time.Sleep(2500 * time.Millisecond) // past the ejection time (1s): its probe found no connection
	b.fes[0].Pass()
	up := time.Now()
	if err := ep1.Up(); err != nil {
		t.Fatal(err)
	}
	ev, _ := tl.waitHealth(t, e1, EndpointReadmitted, probeInterval+10*time.Second)
	if d := ev.At.Sub(up); d > 5*time.Second {
		t.Fatalf("E1 readmitted %v after its path came back, want within 5s (its next probe was a ProbeInterval, %v, away)\n%s", d, probeInterval, tl)
	}
	t.Logf("E1 ejected, down past its ejection time, then up: readmitted %v after the up\n%s", ev.At.Sub(up).Round(time.Millisecond), tl)
}
