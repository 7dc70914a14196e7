package doccheck

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// block is one ```go block of a Markdown file.
type block struct {
	file string // base name, e.g. "production.md"
	n    int    // 1-based ordinal among the file's Go blocks
	line int    // line of its opening fence
	text string
	skip string // the reason of a "<!-- doccheck: not compiled (...) -->" line before the fence
}

// goBlocks returns the ```go blocks of path.
func goBlocks(t *testing.T, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	var prev string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur = &block{file: filepath.Base(path), n: len(out) + 1, line: line}
			if m := regexp.MustCompile(`^<!-- doccheck: not compiled \((.+)\) -->$`).FindStringSubmatch(prev); m != nil {
				cur.skip = m[1]
			}
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
		prev = l
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	packageClause = regexp.MustCompile(`(?m)^package \w+`)
	// leading import declarations of a fragment: `import "x"` or `import ( ... )`.
	importDecl = regexp.MustCompile(`^\s*import (?:"[^"]+"|\((?s:[^)]*)\))\s*`)
)

// source returns the Go file that compiles b: b itself when it is a whole file; else b's
// wrapper, testdata/<file>-<n>.go.txt, with b's leading import declarations at its
// "// IMPORTS" line and the rest at its "// BLOCK" line. The docs' elisions are replaced: a
// line "..." by nothing, "{ ... }" by a panic.
func source(t *testing.T, b block) string {
	t.Helper()
	if packageClause.MatchString(b.text) {
		return b.text
	}
	wrapper, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("%s-%d.go.txt", b.file, b.n)))
	if err != nil {
		t.Fatalf("%s:%d: a fragment needs its wrapper: %v", b.file, b.line, err)
	}
	body, imports := b.text, ""
	for {
		m := importDecl.FindString(body)
		if m == "" {
			break
		}
		imports += m + "\n"
		body = body[len(m):]
	}
	body = regexp.MustCompile(`(?m)^\s*\.\.\.\s*$`).ReplaceAllString(body, "")
	body = strings.ReplaceAll(body, "{ ... }", `{ panic("elided") }`)
	w := string(wrapper)
	if imports != "" {
		if !strings.Contains(w, "// IMPORTS\n") {
			t.Fatalf("%s:%d: the block imports, its wrapper has no // IMPORTS line", b.file, b.line)
		}
		w = strings.Replace(w, "// IMPORTS\n", imports, 1)
	}
	if !strings.Contains(w, "// BLOCK\n") {
		t.Fatalf("%s:%d: its wrapper has no // BLOCK line", b.file, b.line)
	}
	return strings.Replace(w, "// BLOCK\n", body, 1)
}

// Every ```go block of README.md and docs/ compiles: a whole file as it is, a fragment inside
// its wrapper (testdata/), each as its own package of a temporary module that requires this
// one through a replace directive, built offline (GOPROXY=off, GOFLAGS=-mod=mod) from the
// module cache. A block preceded by "<!-- doccheck: not compiled (reason) -->" is listed, not
// built.
func TestDocGoBlocksCompile(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mds, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	mds = append([]string{filepath.Join(root, "README.md")}, mds...)
	dir := t.TempDir()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	const self = "github.com/spannerme/spanner-multiendpoint"
	mod := strings.Replace(string(gomod), "module "+self+"\n", "module doccheck.example\n", 1) +
		fmt.Sprintf("\nrequire %s v0.0.0\n\nreplace %s => %s\n", self, self, root)
	write(t, filepath.Join(dir, "go.mod"), mod)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "go.sum"), string(sum))
	compiled, skipped := 0, 0
	used := map[string]bool{}
	for _, md := range mds {
		for _, b := range goBlocks(t, md) {
			if b.skip != "" {
				t.Logf("%s:%d: not compiled: %s", b.file, b.line, b.skip)
				skipped++
				continue
			}
			used[fmt.Sprintf("%s-%d.go.txt", b.file, b.n)] = true
			pkg := filepath.Join(dir, fmt.Sprintf("b%02d_%s_%d", compiled, strings.TrimSuffix(b.file, ".md"), b.line))
			if err := os.Mkdir(pkg, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(pkg, "block.go"), source(t, b))
			compiled++
		}
	}
	// Every wrapper wraps a block: a wrapper left over means the docs' blocks moved.
	wrappers, _ := filepath.Glob(filepath.Join("testdata", "*.go.txt"))
	for _, w := range wrappers {
		if !used[filepath.Base(w)] {
			t.Errorf("%s wraps no Go block of the docs (a block removed or renumbered?)", w)
		}
	}
	if compiled < 15 {
		t.Errorf("only %d Go blocks found in README.md and docs/, want at least 15", compiled)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of the docs' Go blocks: %v\n%s", err, out)
	}
	t.Logf("%d Go blocks of README.md and docs/ compiled, %d not compiled", compiled, skipped)
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
