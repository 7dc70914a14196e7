package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A stream of go test -json events: a package that passes with a skipped test, one that
// fails (its failed test's output shown, the passing test's not), one without tests, and a
// line that is not an event. Each package gets its closing line and the running count; the
// last line counts every test.
func TestProgressLines(t *testing.T) {
	const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOne"}
{"Action":"output","Package":"m/a","Test":"TestOne","Output":"=== RUN   TestOne\n"}
{"Action":"pass","Package":"m/a","Test":"TestOne","Elapsed":0.1}
{"Action":"run","Package":"m/a","Test":"TestBrowser"}
{"Action":"output","Package":"m/a","Test":"TestBrowser","Output":"    SKIPPING: Chromium not found\n"}
{"Action":"skip","Package":"m/a","Test":"TestBrowser","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.512s\n"}
{"Action":"pass","Package":"m/a","Elapsed":0.512}
not an event: go: downloading something
{"Action":"run","Package":"m/b","Test":"TestGood"}
{"Action":"output","Package":"m/b","Test":"TestGood","Output":"quiet success\n"}
{"Action":"pass","Package":"m/b","Test":"TestGood"}
{"Action":"run","Package":"m/b","Test":"TestBad"}
{"Action":"output","Package":"m/b","Test":"TestBad","Output":"    bad_test.go:9: want 1, got 2\n"}
{"Action":"output","Package":"m/b","Test":"TestBad/sub","Output":"    sub detail\n"}
{"Action":"fail","Package":"m/b","Test":"TestBad/sub"}
{"Action":"output","Package":"m/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestBad"}
{"Action":"output","Package":"m/b","Output":"FAIL\n"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t0.100s\n"}
{"Action":"fail","Package":"m/b","Elapsed":0.1}
{"Action":"output","Package":"m/c","Output":"?   \tm/c\t[no test files]\n"}
{"Action":"skip","Package":"m/c"}
`
	var out strings.Builder
	p := newProgress(&out, 3)
	p.read(strings.NewReader(stream))
	p.summary()
	got := out.String()
	t.Logf("output:\n%s", got)
	for _, want := range []string{
		"ok  \tm/a\t0.512s\t[1/3] 1 passed, 0 failed, 1 skipped (SKIPPED: TestBrowser)\n",
		"not an event: go: downloading something\n",
		"    bad_test.go:9: want 1, got 2\n",
		"    sub detail\n",
		"--- FAIL: TestBad (0.00s)\n",
		"FAIL\tm/b\t0.100s\t[2/3] 1 passed, 1 failed, 0 skipped\n",
		"?   \tm/c\t[no test files]\t[3/3]\n",
		"2 passed, 1 failed, 1 skipped in 3 packages (",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, unwanted := range []string{"quiet success", "=== RUN   TestOne"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output shows a passing test's output %q", unwanted)
		}
	}
}

// A package that fails to build: its build output is shown with its FAIL line.
func TestProgressBuildFailure(t *testing.T) {
	const stream = `{"ImportPath":"m/d [m/d.test]","Action":"build-output","Output":"# m/d\n"}
{"ImportPath":"m/d [m/d.test]","Action":"build-fail"}
{"Action":"start","Package":"m/d"}
{"Action":"output","Package":"m/d","Output":"FAIL\tm/d [build failed]\n"}
{"Action":"fail","Package":"m/d","Elapsed":0}
`
	var out strings.Builder
	p := newProgress(&out, 0)
	p.read(strings.NewReader(stream))
	if !strings.Contains(out.String(), "# m/d\n") || !strings.Contains(out.String(), "FAIL\tm/d [build failed]\t[1]\n") {
		t.Errorf("output lacks the build failure's line:\n%s", out.String())
	}
}

// After quiet without a line, a line says which test of which package runs and for how long,
// and the package's tests passed so far; a line printed since (or the heartbeat's own) restarts
// the wait; with no test running it says go test is still working. On a test clock.
func TestProgressHeartbeat(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, 2)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := base
	p.now = func() time.Time { return clock }
	p.start, p.last = base, base
	const quiet = 20 * time.Second
	at := func(d time.Duration) time.Time { clock = base.Add(d); return clock }

	at(time.Second)
	p.read(strings.NewReader(`{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestQuick"}
{"Action":"pass","Package":"m/a","Test":"TestQuick"}
{"Action":"run","Package":"m/a","Test":"TestLong"}
{"Action":"run","Package":"m/a","Test":"TestLong/sub"}
`))
	p.heartbeat(at(15*time.Second), quiet)
	if out.Len() != 0 {
		t.Fatalf("a line after 15s of quiet (want none before 20s):\n%s", out.String())
	}
	p.heartbeat(at(21*time.Second), quiet)
	if want := "... 21s: running m/a: TestLong (20s), 1 passed so far\n"; out.String() != want {
		t.Fatalf("heartbeat %q, want %q", out.String(), want)
	}
	out.Reset()
	p.heartbeat(at(30*time.Second), quiet) // 9s after the last line
	if out.Len() != 0 {
		t.Fatalf("a second line 9s after the first:\n%s", out.String())
	}
	p.heartbeat(at(41*time.Second), quiet)
	if !strings.Contains(out.String(), "... 41s: running m/a: TestLong (40s), 1 passed so far\n") {
		t.Fatalf("no second heartbeat 20s after the first:\n%s", out.String())
	}
	out.Reset()
	at(50 * time.Second)
	p.read(strings.NewReader(`{"Action":"pass","Package":"m/a","Test":"TestLong/sub"}
{"Action":"pass","Package":"m/a","Test":"TestLong"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t49s\n"}
{"Action":"pass","Package":"m/a","Elapsed":49}
`))
	p.heartbeat(at(65*time.Second), quiet) // 15s after the package's line
	if strings.Contains(out.String(), "...") {
		t.Fatalf("a heartbeat 15s after a package's line:\n%s", out.String())
	}
	p.heartbeat(at(71*time.Second), quiet)
	if !strings.Contains(out.String(), "... 1m11s: waiting for go test") {
		t.Fatalf("no heartbeat without a running test:\n%s", out.String())
	}
}
