package emulator

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvBinary names the environment variable that holds the path of the
// emulator binary (emulator_main). When it is set and not empty it is the only
// place [FindBinary] looks.
const EnvBinary = "SPANNER_EMULATOR_BIN"

// binaryName is the emulator's file name in the Cloud SDK and on PATH.
const binaryName = "emulator_main"

// ErrBinaryNotFound is wrapped by the errors of [FindBinary] and [Start] when
// the emulator binary does not exist or is not an executable file.
var ErrBinaryNotFound = errors.New("emulator: Cloud Spanner emulator binary not found")

// FindBinary returns the path of the Cloud Spanner emulator binary. It looks,
// in order:
//
//  1. at $SPANNER_EMULATOR_BIN, if set and not empty, and nowhere else;
//  2. in Cloud SDK roots: $CLOUDSDK_ROOT_DIR, the SDK of the gcloud found on
//     PATH (symlinks resolved), /usr/lib/google-cloud-sdk,
//     /usr/share/google-cloud-sdk, /opt/google-cloud-sdk and
//     ~/google-cloud-sdk, each at bin/cloud_spanner_emulator/emulator_main;
//  3. for emulator_main on PATH.
//
// It does not run gcloud (`gcloud info` takes seconds). The returned error
// wraps [ErrBinaryNotFound] and lists the places tried. FindBinary is safe for
// concurrent use.
func FindBinary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%w: %s=%q: %v", ErrBinaryNotFound, EnvBinary, p, err)
		}
		return p, nil
	}
	var tried []string
	for _, root := range sdkRoots() {
		p := filepath.Join(root, "bin", "cloud_spanner_emulator", binaryName)
		if checkExecutable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath(binaryName); err == nil {
		return p, nil
	}
	tried = append(tried, binaryName+" on PATH")
	return "", fmt.Errorf("%w: %s is not set; tried %s", ErrBinaryNotFound, EnvBinary, strings.Join(tried, ", "))
}

// sdkRoots returns candidate Cloud SDK installation directories, most
// specific first, without duplicates.
func sdkRoots() []string {
	var roots []string
	if d := os.Getenv("CLOUDSDK_ROOT_DIR"); d != "" {
		roots = append(roots, d)
	}
	if g, err := exec.LookPath("gcloud"); err == nil {
		if real, err := filepath.EvalSymlinks(g); err == nil {
			roots = append(roots, filepath.Dir(filepath.Dir(real))) // <sdk>/bin/gcloud
		}
	}
	roots = append(roots, "/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "/opt/google-cloud-sdk")
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, "google-cloud-sdk"))
	}
	seen := make(map[string]bool, len(roots))
	out := roots[:0]
	for _, r := range roots {
		if r = filepath.Clean(r); !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// checkExecutable reports why path is not an executable regular file, or nil.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not executable")
	}
	return nil
}
