package statuspage

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// twoEndpoints is a Status of one group "g" over a:1 and b:1 in the given states, current
// cur, both pools READY.
func twoEndpoints(now time.Time, cur string, a, b spannerme.EndpointState) spannerme.Status {
	return spannerme.Status{At: now, Default: "g",
		Groups: []spannerme.GroupStatus{{Name: "g", Current: cur, Endpoints: []spannerme.EndpointStatus{
			{Endpoint: "a:1", State: a}, {Endpoint: "b:1", Priority: 1, State: b}}}},
		Pools: []spannerme.PoolStatus{{Endpoint: "a:1", Name: "psc-east4", Connectivity: "READY"}, {Endpoint: "b:1", Connectivity: "READY"}}}
}

// The summary line says all is well, or the most serious problem first, naming the group
// and the endpoint (by its name where it has one).
func TestStatusPageSummaryLine(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rejected := twoEndpoints(now, "a:1", spannerme.Available, spannerme.Available)
	rejected.Config = &spannerme.ConfigStatus{AppliedAt: now.Add(-time.Minute), LastError: errors.New("bad"), LastErrorAt: now.Add(-time.Second)}
	fixedSince := rejected
	fixedSince.Config = &spannerme.ConfigStatus{AppliedAt: now, LastError: errors.New("bad"), LastErrorAt: now.Add(-time.Second)}
	for _, tc := range []struct {
		name string
		st   spannerme.Status
		want string
		ok   bool
	}{
		{"all well", twoEndpoints(now, "a:1", spannerme.Available, spannerme.Available),
			"All well: the group on its first endpoint, every endpoint available.", true},
		{"failed over", twoEndpoints(now, "b:1", spannerme.Unavailable, spannerme.Available),
			"group g is on b:1 (priority 1), not its first endpoint.", false},
		{"nothing available", twoEndpoints(now, "a:1", spannerme.Recovering, spannerme.Unavailable),
			"group g has no available endpoint.", false},
		{"standby down", twoEndpoints(now, "a:1", spannerme.Available, spannerme.Unavailable),
			"group g: standby b:1 not available.", false},
		{"rejected edit", rejected, "the last configuration edit was rejected (below).", false},
		{"edit applied since", fixedSince, "All well", true},
		{"closed", spannerme.Status{Closed: true}, "Closed: this client serves nothing.", false},
	} {
		v := newPageView(tc.st)
		if !strings.HasPrefix(v.Summary, tc.want) || v.SummaryOK != tc.ok {
			t.Errorf("%s: summary %q (ok %v), want %q (ok %v)", tc.name, v.Summary, v.SummaryOK, tc.want, tc.ok)
		}
	}
	// With a name, the endpoint is "name (address)".
	st := twoEndpoints(now, "a:1", spannerme.Available, spannerme.Available)
	st.Pools[0].Name, st.Pools[1].Name = "", "psc-west2"
	st.Groups[0].Current = "b:1"
	if v := newPageView(st); !strings.Contains(v.Summary, "on psc-west2 (b:1) (priority 1)") {
		t.Errorf("summary %q does not name the endpoint", v.Summary)
	}
}

// Latencies are shown in the unit that fits: a sub-millisecond latency is not "0s".
func TestStatusPageLatencyUnits(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Microsecond:  "850µs",
		2345 * time.Microsecond: "2.35ms",
		123 * time.Millisecond:  "123ms",
		1500 * time.Millisecond: "1.50s",
	} {
		if got := latencyText(d); got != want {
			t.Errorf("latencyText(%v) = %q, want %q", d, got, want)
		}
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	st := twoEndpoints(now, "a:1", spannerme.Available, spannerme.Available)
	st.Groups[0].Endpoints[0].Brownout = &spannerme.BrownoutStatus{Latency: 850 * time.Microsecond}
	if got := newPageView(st).Groups[0].Endpoints[0].Latency; got != "850µs" {
		t.Errorf("latency column shows %q, want 850µs", got)
	}
}

// A connection error older than the pool's return to READY is shown as past, with its age
// and the time since it connected, not in the red of a current error; a current one stays
// red.
func TestStatusPageShowsPastErrorAsPast(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	st := twoEndpoints(now, "a:1", spannerme.Available, spannerme.Recovering)
	st.Pools[0].Since = now.Add(-3 * time.Second)
	st.Pools[0].LastError = &spannerme.ConnError{Kind: spannerme.ConnRefused, Message: "connection refused", At: now.Add(-12 * time.Second)}
	st.Pools[1].Connectivity, st.Pools[1].Since = "TRANSIENT_FAILURE", now.Add(-2*time.Second)
	st.Pools[1].LastError = &spannerme.ConnError{Kind: spannerme.ConnRefused, Message: "connection refused", At: now.Add(-time.Second)}
	_, page := get(t, Handler(cannedSource(st)), http.MethodGet, "/", "")
	if want := `<td class="past">past: refused 12s ago, before it connected 3s ago: connection refused</td>`; !strings.Contains(page, want) {
		t.Errorf("page lacks the past error %q", want)
	}
	if want := `<td class="reason">refused 1s ago: connection refused</td>`; !strings.Contains(page, want) {
		t.Errorf("page lacks the current error %q", want)
	}
}

// A pool not connected but healthy, or connected but ejected, gets a line saying why both
// can be true; a pool where they agree gets none.
func TestStatusPageExplainsConnectivityAgainstHealth(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	st := twoEndpoints(now, "a:1", spannerme.Unavailable, spannerme.Unavailable)
	st.Pools[0].Connectivity = "TRANSIENT_FAILURE"
	st.Pools[1].Health = spannerme.PoolHealth{Ejected: true, Reason: spannerme.ReasonConsecutiveFailures, EjectedUntil: now.Add(time.Minute)}
	st.Pools = append(st.Pools, spannerme.PoolStatus{Endpoint: "c:1", Connectivity: "READY"})
	v := newPageView(st)
	if !strings.HasPrefix(v.Pools[0].Note, "not connected, though healthy") {
		t.Errorf("TRANSIENT_FAILURE and healthy: note %q", v.Pools[0].Note)
	}
	if !strings.HasPrefix(v.Pools[1].Note, "connected, though ejected") {
		t.Errorf("READY and ejected: note %q", v.Pools[1].Note)
	}
	if v.Pools[2].Note != "" {
		t.Errorf("READY and healthy: note %q, want none", v.Pools[2].Note)
	}
	_, page := get(t, Handler(cannedSource(st)), http.MethodGet, "/", "")
	if !strings.Contains(page, `<tr class="pool-note" data-endpoint="a:1">`) {
		t.Error("page lacks a:1's note row")
	}
}

// A rejected edit of the configuration file is shown at the top, before the groups, with
// the error and the configuration that stays in force.
func TestStatusPageShowsRejectedEditAtTop(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	st := twoEndpoints(now, "a:1", spannerme.Available, spannerme.Available)
	st.Config = &spannerme.ConfigStatus{Path: "/etc/spannerme.yaml", Hash: "0123456789abcdef", AppliedAt: now.Add(-time.Hour),
		LastError: errors.New("line 3: field recoveryTimeout: bad duration"), LastErrorAt: now.Add(-5 * time.Second)}
	_, page := get(t, Handler(cannedSource(st)), http.MethodGet, "/", "")
	top := strings.Index(page, `id="config-rejected"`)
	first := strings.Index(page, `<section class="card group"`)
	if top < 0 || first < 0 || top > first {
		t.Fatalf("rejected edit at %d, first group at %d: want the edit above the groups", top, first)
	}
	if want := "Configuration edit rejected at 09:59:55 (5s ago): line 3: field recoveryTimeout: bad duration. The configuration in force (hash 0123456789ab, applied at 09:00:00) stays."; !strings.Contains(page, want) {
		t.Errorf("page lacks %q", want)
	}
	if s := strings.Index(page, `id="summary"`); s < 0 || s > top {
		t.Errorf("summary line at %d, want it first, above the rejected edit at %d", s, top)
	}
}
