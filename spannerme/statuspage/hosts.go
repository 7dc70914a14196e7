package statuspage

import (
	"net"
	"net/http"
	"strings"
)

// AllowHosts returns a handler that passes to h the requests whose Host header names one of
// hosts, and answers every other one 421 Misdirected Request (with SecurityHeaders), h never
// seeing it. It keeps a page served on loopback from being read through DNS rebinding: a
// page of another site whose name has been made to resolve to 127.0.0.1 reaches the port, but
// its requests carry that site's name as Host.
//
// An entry without a port ("localhost", "127.0.0.1", "::1", "status.internal") allows that
// host on any port; an entry with one ("localhost:8081", "[::1]:8081") allows only that
// port. Names compare without regard to case; IPv6 addresses may be written with or without
// brackets. A Kubernetes probe sends the pod's IP address and port as Host: list them (or
// leave Ready outside the allow-list). With no hosts, every request is refused. The handler
// is safe for concurrent use when h is, and keeps nothing between requests.
func AllowHosts(h http.Handler, hosts ...string) http.Handler {
	a := allowHosts{h: h, any: map[string]bool{}, exact: map[string]bool{}}
	for _, e := range hosts {
		e = strings.ToLower(strings.TrimSpace(e))
		if host, port, err := net.SplitHostPort(e); err == nil {
			a.exact[net.JoinHostPort(strings.Trim(host, "[]"), port)] = true
		} else {
			a.any[strings.Trim(e, "[]")] = true
		}
	}
	return a
}

type allowHosts struct {
	h          http.Handler
	any, exact map[string]bool // hosts on any port; host:port
}

func (a allowHosts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.allowed(r.Host) {
		a.h.ServeHTTP(w, r)
		return
	}
	SecurityHeaders(w.Header())
	http.Error(w, "misdirected request: this host name is not served here", http.StatusMisdirectedRequest)
}

// allowed reports whether the Host header host is on the list.
func (a allowHosts) allowed(host string) bool {
	host = strings.ToLower(host)
	name, port, err := net.SplitHostPort(host)
	if err != nil { // no port
		return a.any[strings.Trim(host, "[]")]
	}
	return a.any[name] || a.exact[net.JoinHostPort(name, port)]
}
