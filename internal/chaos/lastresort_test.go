package chaos

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	groupverdict "github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// TestLastResortLog reads rule 4 from the client's verdict lines: a span opens when a group's
// endpoint becomes a last resort because every connected endpoint is ejected, closes when it
// stops being one, and other verdicts and groups are apart; every record still reaches the
// run's own handler, at the level it asks for.
func TestLastResortLog(t *testing.T) {
	var out bytes.Buffer
	h := newLastResortLog(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}), func(a string) string {
		return map[string]string{"127.0.0.1:1": "e1", "127.0.0.1:2": "e2"}[a]
	})
	log := slog.New(h).With("component", "test") // spannerme's logger may carry attributes
	rule4, ejected := groupverdict.EjectedEverywhere.String(), groupverdict.Ejected.String()
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	line := func(level slog.Level, d time.Duration, group, addr, now, was string) {
		r := slog.NewRecord(at(d), level, "spannerme: verdict line", 0)
		r.AddAttrs(slog.String("multiendpoint", group), slog.String("endpoint", addr), slog.String("verdict", now), slog.String("was", was))
		if err := log.Handler().Handle(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	line(slog.LevelWarn, time.Second, "default", "127.0.0.1:1", rule4, ejected)
	line(slog.LevelWarn, 2*time.Second, "west", "127.0.0.1:1", rule4, ejected)
	line(slog.LevelInfo, 3*time.Second, "default", "127.0.0.1:1", ejected, rule4)
	line(slog.LevelWarn, 4*time.Second, "default", "127.0.0.1:2", groupverdict.DegradedLastResort.String(), groupverdict.Degraded.String())
	line(slog.LevelWarn, 5*time.Second, "default", "127.0.0.1:1", rule4, groupverdict.NotConnected.String())
	got := h.spans()
	want := []lastResort{
		{group: "default", endpoint: "e1", from: at(time.Second), to: at(3 * time.Second)},
		{group: "west", endpoint: "e1", from: at(2 * time.Second)},
		{group: "default", endpoint: "e1", from: at(5 * time.Second)},
	}
	if len(got) != len(want) {
		t.Fatalf("spans %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if n := strings.Count(out.String(), "verdict line"); n != 4 {
		t.Errorf("%d lines reached the run's handler (WARN and above), want 4:\n%s", n, out.String())
	}
	if !got[0].covers(at(3*time.Second), at(4*time.Second)) || got[0].covers(at(3*time.Second+1), at(4*time.Second)) || !got[1].covers(at(time.Hour), at(time.Hour)) {
		t.Errorf("covers: a span covers the times it lasted, an open one every time after its start")
	}
}
