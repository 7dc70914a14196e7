package spannerme

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
)

// get fetches path from the handler with the given Accept header.
func get(t *testing.T, h http.Handler, method, path, accept string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestStatusHandler(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	s := fastSettings(nil)
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g":        group(200*time.Millisecond, 0, e1.Addr(), e2.Addr()),
		"<b>x</b>": group(0, 0, e2.Addr()),
	}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	h := StatusHandler(gme)

	for _, tc := range []struct{ name, path, accept string }{
		{"query", "/?format=json", ""},
		{"suffix", "/status.json", ""},
		{"accept", "/", "application/json"},
	} {
		t.Run("JSON by "+tc.name, func(t *testing.T) {
			res, body := get(t, h, http.MethodGet, tc.path, tc.accept)
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			var st Status
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("%v\n%s", err, body)
			}
			g := st.Groups[0]
			if st.Default != "g" || g.Name != "<b>x</b>" || st.Groups[1].Current != e1.Addr() || st.Groups[1].RecoveryTimeout != 200*time.Millisecond {
				t.Fatalf("decoded %+v", st)
			}
			if st.Groups[1].Endpoints[0].State != Available || !strings.Contains(body, `"state": "Available"`) || !strings.Contains(body, `"recoveryTimeout": "200ms"`) {
				t.Errorf("JSON form:\n%s", body)
			}
		})
	}

	res, page := get(t, h, http.MethodGet, "/", "text/html,application/xhtml+xml,application/json;q=0.9")
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("Content-Type %q", ct)
	}
	for _, want := range []string{`<span class="current" data-group="g">` + e1.Addr() + `</span>`, "<svg", `class="bar"`,
		`&lt;b&gt;x&lt;/b&gt;`, `data-endpoint="` + e2.Addr() + `"`, "Channel pools"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<b>x</b>") {
		t.Errorf("a group name reached the page unescaped")
	}

	e1.Down()
	waitServedBy(t, ctx, gme, "E2", 10*time.Second)
	_, page = get(t, h, http.MethodGet, "/", "")
	for _, want := range []string{`<span class="current" data-group="g">` + e2.Addr() + `</span>`, `<line class="fallback"`,
		"refused", `badge state unavailable`} {
		if !strings.Contains(page, want) {
			t.Errorf("page after failover lacks %q", want)
		}
	}

	if res, _ := get(t, h, http.MethodPost, "/", ""); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", res.StatusCode)
	}
	if res, body := get(t, h, http.MethodHead, "/", ""); res.StatusCode != http.StatusOK || body != "" {
		t.Errorf("HEAD: %d, %q", res.StatusCode, body)
	}

	gme.Close()
	_, page = get(t, h, http.MethodGet, "/", "")
	if !strings.Contains(page, `id="closed"`) || !strings.Contains(page, `data-group="g">none</span>`) {
		t.Errorf("page of a closed client does not say so:\n%s", page)
	}
	for _, z := range []http.Handler{StatusHandler(nil), StatusHandler(&GCPMultiEndpoint{})} {
		_, body := get(t, z, http.MethodGet, "/?format=json", "")
		var st Status
		if err := json.Unmarshal([]byte(body), &st); err != nil || !st.Closed {
			t.Errorf("zero value: %v, %s", err, body)
		}
		if _, page := get(t, z, http.MethodGet, "/", ""); !strings.Contains(page, `id="closed"`) {
			t.Errorf("zero value page does not say closed")
		}
	}
}

// The timeline puts each stretch of a current endpoint on its lane, where it happened.
func TestTimelineLayout(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st := Status{At: t0.Add(100 * time.Second), Started: t0}
	g := GroupStatus{Name: "g", Current: "A",
		Endpoints: []EndpointStatus{{Endpoint: "A"}, {Endpoint: "B", Priority: 1}},
		Switches: []SwitchEvent{
			{Name: "g", From: "A", To: "B", Reason: Fallback, At: t0.Add(40 * time.Second)},
			{Name: "g", From: "B", To: "A", Reason: Recovery, At: t0.Add(70 * time.Second)},
		}}
	tl := newTimeline(st, g)
	x := func(s float64) int { return tl.Left + int(float64(tl.Right-tl.Left)*s/100) }
	want := []struct {
		lane   int
		x0, x1 int
	}{{0, x(0), x(40)}, {1, x(40), x(70)}, {0, x(70), x(100)}}
	if len(tl.Bars) != len(want) || len(tl.Lanes) != 2 || len(tl.Marks) != 2 {
		t.Fatalf("timeline %+v", tl)
	}
	for i, w := range want {
		b := tl.Bars[i]
		if b.Y != tl.Lanes[w.lane].Y+3 || b.X != w.x0 || b.X+b.W != w.x1 {
			t.Errorf("bar %d = %+v, want lane %d from x %d to %d", i, b, w.lane, w.x0, w.x1)
		}
	}
	if tl.Marks[0].Reason != "fallback" || tl.Marks[0].X != x(40) || tl.Marks[1].Reason != "recovery" {
		t.Errorf("marks %+v", tl.Marks)
	}
	// Switches older than the window only tell who was current at its start.
	st.Started = t0.Add(50 * time.Second)
	tl = newTimeline(st, g)
	if len(tl.Bars) != 2 || tl.Bars[0].Y != tl.Lanes[1].Y+3 || tl.Bars[0].X != tl.Left || len(tl.Marks) != 1 {
		t.Errorf("clipped timeline %+v", tl)
	}
}

// A configuration file's status (ConfigWatcher) shows on the page and in the JSON, its last
// error as text.
func TestStatusHandlerShowsConfigFile(t *testing.T) {
	e1 := startEndpoint(t, "E1")
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, e1.Addr())}), fastSettings(nil))
	gme.configStatus.Store(&ConfigStatus{Path: "/etc/spannerme.yaml", Hash: "abc123", Applied: 2,
		LastError: errors.New("line 3: field recoveryTimeout: bad duration"), RestartNeeded: []string{"poolSize"}})
	h := StatusHandler(gme)
	_, page := get(t, h, http.MethodGet, "/", "")
	for _, want := range []string{"/etc/spannerme.yaml", "abc123", "line 3: field recoveryTimeout: bad duration", "poolSize"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	_, doc := get(t, h, http.MethodGet, "/?format=json", "")
	if !strings.Contains(doc, `"lastError": "line 3: field recoveryTimeout: bad duration"`) {
		t.Errorf("JSON:\n%s", doc)
	}
}

// The page says why an ejected endpoint is not available, and each pool's health.
func TestStatusPageHealthText(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    PoolHealth
		want string
	}{
		{PoolHealth{Disabled: true}, "off"},
		{PoolHealth{}, "healthy"},
		{PoolHealth{Suspect: true}, "suspect: calls timed out, probing"},
		{PoolHealth{Ejected: true, Reason: ReasonConsecutiveFailures, EjectedUntil: now.Add(28 * time.Second), Detail: "10 failures"},
			"ejected (consecutive failures), 28s left: 10 failures"},
	} {
		if got := healthText(now, tc.h); got != tc.want {
			t.Errorf("healthText(%+v) = %q, want %q", tc.h, got, tc.want)
		}
	}
	st := Status{At: now,
		Groups: []GroupStatus{{Name: "g", Current: "b:1", Endpoints: []EndpointStatus{
			{Endpoint: "a:1", State: Unavailable}, {Endpoint: "b:1", Priority: 1, State: Available}}}},
		Pools: []PoolStatus{{Endpoint: "a:1", Connectivity: "READY",
			Health: PoolHealth{Ejected: true, Reason: ReasonFailurePercentage, EjectedUntil: now.Add(time.Minute), Detail: "70% failed"}},
			{Endpoint: "b:1", Connectivity: "READY"}}}
	v := newPageView(st)
	if got := v.Groups[0].Endpoints[0].Reason; !strings.Contains(got, "ejected (failure percentage)") {
		t.Errorf("reason shown for an ejected endpoint with a READY pool = %q, want the ejection", got)
	}
	if got := v.Pools[1].Health; got != "healthy" {
		t.Errorf("health shown for b:1 = %q, want healthy", got)
	}
}

// An endpoint stays ejected after its ejection time until a probe passes: the page says it
// is being probed, not a negative time left.
func TestStatusPageHealthText_EjectionTimeOver(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	h := PoolHealth{Ejected: true, Reason: ReasonTimeouts, EjectedUntil: now.Add(-40 * time.Second), Detail: "probe failed"}
	got := healthText(now, h)
	if want := "ejected (timeouts), ejection time over, probing for readmission: probe failed"; got != want {
		t.Fatalf("healthText = %q, want %q", got, want)
	}
}
