package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Each thing the tests need is announced: found, or missing with how to get it (and that
// its tests will skip, or fail under CI=true), and after the tests whether they ran,
// skipped or failed.
func TestReport(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "binary")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	emu, chromium := announced{report, "SPANNER_EMULATOR_BIN"}, announced{reportBrowser, "CHROMIUM_BIN"}
	for _, tc := range []struct {
		announced
		bin, ci string
		after   bool
		want    []string
	}{
		{emu, "/nonexistent", "", false, []string{"Cloud Spanner emulator NOT FOUND: the tests that need it will SKIP", `SPANNER_EMULATOR_BIN="/nonexistent"`, "gcloud components install"}},
		{emu, "/nonexistent", "true", false, []string{"will FAIL, since CI=true"}},
		{emu, "/nonexistent", "", true, []string{"NOTE: the emulator suites were SKIPPED", "/nonexistent"}},
		{emu, "/nonexistent", "true", true, []string{"the emulator suites failed (CI=true)"}},
		{emu, fake, "", false, []string{"Cloud Spanner emulator: " + fake + " (the emulator suites run)"}},
		{emu, fake, "", true, []string{"emulator suites ran against " + fake}},
		{chromium, "/nonexistent", "", false, []string{"Chromium NOT FOUND: the status page's browser tests will SKIP", "/nonexistent", "apt-get install chromium"}},
		{chromium, "/nonexistent", "true", false, []string{"will FAIL, since CI=true"}},
		{chromium, "/nonexistent", "", true, []string{"NOTE: the status page's browser tests were SKIPPED"}},
		{chromium, "/nonexistent", "true", true, []string{"browser tests failed (CI=true)"}},
		{chromium, fake, "", false, []string{"Chromium: " + fake + " (the status page's browser tests run)"}},
		{chromium, fake, "", true, []string{"browser tests ran with " + fake}},
	} {
		t.Setenv(tc.env, tc.bin)
		t.Setenv("CI", tc.ci)
		var b strings.Builder
		tc.report(&b, tc.after)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s=%s, CI=%q, after %v: output lacks %q:\n%s", tc.env, tc.bin, tc.ci, tc.after, w, b.String())
			}
		}
	}
}

// announced is one thing announced: its report function and the variable naming its binary.
type announced struct {
	report func(io.Writer, bool)
	env    string
}

// make test and make race say whether the emulator suites ran also when the tests fail (as
// they do under CI=true without the emulator), and exit with the tests' failure. A stand-in
// for go fails "go test" and runs everything else with the real go.
func TestMakeReportsAfterFailingTests(t *testing.T) {
	for _, target := range []string{"test", "race"} {
		out, err := makeWithStandInGo(t, target, "echo 'FAIL (stand-in go test)'; exit 3", "SPANNER_EMULATOR_BIN=/nonexistent", "CI=true")
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Errorf("make %s with failing tests: %v, want a failure exit\n%s", target, err, out)
		}
		for _, want := range []string{"will FAIL, since CI=true", "FAIL (stand-in go test)", "the emulator suites failed (CI=true)"} {
			if !strings.Contains(out, want) {
				t.Errorf("make %s: output lacks %q:\n%s", target, want, out)
			}
		}
	}
}

// make test runs the tests through test-progress: with a stand-in for go whose "go test"
// prints one package's events, make prints that package's line with the running count, the
// closing count, and the announcements of the emulator and the browser.
func TestMakeTestShowsProgress(t *testing.T) {
	events := filepath.Join(t.TempDir(), "events.json")
	if err := os.WriteFile(events, []byte(`{"Action":"run","Package":"m/a","Test":"TestOne"}
{"Action":"pass","Package":"m/a","Test":"TestOne"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.500s\n"}
{"Action":"pass","Package":"m/a","Elapsed":0.5}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := makeWithStandInGo(t, "test", "cat '"+events+"'")
	if err != nil {
		t.Fatalf("make test: %v\n%s", err, out)
	}
	for _, want := range []string{"ok  \tm/a\t0.500s\t[1/", "] 1 passed, 0 failed, 0 skipped\n", "1 passed, 0 failed, 0 skipped in 1 packages", "Cloud Spanner emulator", "Chromium"} {
		if !strings.Contains(out, want) {
			t.Errorf("make test: output lacks %q:\n%s", want, out)
		}
	}
}

// makeWithStandInGo runs make target in the repository with GO set to a stand-in for go
// that runs testScript (sh) for "go test" and the real go for everything else, with env
// added to the environment; it returns make's output. It skips the test without make or go.
func makeWithStandInGo(t *testing.T, target, testScript string, env ...string) (string, error) {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	fake := filepath.Join(t.TempDir(), "go")
	// "exit" after testScript: falling through would run the real go test ./..., this test
	// among them, again.
	script := "#!/bin/sh\nif [ \"$1\" = test ]; then " + testScript + "; exit; fi\nexec '" + goBin + "' \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mk, "-C", root, target, "GO="+fake)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
