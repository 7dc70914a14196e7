package main

import (
	"context"
	"encoding/json"
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
		"east down:     hello from spannerme - served by the fallback: true",
		"failed over:   current endpoint is the fallback: true",
		"group default current east-fallback",
		"0 east          Unavailable",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestREADMEQuickStartCompiles: the code of the README's quick start compiles as it is
// written, against this module (built as a package of its own through a go build overlay,
// so nothing is written into the tree).
func TestREADMEQuickStartCompiles(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Quick start\n")
	if !ok {
		t.Fatal("README.md has no \"## Quick start\" section")
	}
	_, block, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatal("the README's quick start has no go code block")
	}
	code, _, ok := strings.Cut(block, "```\n")
	if !ok {
		t.Fatal("the README's quick start code block is not closed")
	}
	if head, _, _ := strings.Cut(section, "\n## "); !strings.Contains(head, code) {
		t.Fatal("the go code block found is not in the quick start section")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "quickstart.go")
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	// A package directory that does not exist in the tree: the overlay alone holds its file.
	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(root, "internal", "readmequickstart", "quickstart.go"): src}})
	if err != nil {
		t.Fatal(err)
	}
	ovl := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovl, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-overlay", ovl, "./internal/readmequickstart")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's quick start does not compile: %v\n%s", err, out)
	}
}
