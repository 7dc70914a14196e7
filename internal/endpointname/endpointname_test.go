package endpointname

import (
	"strings"
	"testing"
)

func TestEndpointForms(t *testing.T) {
	for in, want := range map[string]string{
		"psc-east4:443":             "psc-east4:443",
		"[::1]:9010":                "[::1]:9010",
		"https://psc-east4":         "psc-east4:443",
		"https://psc-east4:8443/":   "psc-east4:8443",
		"https://[::1]":             "[::1]:443",
		"dns:///psc-east4:443":      "dns:///psc-east4:443",
		"passthrough:///10.0.0.1:1": "passthrough:///10.0.0.1:1",
		"unix:/tmp/spanner.sock":    "unix:/tmp/spanner.sock",
	} {
		got, problem := Normalize(in)
		if problem != "" || got != want {
			t.Errorf("Normalize(%q) = %q, %q; want %q", in, got, problem, want)
		}
	}
}

func TestBadEndpoints(t *testing.T) {
	for in, want := range map[string]string{
		"":                "empty endpoint",
		"h :1":            "white space",
		"dns:///":         "no address",
		"https://h/x":     "may not have a path",
		"http://h:1":      "unsupported scheme",
		"h":               "not host:port",
		":1":              "missing host",
		"h:0":             "is not a number from 1 to 65535",
		"https://h:70000": "is not a number from 1 to 65535",
	} {
		got, problem := Normalize(in)
		if got != "" || !strings.Contains(problem, want) {
			t.Errorf("Normalize(%q) = %q, %q; want a problem containing %q", in, got, problem, want)
		}
	}
}
