package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
