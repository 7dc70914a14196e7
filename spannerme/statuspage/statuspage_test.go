package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

func TestStatusHandler(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	s := fastSettings()
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g":        group(200*time.Millisecond, 0, e1.Addr(), e2.Addr()),
		"<b>x</b>": group(0, 0, e2.Addr()),
	}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	h := Handler(gme)

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
			var st spannerme.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("%v\n%s", err, body)
			}
			g := st.Groups[0]
			if st.Default != "g" || g.Name != "<b>x</b>" || st.Groups[1].Current != e1.Addr() || st.Groups[1].RecoveryTimeout != 200*time.Millisecond {
				t.Fatalf("decoded %+v", st)
			}
			if st.Groups[1].Endpoints[0].State != spannerme.Available || !strings.Contains(body, `"state": "Available"`) || !strings.Contains(body, `"recoveryTimeout": "200ms"`) {
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
	var nilGME *spannerme.GCPMultiEndpoint
	for _, z := range []http.Handler{Handler(nil), Handler(nilGME), Handler(&spannerme.GCPMultiEndpoint{}), Handler((*cannedSource)(nil))} {
		_, body := get(t, z, http.MethodGet, "/?format=json", "")
		var st spannerme.Status
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
	st := spannerme.Status{At: t0.Add(100 * time.Second), Started: t0}
	g := spannerme.GroupStatus{Name: "g", Current: "A",
		Endpoints: []spannerme.EndpointStatus{{Endpoint: "A"}, {Endpoint: "B", Priority: 1}},
		Switches: []spannerme.SwitchEvent{
			{Name: "g", From: "A", To: "B", Reason: spannerme.Fallback, At: t0.Add(40 * time.Second)},
			{Name: "g", From: "B", To: "A", Reason: spannerme.Recovery, At: t0.Add(70 * time.Second)},
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
	h := Handler(cannedSource{At: time.Now(), Default: "g",
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "a:1", Endpoints: []spannerme.EndpointStatus{{Endpoint: "a:1", State: spannerme.Available}}}},
		Pools:  []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY"}},
		Config: &spannerme.ConfigStatus{Path: "/etc/spannerme.yaml", Hash: "abc123", Applied: 2,
			LastError: errors.New("line 3: field recoveryTimeout: bad duration"), RestartNeeded: []string{"poolSize"}}})
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
		h    spannerme.PoolHealth
		want string
	}{
		{spannerme.PoolHealth{Disabled: true}, "off"},
		{spannerme.PoolHealth{}, "healthy"},
		{spannerme.PoolHealth{Suspect: true}, "suspect: calls timed out, probing"},
		{spannerme.PoolHealth{Ejected: true, Reason: spannerme.ReasonConsecutiveFailures, EjectedUntil: now.Add(28 * time.Second), Detail: "10 failures"},
			"ejected (consecutive failures), 28s left: 10 failures"},
	} {
		if got := healthText(now, tc.h); got != tc.want {
			t.Errorf("healthText(%+v) = %q, want %q", tc.h, got, tc.want)
		}
	}
	st := spannerme.Status{At: now,
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "b:1", Endpoints: []spannerme.EndpointStatus{
			{Endpoint: "a:1", State: spannerme.Unavailable}, {Endpoint: "b:1", Priority: 1, State: spannerme.Available}}}},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY",
			Health: spannerme.PoolHealth{Ejected: true, Reason: spannerme.ReasonFailurePercentage, EjectedUntil: now.Add(time.Minute), Detail: "70% failed"}},
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
	h := spannerme.PoolHealth{Ejected: true, Reason: spannerme.ReasonTimeouts, EjectedUntil: now.Add(-40 * time.Second), Detail: "probe failed"}
	got := healthText(now, h)
	if want := "ejected (timeouts), ejection time over, probing for readmission: probe failed"; got != want {
		t.Fatalf("healthText = %q, want %q", got, want)
	}
}

// What a request gets, on a canned Status: the page or JSON as asked, GET and HEAD only,
// never cached.
func TestHandlerRequests(t *testing.T) {
	h := Handler(cannedSource{At: time.Now(), Default: "g",
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "a:1", Endpoints: []spannerme.EndpointStatus{{Endpoint: "a:1", State: spannerme.Available}}}},
		Pools:  []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY"}}})
	for _, tc := range []struct {
		method, path, accept string
		json                 bool
	}{
		{http.MethodGet, "/", "", false},
		{http.MethodGet, "/?format=json", "", true},
		{http.MethodGet, "/?format=html", "application/json", false},
		{http.MethodGet, "/x/status.json", "", true},
		{http.MethodGet, "/", "application/json", true},
		{http.MethodGet, "/", "text/html,application/json;q=0.9", false},
		{http.MethodHead, "/?format=json", "", true},
	} {
		res, body := get(t, h, tc.method, tc.path, tc.accept)
		ct := res.Header.Get("Content-Type")
		if res.StatusCode != http.StatusOK || (ct == "application/json") != tc.json || res.Header.Get("Cache-Control") != "no-store" ||
			res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s (Accept %q): %d, Content-Type %q, Cache-Control %q, X-Content-Type-Options %q", tc.method, tc.path, tc.accept,
				res.StatusCode, ct, res.Header.Get("Cache-Control"), res.Header.Get("X-Content-Type-Options"))
		}
		switch {
		case tc.method == http.MethodHead:
			if body != "" {
				t.Errorf("HEAD %s: body %q", tc.path, body)
			}
		case tc.json:
			var st spannerme.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil || st.Groups[0].Current != "a:1" {
				t.Errorf("%s %s: %v\n%s", tc.method, tc.path, err, body)
			}
		case !strings.Contains(body, `<span class="current" data-group="g">a:1</span>`):
			t.Errorf("%s %s: page\n%s", tc.method, tc.path, body)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		if res, _ := get(t, h, m, "/", ""); res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q", m, res.StatusCode, res.Header.Get("Allow"))
		}
	}
}

// A named endpoint is shown by its name next to its address (the current endpoint, the
// endpoint and pool tables, a pending switch, the timeline's titles) and by its name alone on
// its timeline lane, with the address as the lane's tooltip; an endpoint without a name is
// shown by its address alone.
func TestStatusPageShowsEndpointNames(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := spannerme.Status{At: t0.Add(time.Minute), Started: t0, Default: "g",
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "b:1", PendingSwitch: "a:1", PendingSwitchAt: t0.Add(61 * time.Second),
			Endpoints: []spannerme.EndpointStatus{
				{Endpoint: "a:1", Name: "psc-east4", State: spannerme.Available},
				{Endpoint: "b:1", Priority: 1, State: spannerme.Available}},
			Switches: []spannerme.SwitchEvent{{Name: "g", From: "a:1", To: "b:1", Reason: spannerme.Fallback, At: t0.Add(30 * time.Second)}}}},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Name: "psc-east4", Connectivity: "READY"}, {Endpoint: "b:1", Connectivity: "READY"}}}
	h := Handler(cannedSource(st))
	_, page := get(t, h, http.MethodGet, "/", "")
	for _, want := range []string{
		`<span class="current" data-group="g">b:1</span>`,
		`switching to psc-east4 (a:1) in 1s`,
		`<td class="ep"><span class="name">psc-east4</span> <span class="addr">a:1</span></td>`,
		`<td class="ep">b:1</td>`,
		`>psc-east4<title>a:1</title></text>`,
		`fallback at 12:00:30.000: psc-east4 (a:1) → b:1`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if n := strings.Count(page, `<span class="name">psc-east4</span> <span class="addr">a:1</span>`); n != 2 {
		t.Errorf("the named endpoint is shown with its address %d times, want 2 (its group's table, the pools)", n)
	}
	if strings.Contains(page, `class="current-name"`) {
		t.Errorf("the current endpoint b:1 has no name, but the page shows one")
	}

	// The named endpoint current: its name next to the address in the group's head.
	st.Groups[0].Current, st.Groups[0].PendingSwitch, st.Groups[0].PendingSwitchAt = "a:1", "", time.Time{}
	_, page = get(t, Handler(cannedSource(st)), http.MethodGet, "/", "")
	if want := `<span class="current-name" data-group="g">psc-east4</span>`; !strings.Contains(page, want) {
		t.Errorf("page lacks %q", want)
	}
	if !strings.Contains(page, `<span class="current" data-group="g">a:1</span>`) {
		t.Errorf("page lacks the current endpoint's address")
	}
	_, doc := get(t, h, http.MethodGet, "/?format=json", "")
	if !strings.Contains(doc, `"name": "psc-east4"`) || strings.Count(doc, `"name": "psc-east4"`) != 2 {
		t.Errorf("JSON does not carry the name once per endpoint status and pool:\n%s", doc)
	}

	// No names at all: the page has none of their markup.
	for i := range st.Groups[0].Endpoints {
		st.Groups[0].Endpoints[i].Name = ""
	}
	st.Pools[0].Name = ""
	_, page = get(t, Handler(cannedSource(st)), http.MethodGet, "/", "")
	for _, unwanted := range []string{`class="name"`, `class="current-name"`, `<title>a:1</title>`, "psc-east4"} {
		if strings.Contains(page, unwanted) {
			t.Errorf("page without names has %q", unwanted)
		}
	}
}

// The page and the JSON show each group's directed read policy, and "none" for a group
// without one.
func TestStatusHandlerShowsDirectedReads(t *testing.T) {
	policy := &spannerme.DirectedReadsStatus{
		IncludeReplicas:      []spannerme.ReplicaSelection{{Location: "us-west2", Type: "READ_ONLY"}, {Location: "us-east4"}},
		AutoFailoverDisabled: true,
	}
	ep := []spannerme.EndpointStatus{{Endpoint: "a:1", State: spannerme.Available}}
	h := Handler(cannedSource{At: time.Now(), Default: "default",
		Groups: []spannerme.GroupStatus{
			{Name: "default", Current: "a:1", Endpoints: ep},
			{Name: "west", Current: "a:1", Endpoints: ep, DirectedReads: policy},
		},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY"}}})
	_, page := get(t, h, http.MethodGet, "/", "")
	for _, want := range []string{
		`data-group="west">directed reads: include us-west2/READ_ONLY, us-east4 (auto failover disabled)</span>`,
		`data-group="default">directed reads: none</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	_, doc := get(t, h, http.MethodGet, "/?format=json", "")
	var st spannerme.Status
	if err := json.Unmarshal([]byte(doc), &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Groups[1].DirectedReads; got == nil || got.String() != policy.String() || st.Groups[0].DirectedReads != nil {
		t.Errorf("JSON policies: default %+v, west %+v\n%s", st.Groups[0].DirectedReads, got, doc)
	}
	if !strings.Contains(doc, `"includeReplicas": [`) || !strings.Contains(doc, `"type": "READ_ONLY"`) {
		t.Errorf("JSON form:\n%s", doc)
	}
}

// The page says why a degraded endpoint is not available (its latency against its
// fallback's, since when) and shows every endpoint's latency in its group, "-" when unknown
// or when brownout detection is off.
func TestStatusPageBrownoutText(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	st := spannerme.Status{At: now,
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "b:1", Endpoints: []spannerme.EndpointStatus{
			{Endpoint: "a:1", State: spannerme.Unavailable, Brownout: &spannerme.BrownoutStatus{Degraded: true,
				Since: now.Add(-12 * time.Second), Latency: 402 * time.Millisecond, Fallback: "b:1", FallbackLatency: 21 * time.Millisecond}},
			{Endpoint: "b:1", Priority: 1, State: spannerme.Available, Brownout: &spannerme.BrownoutStatus{Latency: 21 * time.Millisecond}},
			{Endpoint: "c:1", Priority: 2, State: spannerme.Available}}}},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY"}, {Endpoint: "b:1", Connectivity: "READY"},
			{Endpoint: "c:1", Connectivity: "READY"}}}
	eps := newPageView(st).Groups[0].Endpoints
	if want := "degraded (brownout): 402ms, far slower than b:1 (21ms), for 12s"; eps[0].Reason != want || !eps[0].Degraded {
		t.Errorf("degraded endpoint: reason %q (degraded %v), want %q", eps[0].Reason, eps[0].Degraded, want)
	}
	for i, want := range []string{"402ms", "21ms", "-"} {
		if eps[i].Latency != want {
			t.Errorf("%s: latency shown %q, want %q", eps[i].Endpoint, eps[i].Latency, want)
		}
	}
	if eps[1].Reason != "" || eps[1].Degraded {
		t.Errorf("available endpoint: reason %q, degraded %v", eps[1].Reason, eps[1].Degraded)
	}
	var b strings.Builder
	if err := statusPage.Execute(&b, newPageView(st)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `<span class="badge degraded">degraded</span>`) {
		t.Errorf("page lacks the degraded badge:\n%s", b.String())
	}
}

// The page says how many Spanner clients and database/sql configurators share the
// GCPMultiEndpoint (Status.Clients, Status.Configurators).
func TestStatusPageShowsClients(t *testing.T) {
	st := spannerme.Status{At: time.Now(), Default: "g", Clients: 3, Configurators: 1,
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "a:1", Endpoints: []spannerme.EndpointStatus{{Endpoint: "a:1", State: spannerme.Available}}}},
		Pools:  []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY"}}}
	_, page := get(t, Handler(cannedSource(st)), http.MethodGet, "/", "")
	if want := `<span id="clients">Spanner clients: 3, database/sql configurators: 1</span>`; !strings.Contains(page, want) {
		t.Errorf("page lacks %q", want)
	}
}

// Text from a server or a file is cut in each page cell: a connection error (in the pool's
// row and as the reason its endpoint is unavailable) and a configuration file's error (in the
// file's table and in the rejected-edit banner at the top).
func TestStatusPageCutsLongText(t *testing.T) {
	long := strings.Repeat("x", 10000)
	h := Handler(cannedSource{At: time.Now(), Default: "g",
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "a:1", Endpoints: []spannerme.EndpointStatus{{Endpoint: "a:1", State: spannerme.Unavailable}}}},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "TRANSIENT_FAILURE",
			LastError: &spannerme.ConnError{Kind: spannerme.ConnOther, Message: long, At: time.Now()}}},
		Config: &spannerme.ConfigStatus{Path: "/etc/spannerme.yaml", Applied: 1, LastError: errors.New(long), LastErrorAt: time.Now()}})
	_, page := get(t, h, http.MethodGet, "/", "")
	if n := strings.Count(page, "…[cut: "); n != 4 {
		t.Errorf("%d cells cut, want 4 (the pool's error, the endpoint's reason, the file's error in its table and in the rejected-edit banner)", n)
	}
	if strings.Contains(page, long[:maxCellText+1]) {
		t.Errorf("a cell shows more than %d bytes of the text", maxCellText)
	}
}

// The page's reason for an endpoint leads with its verdict, the one place that decides, and
// explains it; a usable endpoint has none, and a last resort shows although it is Available.
func TestEndpointReasonFollowsTheVerdict(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	st := spannerme.Status{At: now}
	ejected := spannerme.PoolStatus{Connectivity: "READY", Health: spannerme.PoolHealth{Ejected: true,
		Reason: spannerme.ReasonConsecutiveFailures, EjectedUntil: now.Add(20 * time.Second), Detail: "5 failures"}}
	slow := &spannerme.BrownoutStatus{Degraded: true, Latency: 400 * time.Millisecond, Fallback: "a:1", FallbackLatency: 20 * time.Millisecond}
	down := spannerme.PoolStatus{Connectivity: "TRANSIENT_FAILURE", LastError: &spannerme.ConnError{Kind: "refused", Message: "connection refused"}}
	for _, tc := range []struct {
		name string
		e    spannerme.EndpointStatus
		p    spannerme.PoolStatus
		want string
	}{
		{"usable", spannerme.EndpointStatus{State: spannerme.Available, Verdict: "usable"}, spannerme.PoolStatus{Connectivity: "READY"}, ""},
		{"ejected", spannerme.EndpointStatus{State: spannerme.Recovering, Verdict: "ejected"}, ejected, "ejected (consecutive failures), 20s left: 5 failures"},
		{"ejected everywhere", spannerme.EndpointStatus{State: spannerme.Available, Verdict: "ejected, as every connected endpoint of the group is"}, ejected,
			"ejected, as every connected endpoint of the group is: ejected (consecutive failures), 20s left: 5 failures"},
		{"degraded, last resort", spannerme.EndpointStatus{State: spannerme.Available, Verdict: "degraded, but no other endpoint is usable", Brownout: slow},
			spannerme.PoolStatus{Connectivity: "READY"}, "degraded, but no other endpoint is usable: degraded (brownout): 400ms, far slower than a:1 (20ms)"},
		{"not connected", spannerme.EndpointStatus{State: spannerme.Unavailable, Verdict: "not connected"}, down, "not connected: refused: connection refused"},
		{"before the first verdict", spannerme.EndpointStatus{State: spannerme.Recovering}, spannerme.PoolStatus{Connectivity: "CONNECTING"}, "pool CONNECTING"},
	} {
		if got := endpointReason(st, tc.e, tc.p); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := endpointReason(spannerme.Status{At: now, Closed: true}, spannerme.EndpointStatus{Verdict: "usable"}, down); got != "closed" {
		t.Errorf("closed: %q", got)
	}
}

// The page shows each group's hedging and its counts, and "off" for a group that does not
// hedge; the JSON carries them.
func TestStatusHandlerShowsHedging(t *testing.T) {
	hedging := &spannerme.HedgingStatus{Delay: 50 * time.Millisecond, MinDelay: 20 * time.Millisecond, Budget: 0.05,
		Hedgeable: 1200, Sent: 61, Won: 58, Lost: 3, Refused: 2}
	ep := []spannerme.EndpointStatus{{Endpoint: "a:1", State: spannerme.Available}}
	h := Handler(cannedSource{At: time.Now(), Default: "default",
		Groups: []spannerme.GroupStatus{
			{Name: "default", Current: "a:1", Endpoints: ep},
			{Name: "west", Current: "a:1", Endpoints: ep, Hedging: hedging},
		},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY"}}})
	_, page := get(t, h, http.MethodGet, "/", "")
	for _, want := range []string{
		`data-group="west">hedging: after 50ms, budget 5%: 1200 hedgeable, 61 sent, 58 won, 3 lost, 2 refused</span>`,
		`data-group="default">hedging: off</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	_, doc := get(t, h, http.MethodGet, "/?format=json", "")
	var st spannerme.Status
	if err := json.Unmarshal([]byte(doc), &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Groups[1].Hedging; got == nil || *got != *hedging || st.Groups[0].Hedging != nil {
		t.Errorf("JSON hedging: default %+v, west %+v\n%s", st.Groups[0].Hedging, got, doc)
	}
}

// An endpoint cooling down after RESOURCE_EXHAUSTED: the group says why it is not available
// (or, before another endpoint answered, why it still uses it), the pool how long the
// cooldown has left.
func TestStatusPageCooldownText(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cd := &spannerme.CooldownStatus{Cooling: true, Until: now.Add(2500 * time.Millisecond), Length: 3 * time.Second, FromRetryInfo: true, Repeats: 1, Total: 1}
	st := spannerme.Status{At: now,
		Groups: []spannerme.GroupStatus{{Name: "g", Current: "a:1", Endpoints: []spannerme.EndpointStatus{
			{Endpoint: "a:1", State: spannerme.Recovering, Verdict: "cooling down after RESOURCE_EXHAUSTED"},
			{Endpoint: "b:1", Priority: 1, State: spannerme.Available}}}},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Connectivity: "READY", Cooldown: cd},
			{Endpoint: "b:1", Connectivity: "READY", Cooldown: &spannerme.CooldownStatus{Until: now.Add(-time.Minute), Total: 2}}}}
	v := newPageView(st)
	want := "cooling down after RESOURCE_EXHAUSTED, 2.5s left (the server's RetryInfo)"
	if got := v.Groups[0].Endpoints[0].Reason; got != want {
		t.Errorf("reason shown for a cooling endpoint = %q, want %q", got, want)
	}
	if got := v.Pools[0].Health; got != "healthy · "+want {
		t.Errorf("pool health shown = %q", got)
	}
	if got := v.Pools[1].Health; got != "healthy" {
		t.Errorf("a past cooldown shows: %q", got)
	}
	// A cooldown the group does not count yet (no endpoint it would use instead answered).
	st.Groups[0].Endpoints[0].Verdict, st.Groups[0].Endpoints[0].State = "usable", spannerme.Available
	want = "usable: " + want + "; the group stays until the endpoint it would move to answers"
	if got := newPageView(st).Groups[0].Endpoints[0].Reason; got != want {
		t.Errorf("reason shown for a cooling endpoint its group still uses = %q, want %q", got, want)
	}
}

// Every text cell goes through the same cut: a group name no group has (from a call), a
// group's and an endpoint's name, the file's path and its pending edit's reason.
func TestStatusPageCutsEveryTextCell(t *testing.T) {
	long := func(c string) string { return strings.Repeat(c, 5000) }
	h := Handler(cannedSource{At: time.Now(), Default: long("g"),
		Groups: []spannerme.GroupStatus{{Name: long("g"), Current: long("e"), Endpoints: []spannerme.EndpointStatus{
			{Endpoint: long("e"), Name: long("n"), State: spannerme.Available}}}},
		Pools:         []spannerme.PoolStatus{{Endpoint: long("e"), Name: long("n"), Connectivity: "READY"}},
		UnknownGroups: map[string]int64{long("u"): 3},
		Config: &spannerme.ConfigStatus{Path: long("p"), Applied: 1,
			Pending: &spannerme.PendingEdit{Since: time.Now(), Versions: 2, Why: long("w")}}})
	_, page := get(t, h, http.MethodGet, "/", "")
	for _, c := range []string{"g", "e", "n", "u", "p", "w"} {
		if strings.Contains(page, long(c)[:maxCellText+1]) {
			t.Errorf("the page shows more than %d bytes of the %q text", maxCellText, c)
		}
		if !strings.Contains(page, long(c)[:maxCellText]+"…[cut: 5000 bytes in all]") {
			t.Errorf("the page does not show the %q text cut", c)
		}
	}
	if !strings.Contains(page, `id="config-pending"`) {
		t.Error("the page does not show the edit waiting to settle")
	}
}

// A watched configuration file replaced by a 46-byte token file: the page and its JSON show
// the rejection, and not the token.
func TestStatusPageNeverShowsAShortSecret(t *testing.T) {
	const token = "ya29.a0AfB_byDq3kT9mZx7Lp2Wv8Rn4Hs6Jc1Yu5Ge0Qo"
	e := startEndpoint(t, "E1")
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	if err := os.WriteFile(path, []byte("default: g\nmultiEndpoints: {g: {endpoints: ['"+e.Addr()+"']}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := spannerme.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	gme := newGME(t, fc.Options, fastSettings())
	w, err := spannerme.WatchConfig(gme, path, spannerme.WatchOptions{Debounce: 10 * time.Millisecond, Settle: 20 * time.Millisecond,
		Resync: -1, Logger: fastSettings().Logger})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for w.Status().LastError == nil {
		if time.Now().After(deadline) {
			t.Fatal("the token file was not refused within 20s")
		}
		time.Sleep(10 * time.Millisecond) // polling a real watcher, bounded by the deadline
	}
	h := Handler(gme)
	_, page := get(t, h, http.MethodGet, "/", "")
	_, doc := get(t, h, http.MethodGet, "/?format=json", "")
	if !strings.Contains(page, "not a configuration file") || !strings.Contains(doc, "not a configuration file") {
		t.Errorf("the page or its JSON does not show the rejection:\n%s", page)
	}
	if strings.Contains(page, token) || strings.Contains(doc, token) || strings.Contains(page, token[:20]) {
		t.Error("the page or its JSON shows the token")
	}
}
