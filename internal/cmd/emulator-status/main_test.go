package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestReport(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "emulator_main")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bin, ci string
		after   bool
		want    []string
	}{
		{bin: "/nonexistent", want: []string{"Cloud Spanner emulator NOT FOUND: the tests that need it will SKIP", `SPANNER_EMULATOR_BIN="/nonexistent"`, "gcloud components install"}},
		{bin: "/nonexistent", ci: "true", want: []string{"will FAIL, since CI=true"}},
		{bin: "/nonexistent", after: true, want: []string{"NOTE: the emulator suites were SKIPPED", "/nonexistent"}},
		{bin: "/nonexistent", ci: "true", after: true, want: []string{"the emulator suites failed (CI=true)"}},
		{bin: fake, want: []string{"Cloud Spanner emulator: " + fake + " (the emulator suites run)"}},
		{bin: fake, after: true, want: []string{"emulator suites ran against " + fake}},
	} {
		t.Setenv("SPANNER_EMULATOR_BIN", tc.bin)
		t.Setenv("CI", tc.ci)
		var b strings.Builder
		report(&b, tc.after)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("bin %s, CI=%q, after %v: output lacks %q:\n%s", tc.bin, tc.ci, tc.after, w, b.String())
			}
		}
	}
}

// The browser is announced as the emulator is: found, or missing with how to get it, and
// after the tests whether its tests ran, skipped or failed (CI=true).
func TestReportBrowser(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bin, ci string
		after   bool
		want    []string
	}{
		{bin: "/nonexistent", want: []string{"Chromium NOT FOUND: the status page's browser tests will SKIP", "/nonexistent", "apt-get install chromium"}},
		{bin: "/nonexistent", ci: "true", want: []string{"will FAIL, since CI=true"}},
		{bin: "/nonexistent", after: true, want: []string{"NOTE: the status page's browser tests were SKIPPED"}},
		{bin: "/nonexistent", ci: "true", after: true, want: []string{"browser tests failed (CI=true)"}},
		{bin: fake, want: []string{"Chromium: " + fake + " (the status page's browser tests run)"}},
		{bin: fake, after: true, want: []string{"browser tests ran with " + fake}},
	} {
		t.Setenv("CHROMIUM_BIN", tc.bin)
		t.Setenv("CI", tc.ci)
		var b strings.Builder
		reportBrowser(&b, tc.after)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("bin %s, CI=%q, after %v: output lacks %q:\n%s", tc.bin, tc.ci, tc.after, w, b.String())
			}
		}
	}
}

// make test and make race say whether the emulator suites ran also when the tests fail (as
// they do under CI=true without the emulator), and exit with the tests' failure. A stand-in
// for go fails "go test" and runs everything else with the real go.
func TestMakeReportsAfterFailingTests(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	fake := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\nif [ \"$1\" = test ]; then echo 'FAIL (stand-in go test)'; exit 3; fi\nexec '" + goBin + "' \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"test", "race"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, mk, "-C", root, target, "GO="+fake)
		cmd.Env = append(os.Environ(), "SPANNER_EMULATOR_BIN=/nonexistent", "CI=true")
		out, err := cmd.CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Errorf("make %s with failing tests: %v, want a failure exit\n%s", target, err, out)
		}
		for _, want := range []string{"will FAIL, since CI=true", "FAIL (stand-in go test)", "the emulator suites failed (CI=true)"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("make %s: output lacks %q:\n%s", target, want, out)
			}
		}
	}
}
