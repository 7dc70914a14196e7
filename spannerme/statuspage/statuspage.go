// Package statuspage serves a spannerme.Status over HTTP: as one HTML page a person reads
// at a glance, and as JSON for a program. It is an add-on: package spannerme does not
// depend on it, and it uses only spannerme's exported API (and the module's helper that cuts
// long text).
//
// Mount its Handler on a mux and port of its own that only operators reach, not on
// http.DefaultServeMux (which many services serve publicly, pprof's handlers among them):
//
//	mux := http.NewServeMux()
//	mux.Handle("/spannerme/", http.StripPrefix("/spannerme", statuspage.Handler(gme)))
//	go http.ListenAndServe("127.0.0.1:8081", mux) // an admin port, not the service's
//
// Every answer carries a Content-Security-Policy that lets the page load and run nothing and
// be framed by no page (CSP, SecurityHeaders). A page served on loopback is still readable
// by another site through DNS rebinding unless the Host header is checked: wrap the handlers
// in AllowHosts.
//
// What it costs and shows: each request builds a full Status (src.Status is called once per
// request, and every open page asks again every 2 seconds); the handler starts no goroutine
// and keeps nothing between requests. It has no authentication of its own and shows group
// names, endpoint addresses, connection-error text and the path of a configuration file:
// serve it where only operators can reach it, or behind your own authentication.
package statuspage

import (
	"bytes"
	"cmp"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// Source is what Handler serves: anything that reports a spannerme.Status, such as a
// *spannerme.GCPMultiEndpoint. Status is called once per request, possibly from several
// goroutines at once, so it must be safe for concurrent use (GCPMultiEndpoint.Status is).
type Source interface {
	Status() spannerme.Status
}

// Handler returns an http.Handler that serves src's Status: as one HTML page a person
// reads at a glance (docs/observability.md, "Status page", says what it shows), which
// refreshes itself every 2 seconds, and as JSON (the encoding/json form of
// spannerme.Status, indented) when the request asks for it with ?format=json, a path ending
// in ".json", or an Accept header that prefers application/json (it names application/json
// and not text/html); ?format= with any other value asks for the page. Both are sent with
// Cache-Control: no-store and X-Content-Type-Options: nosniff. A page cell shows at most 1024
// bytes of text from a server or a configuration file (a connection error, why an endpoint
// is not available, a configuration file's error), ending with "…[cut: N bytes in all]"
// when cut.
//
// The page opens with a summary line: all well, or what is wrong and where (a group with no
// available endpoint, a group off its first endpoint, a standby not available, a rejected
// edit of the configuration file, which is also shown in full at the top).
//
// Units: on the page, times are clock times (15:04:05.000) in the location of Status.At,
// durations are rounded (to the millisecond under a second, to 100ms under a minute, else
// to the second), latencies are in µs under a millisecond, else ms, else s, and the timeline shows the last 15 minutes, or less since Status.Started.
// In JSON, times are RFC 3339 and durations are as spannerme.Status encodes them (Go
// duration strings such as "200ms").
//
// It answers GET and HEAD (HEAD: the same headers, no body); any other method gets 405
// Method Not Allowed with an Allow header. If the status cannot be encoded or the page
// rendered, it answers 500 with the error's text, and nothing else is written. Every answer
// carries the headers of SecurityHeaders: a Content-Security-Policy (CSP) that lets the page
// load nothing and run no script, and that no page may frame it. It does not check the
// request's Host header: wrap it in AllowHosts for that.
//
// It calls src.Status once per request and keeps nothing between requests; it takes no
// lock of its own and is safe for concurrent use when src.Status is (GCPMultiEndpoint.Status
// is, and takes no lock a call waits for). A nil src, or one holding a nil pointer (such as
// a nil *spannerme.GCPMultiEndpoint), is served as a zero-value spannerme.GCPMultiEndpoint:
// Closed, with no groups and no pools.
func Handler(src Source) http.Handler {
	if isNil(src) {
		src = new(spannerme.GCPMultiEndpoint)
	}
	return statusHandler{src}
}

// isNil reports whether src is nil or holds a nil pointer, map, slice, func, chan or
// interface, whose Status method would most likely panic.
func isNil(src Source) bool {
	if src == nil {
		return true
	}
	switch v := reflect.ValueOf(src); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

type statusHandler struct{ src Source }

func (h statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	st := h.src.Status()
	var body bytes.Buffer
	if wantsJSON(r) {
		enc := json.NewEncoder(&body)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
	} else {
		if err := statusPage.Execute(&body, newPageView(st)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	if r.Method == http.MethodGet {
		_, _ = w.Write(body.Bytes())
	}
}

// CSP is the Content-Security-Policy of every answer of Handler and Ready: the page loads
// nothing (no script, image, font or connection), styles itself only with its own inline
// CSS, and no page may frame it (no clickjacking).
const CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"

// SecurityHeaders sets, in h, the headers that Handler and Ready send with every answer:
// Content-Security-Policy (CSP), X-Frame-Options: DENY (frame-ancestors for browsers
// without CSP), X-Content-Type-Options: nosniff, Cache-Control: no-store and
// Referrer-Policy: no-referrer. For a handler of your own beside them.
func SecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
}

// wantsJSON reports whether the request asks for JSON rather than the page.
func wantsJSON(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	if strings.HasSuffix(r.URL.Path, ".json") {
		return true
	}
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}

//go:embed statuspage.html
var statusPageHTML string

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format("15:04:05.000")
	},
	"lower":    strings.ToLower,
	"subtract": func(a, b int) int { return a - b },
	"cut":      cutText,
}).Parse(statusPageHTML))

// maxCellText bounds, in bytes, what a page cell (or attribute) shows of any text: what comes
// from a server, a configuration file or a call (a connection error, a group's or
// endpoint's name, a group name no group has); what is cut ends with "…[cut: N bytes in
// all]".
const maxCellText = 1024

// cutText is the page's one cut of a text cell: fmt.Sprint(v) cut to maxCellText bytes.
func cutText(v any) string { return bounded.Text(fmt.Sprint(v), maxCellText) }

// pageView is what the page template shows: spannerme.Status, arranged for reading.
type pageView struct {
	spannerme.Status
	Groups []groupView
	Pools  []poolView
	// Summary says in one line whether all is well, or what is wrong and where; SummaryOK
	// is true when all is well.
	Summary   string
	SummaryOK bool
	// Rejected says that the last edit of the configuration file was rejected; "" if not.
	Rejected string
}

type groupView struct {
	spannerme.GroupStatus
	Default     bool
	CurrentName string // the current endpoint's name, or ""
	Endpoints   []endpointView
	Pending     string // "switching to X in 1.2s", or ""
	Timeline    timeline
	TierState   string // "current tier 0", with a slow start ramp; "" without tiers
}

type endpointView struct {
	spannerme.EndpointStatus
	Current      bool
	For          string // how long it has been in State
	Connectivity string
	Reason       string // why it is not Available, or ""
	Latency      string // the brownout rule's latency of the endpoint in this group, "-" when unknown or off
	Degraded     bool   // degraded by brownout detection in this group
	Tier         string // "tier 0 · 48% · 12ms in flight 3", the spreading of a group with tiers; ""
}

type poolView struct {
	spannerme.PoolStatus
	For       string
	LastError string // "refused 12s ago: ...", or ""
	PastError bool   // LastError happened before the pool connected again
	Health    string // "ejected (consecutive failures) for 28s: ...", "suspect", "healthy", "off"
	Note      string // why connectivity and health disagree, or ""
}

// timeline is one group's SVG: a lane per endpoint, a bar where it was current.
type timeline struct {
	Width, Height, Left, Right int
	Lanes                      []lane
	Bars                       []bar
	Marks                      []mark
	From, To                   string // times at the two ends
}

type lane struct {
	Y, TextY int
	Endpoint string
	Label    string // the endpoint's name, else its address
}

type bar struct {
	X, Y, W, H int
	Title      string
}

type mark struct {
	X, Y1, Y2 int
	Reason    string
	Title     string
}

// timelineSpan is the longest stretch of time a timeline shows.
const timelineSpan = 15 * time.Minute

// endpointNames returns the names of st's named endpoints, by endpoint: those of the
// configured ones (a retired pool's name is history).
func endpointNames(st spannerme.Status) map[string]string {
	names := map[string]string{}
	for _, p := range st.Pools {
		if !p.Retired && p.Name != "" {
			names[p.Endpoint] = p.Name
		}
	}
	for _, g := range st.Groups {
		for _, e := range g.Endpoints {
			if e.Name != "" {
				names[e.Endpoint] = e.Name
			}
		}
	}
	return names
}

// labelOf writes endpoint e for people: "name (address)" when it has a name, else the
// address.
func labelOf(names map[string]string, e string) string {
	if n := names[e]; n != "" {
		return n + " (" + e + ")"
	}
	return e
}

func newPageView(st spannerme.Status) pageView {
	v := pageView{Status: st}
	names := endpointNames(st)
	pools := make(map[string]spannerme.PoolStatus, len(st.Pools))
	for _, p := range st.Pools {
		if !p.Retired {
			pools[p.Endpoint] = p
		}
		pv := poolView{PoolStatus: p, For: ago(st.At, p.Since), Note: connectivityNote(p)}
		pv.LastError, pv.PastError = lastErrorText(st.At, p)
		pv.Health = healthText(st.At, p.Health)
		if c := cooldownText(st.At, p.Cooldown); c != "" {
			pv.Health += " · " + c
		}
		v.Pools = append(v.Pools, pv)
	}
	for _, g := range st.Groups {
		gv := groupView{GroupStatus: g, Default: g.Name == st.Default, CurrentName: names[g.Current], Timeline: newTimeline(st, g)}
		if g.PendingSwitch != "" {
			gv.Pending = fmt.Sprintf("switching to %s in %s", labelOf(names, g.PendingSwitch), g.PendingSwitchAt.Sub(st.At).Round(time.Millisecond))
		}
		gv.TierState = tierState(st.At, g.Tiers)
		for i, e := range g.Endpoints {
			p := pools[e.Endpoint]
			ev := endpointView{EndpointStatus: e, Current: e.Endpoint == g.Current, For: ago(st.At, e.Since), Connectivity: p.Connectivity}
			if g.Tiers != nil && i < len(g.Tiers.Members) {
				ev.Tier = tierMemberText(g.Tiers.Members[i], g.Tiers.ShareWindow)
			}
			ev.Reason = endpointReason(st, e, p)
			ev.Latency = "-"
			if b := e.Brownout; b != nil {
				ev.Degraded = b.Degraded
				if b.Latency > 0 {
					ev.Latency = latencyText(b.Latency)
				}
			}
			gv.Endpoints = append(gv.Endpoints, ev)
		}
		v.Groups = append(v.Groups, gv)
	}
	v.Rejected = rejectedEdit(st)
	v.Summary, v.SummaryOK = summary(st, names, v.Rejected != "")
	return v
}

// endpointReason says why endpoint e is, or is not, available to its group: its verdict
// (EndpointStatus.Verdict, the one place that decides), followed by what explains it (the
// ejection, the brownout, the connection error), for every endpoint that is not plainly
// usable; "" for a usable one, but for one whose cooldown the group does not count yet.
// Before the first verdict (and after Close) it explains a state
// other than Available from the pool alone.
func endpointReason(st spannerme.Status, e spannerme.EndpointStatus, p spannerme.PoolStatus) string {
	var detail string
	switch {
	case st.Closed:
		return "closed"
	case p.Health.Ejected:
		detail = healthText(st.At, p.Health)
	case p.Cooldown != nil && p.Cooldown.Cooling:
		detail = cooldownText(st.At, p.Cooldown)
	case e.Brownout != nil && e.Brownout.Degraded:
		detail = brownoutText(st.At, *e.Brownout)
	case p.LastError != nil && p.Connectivity != "READY":
		detail = fmt.Sprintf("%s: %s", p.LastError.Kind, p.LastError.Message)
	case p.Connectivity != "" && p.Connectivity != "READY":
		detail = "pool " + p.Connectivity
	}
	switch {
	case e.Verdict == "usable" && p.Cooldown != nil && p.Cooldown.Cooling:
		// A cooldown the group does not count yet: the endpoint it would move to has not
		// answered since it began (docs/health.md, "Overload cooldown").
		return "usable: " + detail + "; the group stays until the endpoint it would move to answers"
	case e.Verdict == "" && e.State == spannerme.Available, e.Verdict == "usable":
		return ""
	case e.Verdict == "":
		return detail
	case detail == "", strings.HasPrefix(detail, e.Verdict):
		return cmp.Or(detail, e.Verdict)
	}
	return e.Verdict + ": " + detail
}

// brownoutText says why a degraded endpoint is not available: its latency against its
// fallback's, and for how long.
func brownoutText(now time.Time, b spannerme.BrownoutStatus) string {
	text := "degraded (brownout): " + latencyText(b.Latency)
	if b.Fallback != "" {
		text += fmt.Sprintf(", far slower than %s (%s)", b.Fallback, latencyText(b.FallbackLatency))
	}
	if !b.Since.IsZero() {
		text += ", for " + ago(now, b.Since)
	}
	return text
}

// cooldownText says how long an endpoint's overload cooldown has left, "" when it is not
// cooling down.
func cooldownText(now time.Time, c *spannerme.CooldownStatus) string {
	if c == nil || !c.Cooling {
		return ""
	}
	text := fmt.Sprintf("cooling down after RESOURCE_EXHAUSTED, %s left", max(c.Until.Sub(now), 0).Round(100*time.Millisecond))
	if c.FromRetryInfo {
		text += " (the server's RetryInfo)"
	}
	if c.Repeats > 1 {
		text += fmt.Sprintf(", cooldown %d in a row", c.Repeats)
	}
	return text
}

// healthText says in a few words what health from call outcomes thinks of a pool.
func healthText(now time.Time, h spannerme.PoolHealth) string {
	switch {
	case h.Disabled:
		return "off"
	case h.Ejected && !now.Before(h.EjectedUntil):
		// It stays ejected until a probe passes.
		return fmt.Sprintf("ejected (%s), ejection time over, probing for readmission: %s", h.Reason, h.Detail)
	case h.Ejected:
		return fmt.Sprintf("ejected (%s), %s left: %s", h.Reason, h.EjectedUntil.Sub(now).Round(time.Second), h.Detail)
	case h.Suspect:
		return "suspect: calls timed out, probing"
	}
	return "healthy"
}

// ago says how long before now t was, "-" for a zero t.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// newTimeline lays out which endpoint of g was current when, from the group's recent
// switches, over the last timelineSpan (or since the GCPMultiEndpoint started).
func newTimeline(st spannerme.Status, g spannerme.GroupStatus) timeline {
	const width, left, right, laneH, top = 760, 190, 10, 22, 6
	end := st.At
	start := end.Add(-timelineSpan)
	if st.Started.After(start) {
		start = st.Started
	}
	if !start.Before(end) {
		start = end.Add(-time.Second)
	}
	t := timeline{Width: width, Left: left, Right: width - right, From: start.Format("15:04:05"), To: end.Format("15:04:05")}
	names := endpointNames(st)
	laneOf := map[string]int{}
	addLane := func(e string) int {
		if i, ok := laneOf[e]; ok {
			return i
		}
		i := len(t.Lanes)
		laneOf[e] = i
		y := top + i*laneH
		label := e
		if n := names[e]; n != "" {
			label = n
		}
		t.Lanes = append(t.Lanes, lane{Y: y, TextY: y + laneH/2 + 4, Endpoint: e, Label: label})
		return i
	}
	for _, e := range g.Endpoints {
		addLane(e.Endpoint)
	}
	x := func(at time.Time) int {
		if at.Before(start) {
			at = start
		}
		return left + int(float64(t.Right-left)*float64(at.Sub(start))/float64(end.Sub(start)))
	}
	// Who was current at the start of the window.
	cur := g.Current
	for i := len(g.Switches) - 1; i >= 0; i-- {
		if g.Switches[i].At.After(start) {
			cur = g.Switches[i].From
		}
	}
	from := start
	emit := func(e string, until time.Time) {
		if e == "" || !until.After(from) {
			return
		}
		y := top + addLane(e)*laneH
		x0, x1 := x(from), x(until)
		t.Bars = append(t.Bars, bar{X: x0, Y: y + 3, W: max(x1-x0, 1), H: laneH - 6,
			Title: fmt.Sprintf("%s current from %s to %s", labelOf(names, e), from.Format("15:04:05.000"), until.Format("15:04:05.000"))})
	}
	var marks []spannerme.SwitchEvent
	for _, ev := range g.Switches {
		if !ev.At.After(start) {
			continue
		}
		emit(cur, ev.At)
		cur, from = ev.To, ev.At
		marks = append(marks, ev)
	}
	emit(cur, end)
	t.Height = top*2 + max(len(t.Lanes), 1)*laneH + 16
	for _, ev := range marks {
		t.Marks = append(t.Marks, mark{X: x(ev.At), Y1: top, Y2: top + len(t.Lanes)*laneH, Reason: ev.Reason.String(),
			Title: fmt.Sprintf("%s at %s: %s → %s", ev.Reason, ev.At.Format("15:04:05.000"), labelOf(names, ev.From), labelOf(names, ev.To))})
	}
	return t
}

// tierState writes a group's tier state for people: "current tier 0", and the slow start
// ramp after a switch back; "" for a group without tiers.
func tierState(now time.Time, ts *spannerme.TiersStatus) string {
	if ts == nil {
		return ""
	}
	s := fmt.Sprintf("%d tiers · current tier %d", len(ts.Tiers), ts.CurrentTier)
	if ts.SlowStartFrom >= 0 {
		s += fmt.Sprintf(" · slow start from tier %d since %s", ts.SlowStartFrom, ago(now, ts.SlowStartSince))
	}
	return s
}

// tierMemberText writes a member's spreading figures: its tier, its share of its tier's
// calls over window (when there is one), its latency score, its calls in flight and its wait
// (TierMemberStatus.Waiting).
func tierMemberText(m spannerme.TierMemberStatus, window time.Duration) string {
	s := fmt.Sprintf("tier %d", m.Tier)
	if window > 0 {
		s += fmt.Sprintf(" · %.0f%% of calls", 100*m.Share)
	}
	if m.Latency > 0 {
		s += " · score " + latencyText(m.Latency)
	}
	s += fmt.Sprintf(" · %d in flight", m.InFlight)
	if m.Waiting > 0 {
		s += ", waiting " + latencyText(m.Waiting)
	}
	return s
}
