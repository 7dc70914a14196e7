package doccheck

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's install section works as written before publication: in a fresh module, its
// `go mod` commands (the clone replaced by this repository) let a program importing spannerme
// build. Offline (GOPROXY=off, GOSUMDB=off): every module comes from the module cache,
// checked against the repository's own go.sum when the repository's own tidy has run first
// (go mod tidy -diff: it changes nothing, fetches only what the cache lacks, and fails when
// the repository is not tidy). Without that, a fresh machine's cache holds only what a build
// needed, not every go.mod and test dependency in the graph that tidy reads; without GOSUMDB=off, tidy asks sum.golang.org for each module the
// fresh module's empty go.sum lacks, and fails on a machine that reaches the module proxy
// but not the checksum database.
func TestREADMEInstallBeforePublication(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\\*\\*Before the first release\\*\\*.*?```sh\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no sh block after **Before the first release**")
	}
	script := strings.ReplaceAll(string(m[1]), "\\\n", " ")
	if !strings.Contains(script, "git clone https://github.com/spannerme/spanner-multiendpoint ../spanner-multiendpoint") {
		t.Fatalf("the block no longer clones into ../spanner-multiendpoint:\n%s", script)
	}
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	// The clone: this repository, at the path the README clones to.
	if err := os.Symlink(root, filepath.Join(dir, "spanner-multiendpoint")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(app, "main.go"), `package main

import (
	"fmt"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

func main() { fmt.Println(spannerme.ErrClosed) }
`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = app
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	graph := exec.CommandContext(ctx, "go", "mod", "tidy", "-diff")
	graph.Dir, graph.Env = root, append(os.Environ(), "GOWORK=off")
	if out, err := graph.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy -diff in %s: %v\n%s", root, err, out)
	}
	goCmd("mod", "init", "example.com/app")
	ran := 0
	for _, line := range strings.Split(script, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "go" || f[1] != "mod" {
			continue
		}
		goCmd(f[1:]...)
		ran++
	}
	if ran < 2 {
		t.Fatalf("ran %d go mod commands of the README, want its go mod edit and go mod tidy:\n%s", ran, script)
	}
	goCmd("build", "-o", filepath.Join(dir, "app.bin"), ".")
}
