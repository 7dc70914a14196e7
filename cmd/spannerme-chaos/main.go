// Command spannerme-chaos is the chaos soak of spannerme: a multi-endpoint Spanner client over
// three fake PSC endpoints in front of ONE backend (the in-memory spannertest, or with
// -emulator the Cloud Spanner emulator), two groups, a load of read-write transfers, exactly-once
// inserts, point reads, streaming queries and routed queries, and a seeded schedule of faults:
// endpoints down and up, connections reset, blackholes (loud and silent), slow links,
// reconfigurations that add, remove and reorder endpoints, gRPC frontend faults when the
// build has frontends, and short phases with every endpoint down.
//
// It prints the seed, the topology, the schedule as it is applied and a timeline, then a table
// of invariants and a summary line that starts with "lost: N". It exits 1 if any invariant
// fails, 2 on bad flags or a failed setup. Everything runs on 127.0.0.1.
//
// Usage:
//
//	make chaos [DURATION=2m] [SEED=n] [ARGS=-emulator]
//	go run -race ./cmd/spannerme-chaos [flags]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/chaos"
)

type flags struct {
	seed        uint64
	duration    time.Duration
	emulator    bool
	interval    time.Duration
	plan        bool
	health      bool
	noFrontends bool
	verbose     bool
}

func parseFlags(args []string, out io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("spannerme-chaos", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the schedule and the load's choices (0: a random seed, printed)")
	fs.DurationVar(&f.duration, "duration", 2*time.Minute, "length of the run, warm-up and cool-down included (at least "+chaos.MinDuration.String()+")")
	fs.BoolVar(&f.emulator, "emulator", false, "use the Cloud Spanner emulator (emulator_main from the gcloud SDK, or $SPANNER_EMULATOR_BIN) instead of the in-memory Spanner")
	fs.DurationVar(&f.interval, "interval", 0, "timeline period (0: duration/120, at least 1s)")
	fs.BoolVar(&f.noFrontends, "no-frontends", false, "TCP fakes straight in front of the backend: no gRPC frontend, no frontend fault, no GOAWAY storm")
	fs.BoolVar(&f.plan, "plan", false, "print the schedule the seed and duration give, and exit")
	fs.BoolVar(&f.health, "health", chaos.HealthDetectionDefault, "the client ejects endpoints from call outcomes: bound failed calls under silent faults instead of only counting them")
	fs.BoolVar(&f.verbose, "v", false, "also print spannerme's own log lines (stderr)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spannerme-chaos [flags]\n\n"+
			"Chaos soak: random faults under read-write load over three fake PSC endpoints in front of ONE backend,\n"+
			"then a table of invariants. Exits 0 if every invariant holds, 1 if one fails, 2 on bad flags or setup.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.duration < chaos.MinDuration {
		return nil, fmt.Errorf("-duration %v is shorter than %v", f.duration, chaos.MinDuration)
	}
	if f.seed == 0 {
		f.seed = 1 + rand.Uint64N(1<<31-1) // never 0, which means "pick one"
	}
	return f, nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "spannerme-chaos:", err)
		return 2
	}
	if f.plan {
		p, err := chaos.NewPlan(f.seed, f.duration, !f.noFrontends)
		if err != nil {
			fmt.Fprintln(stderr, "spannerme-chaos:", err)
			return 2
		}
		p.Print(stdout)
		return 0
	}
	races := watchRaces()
	if races != nil {
		defer races() // the real stderr back, whatever happens
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.DiscardHandler)
	if f.verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	cfg := chaos.Config{Seed: f.seed, Duration: f.duration, Emulator: f.emulator, Out: stdout, Logger: logger,
		Interval: f.interval, NoFrontends: f.noFrontends, HealthDetection: f.health, RaceReports: races}
	cfg.Reproduce = fmt.Sprintf("make chaos SEED=%d DURATION=%v", f.seed, f.duration)
	if f.emulator {
		cfg.Reproduce += " ARGS=-emulator"
	}
	r, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "spannerme-chaos:", err)
		return 2
	}
	if !r.OK() {
		return 1
	}
	return 0
}
