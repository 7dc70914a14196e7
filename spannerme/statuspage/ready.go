package statuspage

import (
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// Ready returns an http.Handler for a readiness probe (a Kubernetes readinessProbe's
// httpGet, a load balancer's health check): it answers 200 OK with the body "ready\n" while
// every group of src (or, when groups are given, each group named) has an Available
// endpoint, so that its calls are served now or after at most the group's RecoveryTimeout;
// otherwise 503 Service Unavailable with one line per group that has none, naming its
// endpoints and why each is not available (as spannerme.Explain writes it):
//
//	not ready: group "default" has no available endpoint: endpoint 10.0.0.5:443 (priority 0): Unavailable, pool TRANSIENT_FAILURE, last connection error 1.2s ago: refused: ...
//
// After src is closed (Status.Closed) it answers 503 with "closed\n"; a closed
// GCPMultiEndpoint does not reopen. A group named in groups that src does not have makes it
// answer 503 naming the group (a configuration mistake that never heals by itself). A
// GCPMultiEndpoint just created is not ready until an endpoint of each group has connected.
//
// The body is text/plain, sent with the headers of SecurityHeaders (CSP included: it quotes
// connection errors, whose text comes from outside the process). It answers GET and HEAD (HEAD:
// the status and headers, no body); any other method gets 405 with an Allow header. It
// calls src.Status once per request and keeps nothing between requests; it is safe for
// concurrent use when src.Status is. A nil src (or one holding a nil pointer) is served as
// a closed one. docs/production.md says where to use it, and why not as a liveness probe:
// a restart does not bring back an endpoint.
func Ready(src Source, groups ...string) http.Handler {
	if isNil(src) {
		src = new(spannerme.GCPMultiEndpoint)
	}
	return readyHandler{src: src, groups: append([]string(nil), groups...)}
}

type readyHandler struct {
	src    Source
	groups []string // the groups that must be available; nil: every group
}

func (h readyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	SecurityHeaders(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	code, body := h.judge(h.src.Status())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	if r.Method == http.MethodGet {
		_, _ = w.Write([]byte(body))
	}
}

// judge returns the status code and body of a readiness answer for st.
func (h readyHandler) judge(st spannerme.Status) (int, string) {
	if st.Closed {
		return http.StatusServiceUnavailable, "closed\n"
	}
	byName := make(map[string]spannerme.GroupStatus, len(st.Groups))
	for _, g := range st.Groups {
		byName[g.Name] = g
	}
	names := h.groups
	if names == nil {
		for _, g := range st.Groups {
			names = append(names, g.Name)
		}
	}
	var problems []string
	for _, name := range names {
		g, ok := byName[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("group %q is not configured", name))
			continue
		}
		if hasAvailable(g) {
			continue
		}
		// Explain names the endpoints of the groups whose current endpoint is down; this
		// group has no available endpoint at all, so it is among them.
		one := st
		one.Groups = []spannerme.GroupStatus{g}
		why := spannerme.Explain(errNotReady, one)
		if why == nil {
			problems = append(problems, fmt.Sprintf("group %q has no available endpoint", name))
			continue
		}
		problems = append(problems, strings.TrimPrefix(why.Error(), errNotReady.Error()+"; spannerme: "))
	}
	if len(problems) == 0 {
		return http.StatusOK, "ready\n"
	}
	return http.StatusServiceUnavailable, "not ready: " + strings.Join(problems, "\nnot ready: ") + "\n"
}

// errNotReady stands for the calls a group with no available endpoint would fail.
var errNotReady = status.Error(codes.Unavailable, "not ready")

// hasAvailable reports whether an endpoint of g is Available.
func hasAvailable(g spannerme.GroupStatus) bool {
	for _, e := range g.Endpoints {
		if e.State == spannerme.Available {
			return true
		}
	}
	return false
}
