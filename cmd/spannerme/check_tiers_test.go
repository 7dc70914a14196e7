package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A group with tiers (a nested list in endpoints) is checked endpoint by endpoint as any
// other; the table and the JSON report say each endpoint's tier; a bad tier list is a bad
// configuration file (exit 2) naming the field.
func TestCheckTiers(t *testing.T) {
	b := inMemory(t)
	b.config = writeConfig(t, fmt.Sprintf("default: default\nmultiEndpoints:\n  default: {endpoints: [[%s, %s], %s]}\n",
		b.e[0].Addr(), b.e[1].Addr(), b.e[2].Addr()))
	out, _, code := b.check(t)
	if code != exitOK {
		t.Fatalf("exit %d, want 0\n%s", code, out)
	}
	for i, want := range []string{"0 (tier 0)", "1 (tier 0)", "2 (tier 1)"} {
		if w := "default " + want + " " + b.e[i].Addr(); !strings.Contains(squash(out), w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	out, _, _ = b.check(t, "--json")
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for i, e := range rep.Groups[0].Endpoints {
		if want := []int{0, 0, 1}[i]; e.Tier == nil || *e.Tier != want {
			t.Errorf("endpoint %d: tier %v, want %d", i, e.Tier, want)
		}
	}

	bad := writeConfig(t, fmt.Sprintf("default: default\nmultiEndpoints:\n  default: {endpoints: [[%s], []]}\n", b.e[0].Addr()))
	_, errOut, code := cli(t, nil, "check", "--config", bad, "--database", b.database, "--plaintext", "--no-auth")
	if code != exitBadArgs || !strings.Contains(errOut, "multiEndpoints.default.endpoints[1]: empty tier") {
		t.Errorf("empty tier: exit %d, stderr %q; want 2 naming the field", code, errOut)
	}
}
