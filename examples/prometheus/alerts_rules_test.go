package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// Prometheus's own rule tests (alerts_test.yaml, run by promtool) show each alert of
// alerts.yaml firing on the first event of its kind, within its `for`, and not before. promtool
// comes from Debian's prometheus package (.ci/run installs it); without it the test skips,
// except under CI=true, where it fails.
func TestAlertRulesFireOnFirstEvent(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found (apt-get install prometheus); CI runs the alert rule tests")
		}
		t.Skip("promtool not found (apt-get install prometheus)")
	}
	// Every alert of alerts.yaml has a test case.
	rules, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) < 6 {
		t.Fatalf("alerts.yaml: %d alerts, want at least 6", len(alerts))
	}
	for _, a := range alerts {
		if !regexp.MustCompile(`alertname: ` + regexp.QuoteMeta(a[1]) + `\n\s+exp_alerts:\n\s+- exp_labels`).Match(tests) {
			t.Errorf("alerts_test.yaml has no case where %s fires", a[1])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "test", "rules", "alerts_test.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules alerts_test.yaml: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
