package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// An endpoint with a name (endpoints.<endpoint>.name) is shown as "address (name)" in check's
// table, errors and group summary, carries "name" (and the group "firstName") in --json, and
// is named in query's "served by" line; an endpoint without one is shown by its address alone.
func TestCLIShowsEndpointNames(t *testing.T) {
	b := inMemory(t)
	b.config = writeConfig(t, fmt.Sprintf("default: default\nmultiEndpoints:\n"+
		"  default: {endpoints: [%s, %s], recoveryTimeout: 200ms}\n"+
		"  west: {endpoints: [%s, %s], recoveryTimeout: 200ms}\n"+
		"endpoints:\n  %s: {name: psc-east4}\n  %s: {name: psc-east4-b}\n",
		b.e[0].Addr(), b.e[1].Addr(), b.e[2].Addr(), b.e[0].Addr(), b.e[0].Addr(), b.e[1].Addr()))
	b.e[1].Down()
	out, _, code := b.check(t)
	if code != exitOK {
		t.Errorf("exit %d, want 0", code)
	}
	for _, tc := range []struct{ group, endpoint, name string }{
		{"default", b.e[0].Addr(), "(psc-east4)"}, {"default", b.e[1].Addr(), "(psc-east4-b)"},
		{"west", b.e[2].Addr(), ""}, {"west", b.e[0].Addr(), "(psc-east4)"},
	} {
		l := line(out, tc.group, tc.endpoint)
		f := strings.Fields(l)
		switch {
		case tc.name == "" && len(f) != 10:
			t.Errorf("group %s: unnamed endpoint %s: line %q, want 10 columns (the address alone)", tc.group, tc.endpoint, l)
		case tc.name != "" && (len(f) != 11 || f[3] != tc.name):
			t.Errorf("group %s: endpoint %s: line %q, want its name %s after the address", tc.group, tc.endpoint, l, tc.name)
		}
	}
	for _, want := range []string{
		b.e[1].Addr() + " (psc-east4-b): tcp: dial tcp " + b.e[1].Addr() + ": connect: connection refused",
		"default (default) 1 of 2 endpoints working; calls would go to " + b.e[0].Addr() + " (psc-east4) (checked in",
		"west 2 of 2 endpoints working; calls would go to " + b.e[2].Addr() + " (checked in",
	} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	out, _, code = b.check(t, "--json")
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK {
		t.Fatalf("--json: exit %d, %v", code, err)
	}
	def, west := rep.Groups[0], rep.Groups[1]
	if def.Endpoints[0].Name != "psc-east4" || def.Endpoints[1].Name != "psc-east4-b" || def.FirstName != "psc-east4" ||
		west.Endpoints[0].Name != "" || west.FirstName != "" {
		t.Errorf("names in the report: default %+v, west %+v", def, west)
	}
	var raw struct {
		Groups []struct {
			FirstName *string `json:"firstName"`
			Endpoints []map[string]any
		}
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if _, has := raw.Groups[1].Endpoints[0]["name"]; has || raw.Groups[1].FirstName != nil {
		t.Errorf("the unnamed endpoint %s has a name field in --json: %v", b.e[2].Addr(), raw.Groups[1])
	}

	out, _, code = cli(t, nil, "query", "--config", b.config, "--database", b.database, "--plaintext", "--no-auth",
		"--sql", "SELECT Id FROM Greetings ORDER BY Id")
	want := fmt.Sprintf("served by endpoint %s (psc-east4) of group default, whose current endpoint is %[1]s (psc-east4)", b.e[0].Addr())
	if code != exitOK || !strings.Contains(out, want) {
		t.Errorf("query: exit %d; output lacks %q", code, want)
	}
}
