package main

import (
	"strings"
	"testing"

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
