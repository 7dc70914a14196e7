// Package endpointname checks the endpoints a configuration names and gives each the form that
// is its identity (spannerme's groups, tiers, endpoint options and configuration file).
package endpointname

import (
	"net"
	"strconv"
	"strings"
	"unicode"
)

// gRPC name-resolver schemes accepted as endpoint targets
// (https://github.com/grpc/grpc/blob/master/doc/naming.md).
var targetSchemes = []string{"dns:", "passthrough:", "unix:", "unix-abstract:"}

// Normalize checks one configured endpoint and returns the form used as its identity:
//
//   - "host:port" and "[v6]:port" are kept as they are;
//   - gRPC target URIs ("dns:///host:port", "passthrough:///addr", "unix:path",
//     "unix-abstract:name") are kept as they are;
//   - "https://host[:port]" becomes "host:port" (port 443 when absent).
//
// Anything else returns a non-empty problem.
func Normalize(e string) (normalized, problem string) {
	if e == "" {
		return "", "empty endpoint"
	}
	if strings.IndexFunc(e, unicode.IsSpace) >= 0 {
		return "", "endpoint contains white space"
	}
	for _, s := range targetSchemes {
		if strings.HasPrefix(e, s) {
			if len(strings.Trim(e[len(s):], "/")) == 0 {
				return "", "gRPC target has no address"
			}
			return e, ""
		}
	}
	if rest, ok := strings.CutPrefix(e, "https://"); ok {
		rest = strings.TrimSuffix(rest, "/")
		if strings.Contains(rest, "/") {
			return "", "an https:// endpoint may not have a path"
		}
		if _, _, err := net.SplitHostPort(rest); err != nil {
			rest = net.JoinHostPort(strings.Trim(rest, "[]"), "443")
		}
		if p := CheckHostPort(rest); p != "" {
			return "", p
		}
		return rest, ""
	}
	if strings.Contains(e, "://") {
		return "", "unsupported scheme (use host:port, https://host[:port], or a dns:, passthrough: or unix: gRPC target)"
	}
	if p := CheckHostPort(e); p != "" {
		return "", p
	}
	return e, ""
}

// CheckHostPort returns what is wrong with hp as "host:port" (a port from 1 to 65535), or "".
func CheckHostPort(hp string) string {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "not host:port (" + err.Error() + ")"
	}
	if host == "" {
		return "missing host"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "port " + strconv.Quote(port) + " is not a number from 1 to 65535"
	}
	return ""
}
