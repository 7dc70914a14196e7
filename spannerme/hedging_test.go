package spannerme

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/internal/hedge"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
)

// Settings.Hedging: defaults fill the zero fields; a negative duration or a budget outside
// [0, 1] is a *ConfigError naming the group, and NewGCPMultiEndpointWithSettings refuses it.
func TestSettingsHedgingValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      HedgingSettings
		want    HedgingSettings
		problem string // "" for valid
	}{
		{"zero: adaptive, defaults", HedgingSettings{}, HedgingSettings{MinDelay: 20 * time.Millisecond, Budget: 0.05}, ""},
		{"fixed", HedgingSettings{Delay: 50 * time.Millisecond, Budget: 0.1}, HedgingSettings{Delay: 50 * time.Millisecond, MinDelay: 20 * time.Millisecond, Budget: 0.1}, ""},
		{"budget 1", HedgingSettings{Budget: 1, MinDelay: time.Millisecond}, HedgingSettings{Budget: 1, MinDelay: time.Millisecond}, ""},
		{"negative delay", HedgingSettings{Delay: -1}, HedgingSettings{}, "Delay -1ns is negative"},
		{"negative floor", HedgingSettings{MinDelay: -time.Second}, HedgingSettings{}, "MinDelay -1s is negative"},
		{"budget above 1", HedgingSettings{Budget: 1.5}, HedgingSettings{}, "Budget 1.5 is outside [0, 1]"},
		{"negative budget", HedgingSettings{Budget: -0.1}, HedgingSettings{}, "Budget -0.1 is outside [0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]HedgingSettings{"west": tc.in}
			got, err := parseHedging(h)
			if tc.problem == "" {
				if err != nil || got["west"] != (hedge.Settings{Delay: tc.want.Delay, MinDelay: tc.want.MinDelay, Budget: tc.want.Budget}) {
					t.Fatalf("parseHedging = %v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || ce.Group != "west" || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("error %v, want a *ConfigError of group west saying %q", err, tc.problem)
			}
			_, err = NewGCPMultiEndpointWithSettings(options("west", map[string]*multiendpoint.MultiEndpointOptions{"west": group(0, 0, "127.0.0.1:1")}),
				Settings{Hedging: h}, insecureDial)
			if !errors.As(err, &ce) || ce.Group != "west" {
				t.Fatalf("NewGCPMultiEndpointWithSettings: %v, want the same *ConfigError", err)
			}
		})
	}
}

// A group's hedging section in the file maps to Settings.Hedging; a bad value names its
// field and line.
func TestParseConfigHedging(t *testing.T) {
	const head = "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n  west:\n    endpoints: [b:2, c:3]\n    hedging:"
	c, err := ParseConfig([]byte(head + "\n      delay: 50ms\n      minDelay: 10ms\n      budget: 0.02\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (HedgingSettings{Delay: 50 * time.Millisecond, MinDelay: 10 * time.Millisecond, Budget: 0.02}); len(c.Settings.Hedging) != 1 || c.Settings.Hedging["west"] != want {
		t.Errorf("Hedging %v, want west: %+v", c.Settings.Hedging, want)
	}
	c, err = ParseConfig([]byte(head + " {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := c.Settings.Hedging["west"]; !ok || h != (HedgingSettings{}) {
		t.Errorf("hedging: {} gave %v, want west with the zero HedgingSettings (every default)", c.Settings.Hedging)
	}
	const hp = "multiEndpoints.west.hedging"
	for _, tc := range []struct {
		name, in    string
		line        int
		field, want string
	}{
		{"negative delay", "\n      delay: -5ms\n", 8, hp + ".delay", `negative duration "-5ms"`},
		{"bad duration", "\n      minDelay: soon\n", 8, hp + ".minDelay", `invalid duration "soon"`},
		{"budget above 1", "\n      budget: 2\n", 8, hp + ".budget", `want a number above 0, at most 1`},
		{"budget zero", "\n      budget: 0\n", 8, hp + ".budget", `want a number above 0, at most 1`},
		{"quoted budget", "\n      budget: \"0.1\"\n", 8, hp + ".budget", `want a number above 0, at most 1`},
		{"unknown field", "\n      threshold: 5ms\n", 8, hp + ".threshold", "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(head + tc.in))
			var fe *ConfigFileError
			if !errors.As(err, &fe) || c != nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("ParseConfig = %v, %v; want a *ConfigFileError", c, err)
			}
			if fe.Line != tc.line || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (line %d, field %q); want line %d, field %q, text %q", err, fe.Line, fe.Field, tc.line, tc.field, tc.want)
			}
		})
	}
}

// Status and the metrics show a hedging group's counts (and nothing for a group that does
// not hedge); the JSON form writes durations as strings and reads them back.
func TestHedgingStatusAndMetrics(t *testing.T) {
	reader, mp := newMetricReader()
	e1, e2 := startFakeSpanner(t), startFakeSpanner(t)
	s := fastSettings(nil)
	s.MeterProvider = mp
	s.Hedging = map[string]HedgingSettings{"default": {Delay: time.Hour}}
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, e1, e2), "other": group(0, 0, e2)}), s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitConnected(t, gme, e1)
	req := &spannerpb.ExecuteSqlRequest{Session: "projects/p/instances/i/databases/d/sessions/s", Sql: "SELECT 1", Transaction: singleUse}
	if err := queryOnce(ctx, spannerpb.NewSpannerClient(gme), req); err != nil {
		t.Fatal(err)
	}
	h := groupOf(gme, "default").Hedging
	if h == nil || h.Hedgeable != 1 || h.Sent != 0 || h.Delay != time.Hour {
		t.Fatalf("default group hedging %+v, want 1 hedgeable, none sent", h)
	}
	if o := groupOf(gme, "other").Hedging; o != nil {
		t.Errorf("group other hedging %+v, want nil", o)
	}
	if got := h.String(); got != "after 1h0m0s, budget 5%: 1 hedgeable, 0 sent, 0 won, 0 lost, 0 refused" {
		t.Errorf("String() = %q", got)
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"delay":"1h0m0s"`) || !strings.Contains(string(b), `"minDelay":"20ms"`) {
		t.Errorf("JSON %s", b)
	}
	var back HedgingStatus
	if err := json.Unmarshal(b, &back); err != nil || back != *h {
		t.Errorf("JSON round trip %+v, %v; want %+v", back, err, *h)
	}
	rm := collect(t, reader)
	got := sumBy(rm, observe.MetricHedges, AttrHedgeOutcome)
	if len(got) != 4 || got["sent"] != 0 || got["won"] != 0 {
		t.Errorf("%s by outcome: %v, want sent, won, lost and refused at 0", observe.MetricHedges, got)
	}
	if by := sumBy(rm, observe.MetricHedges, AttrMultiEndpoint); len(by) != 1 {
		t.Errorf("%s by group: %v, want the default group only", observe.MetricHedges, by)
	}
}

// A watched file's edit of a group's hedging takes effect at once (no restart needed) and
// keeps the group's counts; an invalid one keeps the hedging in force; removing it turns
// hedging off.
func TestWatchAppliesHedging(t *testing.T) {
	f := newWatchFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	hedging := func() *HedgingStatus { return groupOf(f.gme, "g").Hedging }
	if h := hedging(); h != nil {
		t.Fatalf("hedging %+v before any hedging section", h)
	}
	with := watchConfigYAML("    hedging: {delay: 40ms}\n", f.eps[0].Addr())
	writeFile(t, f.path, with)
	if s := f.waitApplied(t, with); len(s.RestartNeeded) != 0 {
		t.Errorf("RestartNeeded %v, want none", s.RestartNeeded)
	}
	if h := hedging(); h == nil || h.Delay != 40*time.Millisecond || h.Budget != hedge.DefaultBudget {
		t.Fatalf("hedging %+v after the edit, want a 40ms delay and the default budget", h)
	}
	f.gme.hedger.Group("g").AddHedgeable(7) // as if 7 streams had been hedgeable
	edited := watchConfigYAML("    hedging: {delay: 60ms, budget: 0.1}\n", f.eps[0].Addr())
	writeFile(t, f.path, edited)
	f.waitApplied(t, edited)
	if h := hedging(); h == nil || h.Delay != 60*time.Millisecond || h.Budget != 0.1 || h.Hedgeable != 7 {
		t.Errorf("hedging %+v after a second edit, want 60ms, budget 0.1, and the 7 hedgeable kept", h)
	}
	bad := watchConfigYAML("    hedging: {budget: 3}\n", f.eps[0].Addr())
	writeFile(t, f.path, bad)
	f.waitStatus(t, "the invalid edit rejected", func(s ConfigStatus) bool { return s.LastError != nil })
	if h := hedging(); h == nil || h.Delay != 60*time.Millisecond {
		t.Errorf("hedging %+v after an invalid edit, want the previous one", h)
	}
	without := watchConfigYAML("", f.eps[0].Addr())
	writeFile(t, f.path, without)
	f.waitApplied(t, without)
	if h := hedging(); h != nil {
		t.Errorf("hedging %+v after the section was removed, want off", h)
	}
}
