package chaos

import (
	"strings"
	"testing"
	"time"
)

// An ejection is justified by a fault held on its endpoint then or within justifyLookback
// before; a reset (instant) or a fault on another endpoint justifies nothing.
func TestUnjustifiedEjections(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	hang := State{}
	hang.Frontend[0] = Fault{Kind: KindFrontendHang}
	other := State{}
	other.Frontend[1] = Fault{Kind: KindFrontendUnavailable}
	tl := &faultTimeline{start: start, steps: []applied{
		{at: at(time.Second), step: Step{Kind: KindFrontendHang, Endpoint: 0, After: hang}},
		{at: at(3 * time.Second), step: Step{Kind: KindFrontendPass, Endpoint: 0}},
		{at: at(20 * time.Second), step: Step{Kind: KindReset, Endpoint: 0}},
		{at: at(30 * time.Second), step: Step{Kind: KindFrontendUnavailable, Endpoint: 1, After: other}},
	}}
	h := &healthLog{ejections: []ejection{
		{endpoint: "e1", at: at(2 * time.Second), why: "during the hang"},
		{endpoint: "e1", at: at(3*time.Second + justifyLookback - time.Millisecond), why: "just after it"},
		{endpoint: "e1", at: at(21 * time.Second), why: "after a reset only"},
		{endpoint: "e1", at: at(31 * time.Second), why: "while e2 fails"},
		{endpoint: "e2", at: at(31 * time.Second), why: "e2's own fault"},
	}}
	bad, n := h.unjustified(tl)
	if n != 5 || len(bad) != 2 || !strings.Contains(bad[0], "after a reset only") || !strings.Contains(bad[1], "while e2 fails") {
		t.Fatalf("unjustified of %d: %q, want the reset one and the one while e2 fails", n, bad)
	}
}

// A degradation is justified by a slow fault (fe-brownout, fe-latency, slow) on its endpoint
// then or within degradeLookback before; a hard fault or another endpoint's brownout is not.
func TestUnjustifiedDegradations(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	brown := State{}
	brown.Frontend[0] = Fault{Kind: KindFrontendBrownout, Latency: 400 * time.Millisecond}
	down := State{}
	down.TCP[0] = Fault{Kind: KindDown}
	other := State{}
	other.Frontend[1] = Fault{Kind: KindFrontendBrownout}
	tl := &faultTimeline{start: start, steps: []applied{
		{at: at(time.Second), step: Step{Kind: KindFrontendBrownout, Endpoint: 0, After: brown}},
		{at: at(20 * time.Second), step: Step{Kind: KindFrontendPass, Endpoint: 0}},
		{at: at(60 * time.Second), step: Step{Kind: KindDown, Endpoint: 0, After: down}},
		{at: at(65 * time.Second), step: Step{Kind: KindUp, Endpoint: 0}},
		{at: at(90 * time.Second), step: Step{Kind: KindFrontendBrownout, Endpoint: 1, After: other}},
	}}
	b := &brownoutLog{degradations: []degradation{
		{endpoint: "e1", group: "default", at: at(13 * time.Second), why: "during the brownout"},
		{endpoint: "e1", group: "west", at: at(20*time.Second + degradeLookback - time.Millisecond), why: "just after it"},
		{endpoint: "e1", group: "default", at: at(64 * time.Second), why: "while down"},
		{endpoint: "e1", group: "default", at: at(103 * time.Second), why: "while e2 is slow"},
		{endpoint: "e2", group: "default", at: at(103 * time.Second), why: "e2's own brownout"},
	}}
	bad := b.unjustified(tl)
	if len(bad) != 2 || !strings.Contains(bad[0], "while down") || !strings.Contains(bad[1], "while e2 is slow") {
		t.Fatalf("unjustified: %q, want the one while down and the one while e2 is slow", bad)
	}
}

// A recovery whose Since is zero (the brownout state was reset by a reconfiguration) is
// placed at the poll that saw it, not at the zero time (-9223372036.9s on the timeline).
func TestRecoveredAt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	since := now.Add(-3 * time.Second)
	if got := recoveredAt(since, now); !got.Equal(since) {
		t.Errorf("recoveredAt(since, now) = %v, want since %v", got, since)
	}
	if got := recoveredAt(time.Time{}, now); !got.Equal(now) {
		t.Errorf("recoveredAt(zero, now) = %v, want now %v", got, now)
	}
}
