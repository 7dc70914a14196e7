package main

import (
	"fmt"
	"net"
	"strings"
)

// target is an endpoint as the checks dial it.
type target struct {
	endpoint string // as configured
	grpc     string // what gRPC dials: the endpoint, with https://host[:port] as host:port
	network  string // "tcp" or "unix"
	host     string // tcp: the host name or IP address; unix: the socket's path
	port     string // tcp only
}

// parseTarget reads the endpoint forms spannerme accepts: host:port, [v6]:port,
// https://host[:port], dns:[//server/]host[:port], passthrough:///host:port, unix:path,
// unix://path, unix-abstract:name.
func parseTarget(e string) (target, error) {
	t := target{endpoint: e, grpc: e, network: "tcp"}
	hostPort := e
	switch {
	case strings.HasPrefix(e, "unix-abstract:"):
		t.network, t.host = "unix", "@"+strings.TrimPrefix(e, "unix-abstract:")
		return t, nil
	case strings.HasPrefix(e, "unix://"):
		t.network, t.host = "unix", strings.TrimPrefix(e, "unix://")
		return t, nil
	case strings.HasPrefix(e, "unix:"):
		t.network, t.host = "unix", strings.TrimPrefix(e, "unix:")
		return t, nil
	case strings.HasPrefix(e, "dns:"):
		rest := strings.TrimPrefix(e, "dns:")
		if s, ok := strings.CutPrefix(rest, "//"); ok { // dns://server/host:port: the server is ignored here
			_, rest, _ = strings.Cut(s, "/")
		}
		hostPort = strings.TrimPrefix(rest, "/")
		if _, _, err := net.SplitHostPort(hostPort); err != nil {
			hostPort = net.JoinHostPort(strings.Trim(hostPort, "[]"), "443") // gRPC's DNS default port
		}
	case strings.HasPrefix(e, "passthrough:"):
		hostPort = strings.TrimLeft(strings.TrimPrefix(e, "passthrough:"), "/")
	case strings.HasPrefix(e, "https://"):
		hostPort = strings.TrimSuffix(strings.TrimPrefix(e, "https://"), "/")
		if _, _, err := net.SplitHostPort(hostPort); err != nil {
			hostPort = net.JoinHostPort(strings.Trim(hostPort, "[]"), "443")
		}
		t.grpc = hostPort
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return t, fmt.Errorf("endpoint %q: %w", e, err)
	}
	t.host, t.port = host, port
	return t, nil
}

// isIP reports whether the target's host is an IP address (no name to resolve).
func (t target) isIP() bool { return net.ParseIP(t.host) != nil }
