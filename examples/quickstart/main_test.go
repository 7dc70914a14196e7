package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// TestReadmeQuickstart: docs/quickstart.md holds this main.go, verbatim.
func TestReadmeQuickstart(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(main)+"```\n") {
		t.Error("docs/quickstart.md does not hold examples/quickstart/main.go verbatim in a go code block")
	}
	if strings.Contains(string(main), "/internal/") {
		t.Error("the quick start imports an internal package")
	}
}

// TestQuickstartRuns builds the quick start as a user would and runs it: it must work
// offline as it is.
func TestQuickstartRuns(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "quickstart")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "SPANNER_EMULATOR_HOST=") // the quick start must not be redirected
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
	for _, want := range []string{
		"default group: hello from spannerme - current endpoint is east: true",
		"west group:    hello from spannerme - served by west: true",
		"east down:     hello from spannerme - current endpoint is the fallback: true",
		"group default current east-fallback",
		"0 east          Unavailable",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
