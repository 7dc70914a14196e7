package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func TestParseFlags(t *testing.T) {
	f, err := parseFlags([]string{"-seed", "5", "-duration", "30m", "-emulator", "-no-frontends"}, io.Discard)
	if err != nil || f.seed != 5 || f.duration != 30*time.Minute || !f.emulator || !f.noFrontends {
		t.Errorf("parseFlags = %+v, %v", f, err)
	}
	f, err = parseFlags(nil, io.Discard)
	if err != nil || f.seed == 0 || f.duration != 2*time.Minute {
		t.Errorf("defaults: %+v, %v; want a random non-zero seed and 2m", f, err)
	}
	for _, bad := range [][]string{{"-nope"}, {"-duration", "soon"}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-h"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "Usage: spannerme-chaos") {
		t.Errorf("-h: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"-duration", "1s"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "shorter than") {
		t.Errorf("-duration 1s: exit %d, stderr %q; want 2 and the reason", code, errOut.String())
	}
	out.Reset()
	if code := run([]string{"-plan", "-seed", "3", "-duration", "20s"}, &out, &errOut); code != 0 ||
		!strings.HasPrefix(out.String(), "schedule of seed 3, duration 20s, frontend faults true") || strings.Count(out.String(), "\n") < 10 {
		t.Errorf("-plan: exit %d, output:\n%s", code, out.String())
	}
}
