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

// report prints where the emulator is, or loudly that it is missing.
func report(w io.Writer, after bool) {
	bin, err := emulator.FindBinary()
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	switch {
	case err == nil && after:
		fmt.Fprintf(w, "emulator suites ran against %s\n", bin)
	case err == nil:
		fmt.Fprintf(w, "Cloud Spanner emulator: %s (the emulator suites run)\n", bin)
	case after && ci:
		fmt.Fprintf(w, "Cloud Spanner emulator NOT FOUND: the emulator suites failed (CI=true): %v\n", err)
	case after:
		fmt.Fprintf(w, "NOTE: the emulator suites were SKIPPED (their packages still print ok): %v\n", err)
	default:
		what := "SKIP (their packages still print ok)"
		if ci {
			what = "FAIL, since CI=true"
		}
		fmt.Fprintf(w, `==============================================================================
Cloud Spanner emulator NOT FOUND: the tests that need it will %s.
  %v
Install it with "gcloud components install cloud-spanner-emulator" (or the package
google-cloud-cli-spanner-emulator), or set %s to the path of emulator_main.
==============================================================================
`, what, err, emulator.EnvBinary)
	}
}

// reportBrowser prints where the browser of the status page's browser tests is, or loudly
// that it is missing, as report does for the emulator.
func reportBrowser(w io.Writer, after bool) {
	bin, err := browser.Find()
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	switch {
	case err == nil && after:
		fmt.Fprintf(w, "browser tests ran with %s\n", bin)
	case err == nil:
		fmt.Fprintf(w, "Chromium: %s (the status page's browser tests run)\n", bin)
	case after && ci:
		fmt.Fprintf(w, "Chromium NOT FOUND: the status page's browser tests failed (CI=true): %v\n", err)
	case after:
		fmt.Fprintf(w, "NOTE: the status page's browser tests were SKIPPED (their package still prints ok): %v\n", err)
	default:
		what := "SKIP (their package still prints ok)"
		if ci {
			what = "FAIL, since CI=true"
		}
		fmt.Fprintf(w, `==============================================================================
Chromium NOT FOUND: the status page's browser tests will %s.
  %v
To run them, %s.
==============================================================================
`, what, err, browser.Install)
	}
}
