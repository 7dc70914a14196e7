package spannerme

import (
	"net"
	"sort"
	"strings"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"google.golang.org/grpc"
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

// dialOptionsFor returns the dial options of endpoint e's pool: the GCPMultiEndpoint's, then
// those of its EndpointOptions. gme.updateMu must be held.
func (gme *GCPMultiEndpoint) dialOptionsFor(e string) []grpc.DialOption {
	eo, ok := gme.endpointOpts[e]
	if !ok || eo.Authority == "" {
		return gme.dialOpts
	}
	return append(append([]grpc.DialOption(nil), gme.dialOpts...), grpc.WithAuthority(eo.Authority))
}

// noteDialed records the options the pools of fresh endpoints were dialed with and forgets
// those of endpoints gone. gme.updateMu must be held.
func (gme *GCPMultiEndpoint) noteDialed(fresh map[string]*pool, want map[string]bool) {
	if gme.dialedOpts == nil {
		gme.dialedOpts = make(map[string]EndpointOptions)
	}
	for e := range fresh {
		gme.dialedOpts[e] = gme.endpointOpts[e]
	}
	for e := range gme.dialedOpts {
		if !want[e] {
			delete(gme.dialedOpts, e)
		}
	}
}

// updateWithEndpointOptions is UpdateMultiEndpoints that also replaces the endpoint options
// (Settings.EndpointOptions) new pools are dialed with. Pools already dialed keep theirs:
// it returns, sorted, the configured endpoints whose pool was dialed with options other than
// those of eo (they apply once the endpoint is removed and added again, or at a restart).
// On error nothing changes. Errors as for UpdateMultiEndpoints, and a *ConfigError for eo.
func (gme *GCPMultiEndpoint) updateWithEndpointOptions(meOpts *grpcgcp.GCPMultiEndpointOptions, eo map[string]EndpointOptions) (stale []string, err error) {
	cfg, err := parseConfig(meOpts)
	if err != nil {
		return nil, err
	}
	opts, err := parseEndpointOptions(eo)
	if err != nil {
		return nil, err
	}
	cfg.collapseTo(gme.settings.emulator)
	gme.updateMu.Lock()
	defer gme.updateMu.Unlock()
	old := gme.endpointOpts
	gme.endpointOpts = opts
	if err := gme.apply(cfg); err != nil {
		gme.endpointOpts = old
		return nil, err
	}
	for e, dialed := range gme.dialedOpts {
		if dialed != opts[e] {
			stale = append(stale, e)
		}
	}
	sort.Strings(stale)
	return stale, nil
}
