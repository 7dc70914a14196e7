// Command cli-emulator (`make emulator`) starts the Cloud Spanner emulator for the command
// line: an instance, a database with the schema and rows of testdata/ (the Accounts table),
// and a configuration file whose one group lists the emulator; then it prints the flags
// with which `spannerme check` and `spannerme query` use them, and runs until interrupted
// (Ctrl-C), when it stops the emulator and removes the file.
//
//	make emulator                       # or: go run ./internal/cmd/cli-emulator
//	go run ./cmd/spannerme check <the flags it printed>
//
// It needs the emulator binary (internal/emulator.FindBinary says where it looks) and is
// run from the repository (it reads testdata/). Exit status: 0 after an interrupt, 1 when
// the emulator cannot be started.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

func main() {
	dir := flag.String("dir", "", "where to write spannerme.yaml (kept); default: a temporary directory, removed at exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, *dir, os.Stdout, os.Stderr))
}

// run starts the emulator, prints the flags, and waits for ctx to end.
func run(ctx context.Context, dir string, stdout, stderr io.Writer) int {
	ddl, err := fixture.Schema()
	if err != nil {
		fmt.Fprintf(stderr, "cli-emulator: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "starting the Cloud Spanner emulator...")
	emu, err := emulator.Start(ctx, emulator.Options{DDL: ddl})
	if err != nil {
		fmt.Fprintf(stderr, "cli-emulator: %v\n", err)
		return 1
	}
	defer emu.Close()
	if err := seed(ctx, emu); err != nil {
		fmt.Fprintf(stderr, "cli-emulator: seeding the database: %v\n", err)
		return 1
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "spannerme-emulator-"); err != nil {
			fmt.Fprintf(stderr, "cli-emulator: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
	}
	config := filepath.Join(dir, "spannerme.yaml")
	content := fmt.Sprintf("# Written by `make emulator`: one group whose one endpoint is the emulator.\n"+
		"default: default\nmultiEndpoints:\n  default:\n    endpoints: ['%s']\n    recoveryTimeout: 2s\n"+
		"endpoints:\n  '%[1]s': {name: emulator}\n", emu.Addr())
	if err := os.WriteFile(config, []byte(content), 0o644); err != nil {
		fmt.Fprintf(stderr, "cli-emulator: %v\n", err)
		return 1
	}
	flags := strings.Join([]string{"--config", config, "--database", emu.DatabasePath(), "--plaintext", "--no-auth"}, " ")
	fmt.Fprintf(stdout, `Cloud Spanner emulator on %s: database %s (the Accounts table of testdata/).
Configuration file: %s

  go run ./cmd/spannerme check %s
  go run ./cmd/spannerme query %[4]s --sql "SELECT AccountId, Region, Balance FROM Accounts ORDER BY AccountId LIMIT 5"

FLAGS: %[4]s
Ctrl-C stops the emulator.
`, emu.Addr(), emu.DatabasePath(), config, flags)
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping the emulator")
	return 0
}

// seed writes the rows of testdata/seed.sql.
func seed(ctx context.Context, emu *emulator.Emulator) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client, err := fixture.NewClient(ctx, emu.Addr(), emu.DatabasePath())
	if err != nil {
		return err
	}
	defer client.Close()
	return fixture.Seed(ctx, client)
}
