// Command spannerme-demo runs the main job of spannerme on an embedded default: an in-memory
// Spanner (or, with -emulator, the real Cloud Spanner emulator), three fake PSC endpoints on
// loopback (psc-east4, psc-east4-fallback, psc-west2) in front of it, and one Spanner client
// configured from demo-config.yaml (built into the binary; -config reads another). Under a steady read/write load it prints a live
// timeline and plays a story: east4 goes down (failover), a query is routed to "west", the
// configuration changes at runtime, east4 comes back (switch-back after SwitchingDelay). It
// ends with a summary and exits 1 if any application call failed or any acknowledged write
// is missing. Meanwhile it serves the live status page (package spannerme/statuspage) on
// http://127.0.0.1:8080/ (flag -http), whose address it prints at start.
//
// Usage:
//
//	go run ./cmd/spannerme-demo [flags]
//
// Run with -h for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"
)

type flags struct {
	config          string
	emulator        bool
	phase           time.Duration
	readers         int
	writers         int
	recoveryTimeout time.Duration
	switchingDelay  time.Duration
	reconnectMax    time.Duration
	verbose         bool
	http            string
}

func parseFlags(args []string, out io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("spannerme-demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.config, "config", "", "MultiEndpoint configuration (YAML); endpoint names are mapped to fake PSC endpoints on 127.0.0.1 (\"\": the embedded demo-config.yaml, so the binary runs from any directory)")
	fs.BoolVar(&f.emulator, "emulator", false, "use the real Cloud Spanner emulator (emulator_main from the gcloud SDK, or $SPANNER_EMULATOR_BIN) instead of the in-memory Spanner")
	fs.DurationVar(&f.phase, "phase", 3*time.Second, "how long each calm part of the story lasts")
	fs.IntVar(&f.readers, "readers", 4, "goroutines running queries through the default MultiEndpoint")
	fs.IntVar(&f.writers, "writers", -1, "goroutines running read-write transactions through the default MultiEndpoint (-1: 2, or 1 with -emulator, which fails concurrent read-write transactions with \"Transaction not found\" even for a plain client)")
	fs.DurationVar(&f.recoveryTimeout, "recovery-timeout", 0, "override every group's RecoveryTimeout (0: keep the file's)")
	fs.DurationVar(&f.switchingDelay, "switching-delay", 0, "override every group's SwitchingDelay (0: keep the file's)")
	fs.DurationVar(&f.reconnectMax, "reconnect-max-delay", 500*time.Millisecond, "Settings.ReconnectMaxDelay: the longest wait between reconnect attempts to a down endpoint")
	fs.BoolVar(&f.verbose, "v", false, "also print spannerme's INFO log lines (WARN and above are always printed)")
	fs.StringVar(&f.http, "http", "127.0.0.1:8080", "serve the live status page (package spannerme/statuspage) on this address; \"\" turns it off")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spannerme-demo [flags]\n\n"+
			"Runs a Spanner client over three fake PSC endpoints under load and plays a failover story.\n"+
			"Exits 0 if no application call failed and every acknowledged write is present exactly once.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if f.writers < 0 {
		f.writers = 2
		if f.emulator {
			f.writers = 1
		}
	}
	if f.phase <= 0 || f.readers < 0 || f.readers+f.writers == 0 {
		return nil, errors.New("-phase must be positive and there must be at least one reader or writer")
	}
	return f, nil
}

func main() {
	f, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spannerme-demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	sum, err := run(ctx, f, os.Stdout, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spannerme-demo:", err)
		os.Exit(1)
	}
	if !sum.ok() {
		os.Exit(1)
	}
}
