package spannerme

import (
	"net"
	"sort"
	"strings"
)

// EndpointOptions are options of one endpoint's channel pool (Settings.EndpointOptions,
// the endpoints section of a configuration file). The zero value dials the endpoint as any
// other.
type EndpointOptions struct {
	// Authority, if not empty, replaces the endpoint's address as the gRPC authority: the
	// ":authority" header and, with TLS, the server name sent (SNI) and checked against the
	// server's certificate (grpc.WithAuthority; grpc-go, ClientConn.getServerName). A PSC
	// endpoint dialed by IP address, or by a private DNS name, needs the name on the Spanner
	// API's certificate, e.g. "spanner.googleapis.com" or "spanner.us-east4.rep.googleapis.com"
	// (googleapis/go-sql-spanner#546). It is "host" or "host:port". Empty means the endpoint's
	// own host. It must not contradict a ServerName set in the transport credentials (gRPC
	// then fails the dial).
	Authority string
}

// endpointOptions is a validated Settings.EndpointOptions, by normalized endpoint. It is
// never modified once built.
type endpointOptions map[string]EndpointOptions

// parseEndpointOptions validates m and returns it keyed by normalized endpoint. Errors are
// *ConfigError, wrapping ErrInvalidConfig, naming the endpoint.
func parseEndpointOptions(m map[string]EndpointOptions) (endpointOptions, error) {
	out := make(endpointOptions, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n, problem := normalizeEndpoint(k)
		if problem != "" {
			return nil, configErr("", k, -1, "EndpointOptions: %s", problem)
		}
		if prev, dup := out[n]; dup && prev != m[k] {
			return nil, configErr("", k, -1, "EndpointOptions: the same endpoint is given twice with different options")
		}
		if p := checkAuthority(m[k].Authority); p != "" {
			return nil, configErr("", k, -1, "EndpointOptions: Authority %q: %s", m[k].Authority, p)
		}
		out[n] = m[k]
	}
	return out, nil
}

// checkAuthority returns why a is not a usable authority ("host" or "host:port"), or "".
func checkAuthority(a string) string {
	if a == "" {
		return ""
	}
	if strings.ContainsAny(a, " \t\r\n/@?#") {
		return "not a host or host:port (white space, '/', '@', '?' or '#')"
	}
	if strings.Contains(a, ":") && !(strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]")) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return "not a host or host:port (" + err.Error() + ")"
		}
		return checkHostPort(a)
	}
	return ""
}
