// Command test-progress runs go test with -json and prints a line per package as it
// finishes, with a running count, so that `make test` is not silent for minutes:
//
//	go run ./internal/cmd/test-progress [-go GO] -- [go test flags] ./...
//
// Each package's line starts with go test's own closing line for it ("ok  \tpkg\t1.2s",
// "FAIL\tpkg\t1.2s", "?   \tpkg\t[no test files]"), so whatever reads go test's output
// still finds it, followed by the count of packages finished and its tests: passed, failed,
// skipped (with the names of the skipped ones, which go test hides behind "ok"). The output
// of failed tests, and of a package that failed outside its tests (a build error, a panic,
// a timeout), is printed in full before its line. The last line counts every test:
// "376 passed, 0 failed, 2 skipped in 41 packages (3m31s)". Lines that are not test2json
// events (go test's own errors) are printed as they come.
//
// Its exit status is go test's. The event format is cmd/test2json's (go doc test2json).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"time"
)

func main() {
	goBin := flag.String("go", "go", "the go command")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, *goBin, flag.Args(), os.Stdout, os.Stderr))
}

// run runs go test -json with args and reports on stdout; it returns go test's exit status.
func run(ctx context.Context, goBin string, args []string, stdout, stderr io.Writer) int {
	total := countPackages(ctx, goBin, args)
	cmd := exec.CommandContext(ctx, goBin, append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "test-progress: %v\n", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "test-progress: %v\n", err)
		return 1
	}
	p := newProgress(stdout, total)
	p.read(out)
	err = cmd.Wait()
	p.summary()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(stderr, "test-progress: %v\n", err)
		return 1
	}
	return 0
}

// countPackages returns how many packages go test will report for args (those of its
// arguments that do not start with "-" are the patterns), or 0 if go list fails.
func countPackages(ctx context.Context, goBin string, args []string) int {
	var patterns []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			// go test's flags that take a separate value.
			if !strings.Contains(a, "=") && (a == "-timeout" || a == "-run" || a == "-count" || a == "-bench" ||
				a == "-skip" || a == "-p" || a == "-parallel" || a == "-tags" || a == "-cpu" || a == "-benchtime") {
				i++
			}
			continue
		}
		patterns = append(patterns, a)
	}
	out, err := exec.CommandContext(ctx, goBin, append([]string{"list"}, patterns...)...).Output()
	if err != nil {
		return 0
	}
	return bytes.Count(out, []byte("\n"))
}

// event is one test2json event.
type event struct {
	Time       time.Time
	ImportPath string // of build-output and build-fail events
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
}

// pkgState is what is known of one package while its tests run.
type pkgState struct {
	passed, failed, skipped int
	skippedNames            []string
	testOutput              map[string]*strings.Builder // by test, until it ends
	failedOutput            strings.Builder             // the output of its failed tests
	pkgOutput               strings.Builder             // output outside any test
	closing                 string                      // go test's closing line for it
}

// progress turns events into lines. Not safe for concurrent use.
type progress struct {
	w                       io.Writer
	total, done             int
	passed, failed, skipped int
	pkgs                    map[string]*pkgState
	start                   time.Time
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, pkgs: map[string]*pkgState{}, start: time.Now()}
}

// read handles every line of r.
func (p *progress) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			fmt.Fprintf(p.w, "%s\n", line)
			continue
		}
		p.handle(ev)
	}
}

func (p *progress) pkg(name string) *pkgState {
	s := p.pkgs[name]
	if s == nil {
		s = &pkgState{testOutput: map[string]*strings.Builder{}}
		p.pkgs[name] = s
	}
	return s
}

// handle takes one event.
func (p *progress) handle(ev event) {
	if ev.Action == "build-output" { // a compiler's error: shown at once
		io.WriteString(p.w, ev.Output)
		return
	}
	if ev.Package == "" {
		return
	}
	s := p.pkg(ev.Package)
	switch {
	case ev.Test != "" && ev.Action == "output":
		b := s.testOutput[ev.Test]
		if b == nil {
			b = &strings.Builder{}
			s.testOutput[ev.Test] = b
		}
		b.WriteString(ev.Output)
	case ev.Test != "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
		out := s.testOutput[ev.Test]
		delete(s.testOutput, ev.Test)
		sub := strings.Contains(ev.Test, "/") // subtests count in their parent
		switch ev.Action {
		case "pass":
			if !sub {
				s.passed++
			}
		case "fail":
			if !sub {
				s.failed++
			}
			if out != nil {
				s.failedOutput.WriteString(out.String())
			}
		case "skip":
			if !sub {
				s.skipped++
				s.skippedNames = append(s.skippedNames, ev.Test)
			}
		}
	case ev.Test == "" && ev.Action == "output":
		if isClosingLine(ev.Output, ev.Package) {
			s.closing = strings.TrimRight(ev.Output, "\n")
		} else {
			s.pkgOutput.WriteString(ev.Output)
		}
	case ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
		p.finish(ev, s)
	}
}

// isClosingLine reports whether out is go test's closing line for pkg.
func isClosingLine(out, pkg string) bool {
	for _, prefix := range []string{"ok  \t", "FAIL\t", "?   \t"} {
		if strings.HasPrefix(out, prefix+pkg+"\t") || strings.HasPrefix(out, prefix+pkg+" ") {
			return true
		}
	}
	return false
}

// finish prints a finished package.
func (p *progress) finish(ev event, s *pkgState) {
	p.done++
	p.passed += s.passed
	p.failed += s.failed
	p.skipped += s.skipped
	if ev.Action == "fail" {
		io.WriteString(p.w, s.failedOutput.String())
		for _, b := range s.testOutput { // tests that never ended (a panic, a timeout)
			io.WriteString(p.w, b.String())
		}
		io.WriteString(p.w, s.pkgOutput.String())
	}
	closing := s.closing
	if closing == "" {
		switch ev.Action {
		case "pass":
			closing = fmt.Sprintf("ok  \t%s\t%.3fs", ev.Package, ev.Elapsed)
		case "fail":
			closing = fmt.Sprintf("FAIL\t%s", ev.Package)
		default:
			closing = fmt.Sprintf("?   \t%s\t[no test files]", ev.Package)
		}
	}
	count := fmt.Sprintf("[%d]", p.done)
	if p.total > 0 {
		count = fmt.Sprintf("[%d/%d]", p.done, p.total)
	}
	tests := ""
	if s.passed+s.failed+s.skipped > 0 {
		tests = fmt.Sprintf(" %d passed, %d failed, %d skipped", s.passed, s.failed, s.skipped)
		if len(s.skippedNames) > 0 {
			sort.Strings(s.skippedNames)
			tests += " (SKIPPED: " + strings.Join(s.skippedNames, ", ") + ")"
		}
	}
	fmt.Fprintf(p.w, "%s\t%s%s\n", closing, count, tests)
	delete(p.pkgs, ev.Package)
}

// summary prints the count of every test.
func (p *progress) summary() {
	fmt.Fprintf(p.w, "%d passed, %d failed, %d skipped in %d packages (%s)\n",
		p.passed, p.failed, p.skipped, p.done, time.Since(p.start).Round(time.Second))
}
