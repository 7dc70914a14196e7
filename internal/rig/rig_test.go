package rig

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

func TestMain(m *testing.M) {
	fixture.DisableGCEDetection()
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func TestStartBackendSeeds(t *testing.T) {
	b, c := StartBackendTB(t)
	ctx := t.Context()
	if b.Emulator || !strings.HasPrefix(b.Addr, "127.0.0.1:") || b.Database == "" {
		t.Errorf("backend %+v", b)
	}
	accts, err := fixture.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := fixture.CountRows(ctx, c, fixture.TableAccounts); err != nil || n != int64(len(accts)) {
		t.Errorf("Accounts rows %d, %v; want %d (seeded)", n, err, len(accts))
	}
	if ok, err := fixture.OrderExists(ctx, c, "no-such-order"); ok || err != nil {
		t.Errorf("OrderExists(no-such-order) = %v, %v", ok, err)
	}
	if err := fixture.Transfer(ctx, c, "rig-1", accts[0].AccountID, accts[1].AccountID, 1, "t"); err != nil {
		t.Fatal(err)
	}
	if ok, err := fixture.OrderExists(ctx, c, "rig-1"); !ok || err != nil {
		t.Errorf("OrderExists(rig-1) = %v, %v", ok, err)
	}
}

func TestSwitchLogWaitFor(t *testing.T) {
	var l SwitchLog
	t0 := time.Now()
	go func() {
		l.Add(spannerme.SwitchEvent{Name: "a", To: "x", At: t0.Add(-time.Second)}) // before since: skipped
		l.Add(spannerme.SwitchEvent{Name: "b", To: "y", At: t0})
		l.Add(spannerme.SwitchEvent{Name: "a", To: "z", At: t0.Add(time.Millisecond)})
	}()
	ev, err := l.WaitFor(t.Context(), 10*time.Second, t0, func(ev spannerme.SwitchEvent) bool { return ev.Name == "a" })
	if err != nil || ev.To != "z" {
		t.Fatalf("WaitFor = %+v, %v; want the switch of a to z", ev, err)
	}
	if n := len(l.Events()); n != 3 {
		t.Errorf("%d events, want 3", n)
	}
	if _, err := l.WaitFor(t.Context(), 10*time.Millisecond, t0, func(ev spannerme.SwitchEvent) bool { return ev.Name == "c" }); err == nil {
		t.Error("WaitFor of an event that never comes returned no error")
	}
}

func TestLockedWriterKeepsLinesWhole(t *testing.T) {
	var buf bytes.Buffer
	w := &LockedWriter{W: &buf}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			line := strings.Repeat(string(rune('a'+i)), 50) + "\n"
			for range 100 {
				_, _ = w.Write([]byte(line))
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, l := range lines {
		if len(l) != 50 || strings.Count(l, l[:1]) != 50 {
			t.Fatalf("line %q is not whole", l)
		}
	}
}
