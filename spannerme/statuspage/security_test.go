package statuspage

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// Every answer of the page and of the readiness handler, errors included, carries the CSP,
// the anti-framing header and the others of SecurityHeaders.
func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	src := cannedSource(readyStatus(spannerme.Unavailable))
	want := map[string]string{
		"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Cache-Control":           "no-store",
		"Referrer-Policy":         "no-referrer",
	}
	for _, tc := range []struct {
		name, method, path string
		h                  http.Handler
		code               int
	}{
		{"page", http.MethodGet, "/", Handler(src), http.StatusOK},
		{"page, HEAD", http.MethodHead, "/", Handler(src), http.StatusOK},
		{"JSON", http.MethodGet, "/?format=json", Handler(src), http.StatusOK},
		{"page, POST", http.MethodPost, "/", Handler(src), http.StatusMethodNotAllowed},
		{"ready, not ready", http.MethodGet, "/", Ready(src), http.StatusServiceUnavailable},
		{"ready", http.MethodGet, "/", Ready(src, "west"), http.StatusOK},
		{"ready, POST", http.MethodPost, "/", Ready(src), http.StatusMethodNotAllowed},
		{"host refused", http.MethodGet, "/", AllowHosts(Handler(src), "localhost"), http.StatusMisdirectedRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := get(t, tc.h, tc.method, tc.path, "")
			if res.StatusCode != tc.code {
				t.Errorf("status %d, want %d", res.StatusCode, tc.code)
			}
			for k, v := range want {
				if got := res.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
}

// AllowHosts passes the hosts listed, on any port or on the one given, and refuses others
// (a DNS-rebinding page's own name among them) with 421 before the handler sees them.
func TestAllowHosts(t *testing.T) {
	calls := 0
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ })
	h := AllowHosts(inner, "localhost", "127.0.0.1", "::1", "Status.Internal:8081", "[fd00::1]:9464")
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"localhost", true}, {"localhost:8081", true}, {"LOCALHOST:1", true}, {"127.0.0.1:8081", true}, {"[::1]:8081", true},
		{"status.internal:8081", true}, {"[fd00::1]:9464", true},
		{"status.internal:8082", false}, {"status.internal", false}, {"[fd00::1]:9465", false},
		{"evil.example:8081", false}, {"localhost.evil.example:8081", false}, {"127.0.0.2:8081", false}, {"", false},
	} {
		calls = 0
		req := httptest.NewRequest(http.MethodGet, "http://x/", nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := rec.Code == http.StatusOK && calls == 1; got != tc.ok {
			t.Errorf("Host %q: status %d, handler called %d times; want allowed %v", tc.host, rec.Code, calls, tc.ok)
		}
		if !tc.ok && rec.Code != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: status %d, want 421", tc.host, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	AllowHosts(inner).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/", nil))
	if rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("no hosts allowed: status %d, want 421", rec.Code)
	}
}
