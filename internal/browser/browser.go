// Package browser finds the Chromium binary that the status page's browser test drives
// (spannerme/statuspage/browser_test.go), for that test and for the banner of `make test`
// (internal/cmd/emulator-status), so both look in the same places.
package browser

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// EnvBinary names the browser binary; unset or empty, Find looks up Names on PATH.
const EnvBinary = "CHROMIUM_BIN"

// Names are the binaries Find looks for on PATH, in order: Debian's chromium package,
// other distributions' name, Google Chrome.
var Names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// ErrNotFound is wrapped by Find's error when no browser is found.
var ErrNotFound = errors.New("browser: no Chromium found")

// Install says how to get a browser.
const Install = "install Debian's chromium package (`apt-get install chromium`; .ci/run does) or set " + EnvBinary

// Find returns the path of the browser: $CHROMIUM_BIN (looked up on PATH if it has no
// slash) if set, else the first of Names on PATH. Its error wraps ErrNotFound and names
// what it looked for. Safe for concurrent use.
func Find() (string, error) {
	names := Names
	if p := os.Getenv(EnvBinary); p != "" {
		names = []string{p}
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (looked for %v)", ErrNotFound, names)
}
