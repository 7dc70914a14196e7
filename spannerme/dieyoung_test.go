package spannerme

import (
	"context"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// dieYoungPhase is the length of each phase (idle, then under load) of the tests of an
// endpoint whose connections die young; `go test -run DieYoung -dieyoung.phase 20s` runs
// issue 40's full length.
var dieYoungPhase = flag.Duration("dieyoung.phase", 4*time.Second, "length of each phase of the DieYoung tests")

// An endpoint whose every connection the peer ends with GOAWAY right after SETTINGS (a
// draining proxy: spannermetest's DieYoung), as E1 of [E1 E2], E2 healthy: idle, then under 8
// workers of queries. After the first 2s at most 5 connections a second reach E1 (its pools
// back off: internal/pool/young.go), the group never switches to E1, the log says little
// about E1, and no query fails. Default settings with RecoveryTimeout and SwitchingDelay 1s, and again with both 0 (the group
// would switch to E1 the instant it looked available).
func TestDieYoungEndpointBacksOffAndTakesNoTraffic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rt, sd time.Duration
	}{
		{"default settings, durations 1s", time.Second, time.Second},
		{"both durations 0", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startSpannerBackend(t, 2)
			e1, e2 := b.eps[0], b.eps[1]
			e1.DieYoung()
			var logs syncBuffer
			tl := newEventLog()
			s := tl.settings(Settings{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			g := group(tc.rt, tc.sd, e1.Addr(), e2.Addr())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(),
				options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": g}), s, clientOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { client.Close(); gme.Close() }()
			waitConnected(t, gme, e2.Addr())
			start := time.Now()
			cpu0, cpuOK := processCPU()

			// Idle.
			time.Sleep(min(2*time.Second, *dieYoungPhase)) // real connections, real time: what is measured is how often they come
			accepted2s := e1.Stats().Accepted
			time.Sleep(*dieYoungPhase - min(2*time.Second, *dieYoungPhase))
			cpu1, _ := processCPU()
			idle := time.Since(start)
			// Under load.
			l := startLoad(client, 8, 10*time.Second)
			time.Sleep(*dieYoungPhase)
			l.end()
			total := time.Since(start)

			attempts := e1.Stats().Accepted - accepted2s
			window := (total - 2*time.Second).Seconds()
			rate := float64(attempts) / window
			linesE1 := 0
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, e1.Addr()) {
					linesE1++
				}
			}
			t.Logf("%s: %d connections to E1 in the first 2s, %d in the %.1fs after (%.2f/s); %d log lines about E1 in %v; %d queries, %d failed; CPU while idle %.1f%% of a core",
				tc.name, accepted2s, attempts, window, rate, linesE1, total.Round(time.Second), l.ok.Load()+l.failed.Load(), l.failed.Load(),
				100*float64(cpu1-cpu0)/float64(idle))
			if rate > 5 {
				t.Errorf("%.2f connections a second reached E1 after the first 2s, want at most 5", rate)
			}
			if _, _, _, ok := tl.switchTo(e1.Addr(), 0); ok {
				t.Errorf("the group switched to E1, whose connections die young")
			}
			if max := 20 * int(total/time.Minute+1); linesE1 > max {
				t.Errorf("%d log lines about E1 in %v, want at most %d (20 a minute)", linesE1, total, max)
			}
			if l.failed.Load() != 0 || l.ok.Load() == 0 {
				t.Errorf("%d queries failed, %d succeeded: %v", l.failed.Load(), l.ok.Load(), l.errors())
			}
			if !cpuOK {
				t.Log("no CPU figure: getrusage unavailable")
			}
		})
	}
}

// The same endpoint as a member of a top tier [[E1 E2] E3]: its peer E2 keeps the tier, so
// every query goes to E2, none to E1 or to the lower tier, and none fails.
func TestDieYoungTierMemberLeavesTheTierToItsPeer(t *testing.T) {
	b := startSpannerBackend(t, 3)
	e1, e2, e3 := b.eps[0], b.eps[1], b.eps[2]
	e1.DieYoung()
	s := fastSettings(nil)
	s.Tiers = map[string]TierSettings{"default": {Tiers: [][]string{{e1.Addr(), e2.Addr()}, {e3.Addr()}}}}
	counter := &streamCounter{started: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, gme, err := NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(),
		options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(time.Second, time.Second, e1.Addr(), e2.Addr(), e3.Addr())}),
		s, append(clientOptions(), counter.option())...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { client.Close(); gme.Close() }()
	waitConnected(t, gme, e2.Addr())
	waitConnected(t, gme, e3.Addr())
	counter.take()
	l := startLoad(client, 8, 10*time.Second)
	time.Sleep(*dieYoungPhase) // real connections under load: what is counted is where the queries went
	l.end()
	if l.failed.Load() != 0 || l.ok.Load() == 0 {
		t.Errorf("%d queries failed, %d succeeded: %v", l.failed.Load(), l.ok.Load(), l.errors())
	}
	if n := counter.take(e1.Addr(), e2.Addr(), e3.Addr()); n[0] != 0 || n[2] != 0 || n[1] == 0 {
		t.Errorf("query streams on [E1 E2 E3] = %v, want E2 only", n)
	}
	if p, _ := poolOf(gme, e1.Addr()); p.LastError == nil || !strings.Contains(p.LastError.Message, "before it carried a call") {
		t.Errorf("E1's last connection error %+v, want a connection that died young", p.LastError)
	}
}
