// Command spannerme checks and uses the endpoints of a spannerme configuration file.
//
//	spannerme check --config FILE --database projects/P/instances/I/databases/D [--json]
//	spannerme query --config FILE --database D [--group NAME] --sql "SELECT 1"
//
// check tests every endpoint of every group step by step (name resolution, TCP, TLS, gRPC,
// one Spanner call, the database) and prints a table, or JSON with --json. query runs one SQL
// query through a group, as an application would, and prints the rows and the endpoint that
// served them. docs/cli.md describes each step, the output and the exit status.
//
// Both use Application Default Credentials and TLS unless --no-auth (no credentials) and
// --plaintext (no TLS) say otherwise, as for the Cloud Spanner emulator; --plaintext is
// refused without --no-auth, so that no credentials cross the network in plaintext.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/compute/metadata"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // a group without a working endpoint; a failed query
	exitBadArgs = 2 // bad flags or configuration file
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `Usage:
  spannerme check --config FILE --database projects/P/instances/I/databases/D [flags]
  spannerme query --config FILE --database D [--group NAME] --sql "SELECT 1" [flags]

check tests every endpoint of every group: name resolution, TCP connect, TLS handshake,
gRPC ready, one Spanner call and the database (SELECT 1 in a session it creates and deletes),
with their latencies. Exit status 0 when every group has a working endpoint, 1 when a group
has none, 2 on a bad configuration file or bad flags.

query runs one query through a group and prints the rows and the endpoint that served them.

Run "spannerme check -h" or "spannerme query -h" for the flags.
`

// run is the command without the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	stdout, stderr = terminal{stdout}, terminal{stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitBadArgs
	}
	switch args[0] {
	case "check":
		return runCheck(ctx, args[1:], stdout, stderr)
	case "query":
		return runQuery(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "spannerme: unknown command %q\n\n%s", args[0], usage)
	return exitBadArgs
}

// common are the flags of every command.
type common struct {
	config, database  string
	plaintext, noAuth bool
	timeout           time.Duration
}

func (c *common) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&c.config, "config", "", "the configuration `file` (YAML or JSON; required)")
	fs.StringVar(&c.database, "database", "", "the database, projects/P/instances/I/databases/D (required)")
	fs.BoolVar(&c.plaintext, "plaintext", false, "no TLS (for the emulator or a plaintext test server); needs --no-auth")
	fs.BoolVar(&c.noAuth, "no-auth", false, "no credentials (for the emulator); default: Application Default Credentials")
	fs.DurationVar(&c.timeout, "timeout", timeout, "time limit, reading the configuration file included")
}

var databasePath = regexp.MustCompile(`^projects/[^/]+/instances/[^/]+/databases/[^/]+$`)

// parse parses the flags and loads the configuration file, within --timeout (a file that
// is not a regular file is refused at once, naming its kind). A non-nil error has been
// printed; the caller exits with exitBadArgs (or exitOK for -h).
func (c *common) parse(ctx context.Context, fs *flag.FlagSet, args []string, stderr io.Writer) (*spannerme.FileConfig, error) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var problems []string
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if c.config == "" {
		problems = append(problems, "--config is required")
	}
	if !databasePath.MatchString(c.database) {
		problems = append(problems, fmt.Sprintf("--database %q is not projects/P/instances/I/databases/D", c.database))
	}
	if c.timeout <= 0 {
		problems = append(problems, "--timeout must be positive")
	}
	if c.plaintext && !c.noAuth {
		// The credentials' token would cross the network in cleartext: gRPC does not
		// refuse it, as Google's credentials do not ask for transport security.
		problems = append(problems, "--plaintext without --no-auth would send the credentials' token in plaintext, "+
			"readable by anyone on the path; add --no-auth (the emulator, a plaintext test server) or drop --plaintext")
	}
	if len(problems) > 0 {
		err := errors.New(strings.Join(problems, "; "))
		fmt.Fprintf(stderr, "spannerme %s: %s\n", fs.Name(), printable(err.Error()))
		return nil, err
	}
	readCtx, cancel := context.WithTimeout(ctx, c.timeout)
	fc, err := spannerme.LoadConfigContext(readCtx, c.config)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "spannerme %s: %s\n", fs.Name(), printable(err.Error()))
		return nil, err
	}
	if c.noAuth {
		// The Spanner client asks the GCE metadata server for its region, which only labels
		// metrics; this command exports none, so it does not ask (an offline check would
		// otherwise wait for, or leave a connection to, a server that is not there). This
		// settles "not on GCE" for the process, so it is done only without credentials:
		// Application Default Credentials on GCE and GKE come from the metadata server, which
		// the credentials look-up asks only on GCE (cloud.google.com/go/auth, DetectDefault).
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		metadata.OnGCEWithContext(ended)
	}
	return fc, nil
}

// badArgs is the exit status for a parse error: 0 for -h, else exitBadArgs.
func badArgs(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitBadArgs
}
