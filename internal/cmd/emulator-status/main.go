// Command emulator-status says, before and after `make test`, whether the Cloud Spanner
// emulator and the browser (Chromium, for the status page's browser tests) were found, and
// so whether the tests that need them run or skip. go test ./... shows nothing of a package
// that passes, skipped tests included, so without this a missing emulator or browser would
// go unnoticed.
//
//	go run ./internal/cmd/emulator-status          # before the tests
//	go run ./internal/cmd/emulator-status -after   # after them: a one-line reminder
//
// It always exits 0: under CI=true the emulator and browser tests fail by themselves.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spannerme/spanner-multiendpoint/internal/browser"
	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
)

func main() {
	after := flag.Bool("after", false, "print the reminder shown after the tests")
	flag.Parse()
	report(os.Stdout, *after)
	reportBrowser(os.Stdout, *after)
}

// need is what some tests need, and the words that announce it found or missing.
type need struct {
	find                     func() (string, error)
	found, ranWith           string // "<found>: BIN (<...>)", "<ranWith> BIN"
	missing, failed, skipped string // the thing NOT FOUND; after: failed (CI=true), skipped
	testsWill, skippedWhat   string // "the tests that need it will", "(their packages still print ok)"
	install                  string // how to get it
}

var emulatorNeed = need{
	find:        emulator.FindBinary,
	found:       "Cloud Spanner emulator: %s (the emulator suites run)",
	ranWith:     "emulator suites ran against %s",
	missing:     "Cloud Spanner emulator NOT FOUND",
	failed:      "the emulator suites failed (CI=true)",
	skipped:     "NOTE: the emulator suites were SKIPPED",
	testsWill:   "the tests that need it will",
	skippedWhat: "(their packages still print ok)",
	install: `Install it with "gcloud components install cloud-spanner-emulator" (or the package
google-cloud-cli-spanner-emulator), or set ` + emulator.EnvBinary + ` to the path of emulator_main.`,
}

var browserNeed = need{
	find:        browser.Find,
	found:       "Chromium: %s (the status page's browser tests run)",
	ranWith:     "browser tests ran with %s",
	missing:     "Chromium NOT FOUND",
	failed:      "the status page's browser tests failed (CI=true)",
	skipped:     "NOTE: the status page's browser tests were SKIPPED",
	testsWill:   "the status page's browser tests will",
	skippedWhat: "(their package still prints ok)",
	install:     "To run them, " + browser.Install + ".",
}

// report prints where the emulator is, or loudly that it is missing.
func report(w io.Writer, after bool) { announce(w, emulatorNeed, after) }

// reportBrowser prints where the browser of the status page's browser tests is, or loudly
// that it is missing.
func reportBrowser(w io.Writer, after bool) { announce(w, browserNeed, after) }

// announce prints, before the tests (after false) where n is or a banner saying that it is
// missing and what its tests will do, and after them a one-line reminder.
func announce(w io.Writer, n need, after bool) {
	bin, err := n.find()
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	switch {
	case err == nil && after:
		fmt.Fprintf(w, n.ranWith+"\n", bin)
	case err == nil:
		fmt.Fprintf(w, n.found+"\n", bin)
	case after && ci:
		fmt.Fprintf(w, "%s: %s: %v\n", n.missing, n.failed, err)
	case after:
		fmt.Fprintf(w, "%s %s: %v\n", n.skipped, n.skippedWhat, err)
	default:
		what := "SKIP " + n.skippedWhat
		if ci {
			what = "FAIL, since CI=true"
		}
		fmt.Fprintf(w, `==============================================================================
%s: %s %s.
  %v
%s
==============================================================================
`, n.missing, n.testsWill, what, err, n.install)
	}
}
