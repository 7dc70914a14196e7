package spannerme

import (
	"fmt"
	"net"
	"sort"
	"strings"

	"github.com/spannerme/spanner-multiendpoint/internal/endpointname"
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
	// Name, if not empty, is what people call the endpoint, such as "psc-east4". It is shown
	// next to the address in Status (EndpointStatus.Name, PoolStatus.Name), on the status
	// page, in log lines (the endpoint_name attribute), as the spannerme.endpoint.name metric
	// attribute and in the CLI. It is a label only: it changes neither routing nor dialing,
	// and it is at most MaxEndpointNameLen ASCII letters, digits, '.', '_' and '-',
	// beginning with a letter or a digit; two endpoints cannot have the same name. Empty
	// means no name: every place shows the address alone.
	//
	// Unlike Authority, a new Name takes effect at once, for a pool already dialed too, when
	// a ConfigWatcher applies a file edit that changes it: it needs no restart. From then on
	// the endpoint's metrics are recorded under the new name (AttrEndpointName), which starts
	// new series; those under the old name stop. A retired pool
	// (draining after its endpoint was removed) keeps the name it had.
	Name string
}

// MaxEndpointNameLen is the longest EndpointOptions.Name, in bytes: 63, the longest DNS label
// (RFC 1035, section 2.3.4), so that a name taken from a PSC endpoint's DNS name fits.
const MaxEndpointNameLen = 63

// dialOnly returns o without what does not concern the dial (Name): the options a pool
// keeps for its whole life.
func (o EndpointOptions) dialOnly() EndpointOptions {
	o.Name = ""
	return o
}

// endpointOptions is a validated Settings.EndpointOptions, by normalized endpoint. It is
// never modified once built.
type endpointOptions map[string]EndpointOptions

// parseEndpointOptions validates m and returns it keyed by normalized endpoint. Errors are
// *ConfigError, wrapping ErrInvalidConfig, naming the endpoint.
func parseEndpointOptions(m map[string]EndpointOptions) (endpointOptions, error) {
	out := make(endpointOptions, len(m))
	named := make(map[string]string) // Name -> normalized endpoint
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n, problem := endpointname.Normalize(k)
		if problem != "" {
			return nil, configErr("", k, -1, "EndpointOptions: %s", problem)
		}
		if prev, dup := out[n]; dup && prev != m[k] {
			return nil, configErr("", k, -1, "EndpointOptions: the same endpoint is given twice with different options")
		}
		if p := checkAuthority(m[k].Authority); p != "" {
			return nil, configErr("", k, -1, "EndpointOptions: Authority %q: %s", m[k].Authority, p)
		}
		if p := checkEndpointName(m[k].Name); p != "" {
			return nil, configErr("", k, -1, "EndpointOptions: Name %q: %s", m[k].Name, p)
		}
		if name := m[k].Name; name != "" {
			if other, taken := named[name]; taken && other != n {
				return nil, configErr("", k, -1, "EndpointOptions: Name %q is also the name of endpoint %q; names must be unique", name, other)
			}
			named[name] = n
		}
		out[n] = m[k]
	}
	return out, nil
}

// checkEndpointName returns why name is not a usable EndpointOptions.Name, or "".
func checkEndpointName(name string) string {
	if name == "" {
		return ""
	}
	if len(name) > MaxEndpointNameLen {
		return fmt.Sprintf("longer than %d bytes", MaxEndpointNameLen)
	}
	for i, c := range name {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		switch {
		case i == 0 && !alnum:
			return fmt.Sprintf("must begin with an ASCII letter or digit, not %q", c)
		case !alnum && c != '.' && c != '_' && c != '-':
			return fmt.Sprintf("%q (byte %d) is not an ASCII letter, digit, '.', '_' or '-'", c, i)
		}
	}
	return ""
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
		return endpointname.CheckHostPort(a)
	}
	return ""
}
