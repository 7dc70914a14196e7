package statuspage

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"github.com/chromedp/chromedp"

	"github.com/spannerme/spanner-multiendpoint/internal/browser"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// envKeepScreenshot, if set, is a path the browser test copies its screenshot to.
const envKeepScreenshot = "SPANNERME_SCREENSHOT"

var chromiumSkipNotice sync.Once

// findChromium returns the browser to drive ($CHROMIUM_BIN, else chromium, chromium-browser,
// google-chrome on PATH: internal/browser). Without one the test is skipped with a loud
// message, or fails when the environment variable CI is true (as the emulator tests do).
func findChromium(tb testing.TB) string {
	tb.Helper()
	p, err := browser.Find()
	if err == nil {
		return p
	}
	how := fmt.Sprintf("%v: %s", err, browser.Install)
	if ci, err := strconv.ParseBool(os.Getenv("CI")); err == nil && ci {
		tb.Fatalf("FAILING (CI=%s): %s", os.Getenv("CI"), how)
	}
	chromiumSkipNotice.Do(func() { fmt.Fprintln(os.Stderr, "spannerme/statuspage: SKIPPING the browser test: "+how) })
	tb.Skip("SKIPPING: " + how)
	return ""
}

// newBrowser returns a headless Chromium context, closed when the test ends, whose
// actions time out after 90s.
func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 900),
	)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	browser, cancelTimeout := context.WithTimeout(browser, 90*time.Second)
	t.Cleanup(cancelTimeout)
	return browser
}

// An endpoint far slower than its fallback (200ms each way through its fake PSC endpoint,
// against none) is shown degraded in a real browser: the badge in its latency column and
// the reason it is not available. The brownout Window and probe interval are short so that
// the page shows it within seconds.
func TestStatusPageInBrowserShowsBrownout(t *testing.T) {
	chromium := findChromium(t)
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	s := fastSettings()
	s.Health.Brownout = spannerme.BrownoutSettings{Window: time.Second, ProbeInterval: 100 * time.Millisecond}
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(300*time.Millisecond, time.Second, e1.Addr(), e2.Addr()),
	}), s)
	waitServedBy(t, context.Background(), gme, "E1", 10*time.Second)
	e1.Slow(200*time.Millisecond, 0)
	srv := httptest.NewServer(Handler(gme))
	defer srv.Close()

	browser := newBrowser(t, chromium)
	if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	row := `section[data-group="default"] tr[data-endpoint="` + e1.Addr() + `"]`
	deadline := time.Now().Add(30 * time.Second)
	for {
		badges, err := chromedp.Run(browser, chromedp.Evaluate[int](`document.querySelectorAll('`+row+` .badge.degraded').length`))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		if badges == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("page shows no degraded badge for E1 30s after it slowed down; status %+v", gme.Status().Groups)
		}
		time.Sleep(200 * time.Millisecond) // a person looking at the page, every 200ms
	}
	// The reason appears once the group no longer counts E1 as Available.
	for {
		reason, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(row+` td.reason`)))
		if err != nil {
			t.Fatalf("reading E1's reason: %v", err)
		}
		if strings.Contains(reason, "degraded (brownout)") && strings.Contains(reason, "far slower than "+e2.Addr()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("page shows E1's reason %q, want it degraded against E2", reason)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The status page, in a real browser (headless Chromium), follows a failover on its own
// (it refreshes itself): the current endpoint it shows changes, with its name (E2 has one,
// E1 none) next to its address, the timeline draws the fallback. The screenshot is saved in
// the test's temporary directory.
func TestStatusPageInBrowser(t *testing.T) {
	chromium := findChromium(t)
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	s := fastSettings()
	s.EndpointOptions = map[string]spannerme.EndpointOptions{e2.Addr(): {Name: "psc-west2"}}
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(300*time.Millisecond, time.Second, e1.Addr(), e2.Addr()),
		"west":    group(300*time.Millisecond, 0, e2.Addr(), e1.Addr()),
	}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	srv := httptest.NewServer(Handler(gme))
	defer srv.Close()

	browser := newBrowser(t, chromium)

	current := chromedp.CSS(`span.current[data-group="default"]`)
	if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	shown, err := chromedp.Run(browser, chromedp.Text(current))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	if shown != e1.Addr() {
		t.Fatalf("page shows current endpoint %q, want E1 %s", shown, e1.Addr())
	}
	summary := chromedp.CSS(`#summary`)
	if line, err := chromedp.Run(browser, chromedp.Text(summary)); err != nil || !strings.HasPrefix(line, "All well") {
		t.Errorf("summary line before the fault: %q (%v), want all well", line, err)
	}
	currentName := `document.querySelector('span.current-name[data-group="default"]')?.textContent ?? ""`
	if name, err := chromedp.Run(browser, chromedp.Evaluate[string](currentName)); err != nil || name != "" {
		t.Errorf("page shows the unnamed E1 with name %q (%v)", name, err)
	}

	e1.Down()
	// The page refreshes itself every 2s; read what it shows until it changes.
	deadline := time.Now().Add(30 * time.Second)
	for shown != e2.Addr() {
		if time.Now().After(deadline) {
			t.Fatalf("page still shows %q 30s after the fault, want E2 %s", shown, e2.Addr())
		}
		time.Sleep(200 * time.Millisecond) // a person looking at the page, every 200ms
		if shown, err = chromedp.Run(browser, chromedp.Text(current)); err != nil {
			// A read that meets the page's own refresh finds its document gone: read again.
			if refreshing(err) {
				continue
			}
			t.Fatalf("reading the page: %v", err)
		}
	}
	name, err := chromedp.Run(browser, chromedp.Evaluate[string](currentName))
	if err != nil {
		t.Fatalf("reading the current endpoint's name: %v", err)
	}
	if name != "psc-west2" {
		t.Errorf("page shows current endpoint %s with name %q, want psc-west2", e2.Addr(), name)
	}
	if line, err := chromedp.Run(browser, chromedp.Text(summary)); err != nil ||
		!strings.Contains(line, "group default is on psc-west2 ("+e2.Addr()+") (priority 1), not its first endpoint") {
		t.Errorf("summary line after the failover: %q (%v), want it to say default is off its first endpoint, on psc-west2", line, err)
	}
	fallbacks, err := chromedp.Run(browser, chromedp.Evaluate[int](`document.querySelectorAll('section[data-group="default"] line.fallback').length`))
	if err != nil {
		t.Fatalf("reading the timeline: %v", err)
	}
	state, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`section[data-group="default"] tr[data-endpoint="`+e1.Addr()+`"] .state`)))
	if err != nil {
		t.Fatalf("reading E1's state: %v", err)
	}
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if fallbacks != 1 {
		t.Errorf("timeline draws %d fallbacks, want 1", fallbacks)
	}
	if state != "Unavailable" {
		t.Errorf("page shows E1 %q, want Unavailable", state)
	}
	path := filepath.Join(t.TempDir(), "status.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot (%d bytes): %s", len(png), path)
	if keep := os.Getenv(envKeepScreenshot); keep != "" {
		if err := os.WriteFile(keep, png, 0o644); err != nil {
			t.Errorf("keeping the screenshot: %v", err)
		}
	}
}

// A screenshot of the page as it first shows (the viewport, no scrolling) has the summary
// line at its top, drawn in the alarm colours when a group is off its first endpoint: the
// pixels inside the line's box are its red background (#ffebe9), and the box is within the
// first 120 pixels, above the rejected edit and the groups.
func TestStatusPageScreenshotShowsSummary(t *testing.T) {
	chromium := findChromium(t)
	now := time.Now()
	st := spannerme.Status{At: now, Started: now.Add(-time.Minute), Default: "default",
		Groups: []spannerme.GroupStatus{{Name: "default", Current: "127.0.0.1:2", Endpoints: []spannerme.EndpointStatus{
			{Endpoint: "127.0.0.1:1", State: spannerme.Unavailable, Since: now.Add(-10 * time.Second)},
			{Endpoint: "127.0.0.1:2", Priority: 1, State: spannerme.Available, Since: now.Add(-time.Minute)}}}},
		Pools: []spannerme.PoolStatus{
			{Endpoint: "127.0.0.1:1", Connectivity: "TRANSIENT_FAILURE", Since: now.Add(-10 * time.Second),
				LastError: &spannerme.ConnError{Kind: spannerme.ConnRefused, Message: "connection refused", At: now.Add(-time.Second)}},
			{Endpoint: "127.0.0.1:2", Name: "psc-west2", Connectivity: "READY", Since: now.Add(-time.Minute)}}}
	srv := httptest.NewServer(Handler(cannedSource(st)))
	defer srv.Close()
	browser := newBrowser(t, chromium)
	type rect struct{ Top, Left, Width, Height float64 }
	if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	text, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS("#summary")))
	if err != nil {
		t.Fatalf("reading the summary line: %v", err)
	}
	box, err := chromedp.Run(browser, chromedp.Evaluate[rect](`(() => { const r = document.getElementById('summary').getBoundingClientRect(); return {Top: r.top, Left: r.left, Width: r.width, Height: r.height}; })()`))
	if err != nil {
		t.Fatalf("reading the summary line's box: %v", err)
	}
	png, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if want := "group default is on psc-west2 (127.0.0.1:2) (priority 1), not its first endpoint."; text != want {
		t.Errorf("summary line %q, want %q", text, want)
	}
	img, err := pngDecode(png)
	if err != nil {
		t.Fatalf("decoding the screenshot: %v", err)
	}
	if box.Top > 120 || box.Height <= 0 {
		t.Errorf("summary line's box %+v: want it at the top of the page", box)
	}
	// A point inside the box, left of the text's end: the line's background.
	x, y := int(box.Left+box.Width-8), int(box.Top+3)
	r, g, b, _ := img.At(x, y).RGBA()
	if r>>8 < 0xf0 || g>>8 < 0xd8 || g>>8 > 0xf2 || b>>8 < 0xd8 || b>>8 > 0xf2 {
		t.Errorf("screenshot pixel (%d,%d) inside the summary line is #%02x%02x%02x, want the alarm background #ffebe9", x, y, r>>8, g>>8, b>>8)
	}
	path := filepath.Join(t.TempDir(), "summary.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot (%d bytes): %s", len(png), path)
}

// pngDecode decodes a screenshot.
func pngDecode(b []byte) (image.Image, error) { return png.Decode(bytes.NewReader(b)) }

// refreshing reports whether err is Chromium's answer to a read that raced the page's
// reload: the document it was evaluated in is gone ("Cannot find context with specified id",
// "Execution context was destroyed").
func refreshing(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") || strings.Contains(msg, "Execution context was destroyed")
}

// framedPage is a page that frames src in an iframe and records when the frame has loaded
// (window.frameLoaded): the framing test page of TestStatusPageInBrowserCannotBeFramed.
const framedPage = `<!DOCTYPE html><html><head><title>framing</title></head><body>
<iframe id="f" src="%s" width="800" height="400" onload="window.frameLoaded = true"></iframe></body></html>`

// frameShows returns what the iframe of framedPage shows, once it has loaded: "framed" when
// its document is the status page (#summary), else what the browser put in its place.
const frameShows = `(() => {
	const f = document.getElementById('f');
	try {
		const d = f.contentDocument;
		if (!d) return 'no document (cross-origin: the error page of the browser)';
		return d.getElementById('summary') ? 'framed' : 'not the page: ' + d.URL;
	} catch (e) { return 'blocked: ' + e.name; }
})()`

// Chromium loads the page under its Content-Security-Policy: the page's inline styles apply
// (the summary line's alarm background), the page is served with the CSP. A framing test
// page of the same origin (which could read the frame's document if it loaded) cannot frame
// the page; the same page framing a copy served without the security headers can, so the
// test would see a page that loads in the frame.
func TestStatusPageInBrowserCannotBeFramed(t *testing.T) {
	chromium := findChromium(t)
	now := time.Now()
	st := spannerme.Status{At: now, Started: now.Add(-time.Minute), Default: "default",
		Groups: []spannerme.GroupStatus{{Name: "default", Current: "127.0.0.1:2", Endpoints: []spannerme.EndpointStatus{
			{Endpoint: "127.0.0.1:1", State: spannerme.Unavailable, Since: now.Add(-10 * time.Second)},
			{Endpoint: "127.0.0.1:2", Priority: 1, State: spannerme.Available, Since: now.Add(-time.Minute)}}}},
		Pools: []spannerme.PoolStatus{{Endpoint: "127.0.0.1:1", Connectivity: "TRANSIENT_FAILURE"}, {Endpoint: "127.0.0.1:2", Connectivity: "READY"}}}
	page := Handler(cannedSource(st))
	mux := http.NewServeMux()
	mux.Handle("/status/", http.StripPrefix("/status", page))
	mux.HandleFunc("/unprotected/", func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		page.ServeHTTP(rec, r)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(rec.Body.Bytes()) // the same page, without its headers
	})
	mux.HandleFunc("/frame", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, framedPage, r.URL.Query().Get("src"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/status/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Get("Content-Security-Policy"); got != CSP {
		t.Fatalf("the page is served with CSP %q, want %q", got, CSP)
	}

	browser := newBrowser(t, chromium)
	if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+"/status/")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	bg, err := chromedp.Run(browser, chromedp.Evaluate[string](`getComputedStyle(document.getElementById('summary')).backgroundColor`))
	if err != nil {
		t.Fatalf("reading the summary line's style: %v", err)
	}
	if bg != "rgb(255, 235, 233)" {
		t.Errorf("the summary line's background is %q under the CSP, want the page's inline style, rgb(255, 235, 233)", bg)
	}

	shown := func(src string) string {
		t.Helper()
		if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+"/frame?src="+src)); err != nil {
			t.Fatalf("opening the framing page: %v", err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			loaded, err := chromedp.Run(browser, chromedp.Evaluate[bool](`window.frameLoaded === true`))
			if err != nil {
				t.Fatalf("reading the framing page: %v", err)
			}
			if loaded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the frame of %s did not load within 30s", src)
			}
			time.Sleep(50 * time.Millisecond) // polling the browser, bounded by the deadline
		}
		what, err := chromedp.Run(browser, chromedp.Evaluate[string](frameShows))
		if err != nil {
			t.Fatalf("reading the frame: %v", err)
		}
		return what
	}
	if what := shown("/unprotected/"); what != "framed" {
		t.Fatalf("the page served without its headers shows %q in the frame, want it framed: the test could not see a framed page", what)
	}
	if what := shown("/status/"); what == "framed" {
		t.Error("the status page was framed")
	} else {
		t.Logf("the frame of the status page shows: %s", what)
	}
}
