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
// While nothing has been printed for -quiet (20s by default), it prints a line saying what
// runs: each package with a test running, its longest-running test and how long, and its
// tests passed so far ("... 2m35s: running github.com/x/spannerme: TestSoak (1m40s), 212
// passed so far"), so that a package that runs for minutes is not taken for a hang. go test
// streams one package's events at a time (the others' come when it is done), so the line
// names what go test has reported so far.
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
	"sync"
	"time"
)

func main() {
	goBin := flag.String("go", "go", "the go command")
	quiet := flag.Duration("quiet", 20*time.Second, "print what runs after this long without a line (0: never)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, *goBin, flag.Args(), os.Stdout, os.Stderr, *quiet))
}

// run runs go test -json with args and reports on stdout, with a line saying what runs after
// quiet without one (0: never); it returns go test's exit status.
func run(ctx context.Context, goBin string, args []string, stdout, stderr io.Writer, quiet time.Duration) int {
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
	stopBeats := make(chan struct{})
	beats := sync.WaitGroup{}
	if quiet > 0 {
		beats.Go(func() {
			tick := time.NewTicker(min(quiet/4, time.Second*5))
			defer tick.Stop()
			for {
				select {
				case <-stopBeats:
					return
				case now := <-tick.C:
					p.heartbeat(now, quiet)
				}
			}
		})
	}
	p.read(out)
	close(stopBeats)
	beats.Wait()
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
	running                 map[string]time.Time        // top-level tests running, by name: when they started
}

// progress turns events into lines. Its methods are safe for concurrent use (read and
// heartbeat run on two goroutines).
type progress struct {
	mu                      sync.Mutex // guards every field below
	w                       io.Writer  // stamps last at each write
	total, done             int
	passed, failed, skipped int
	pkgs                    map[string]*pkgState
	start                   time.Time
	last                    time.Time        // when a line was last written
	now                     func() time.Time // time.Now; a test's clock in tests
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{total: total, pkgs: map[string]*pkgState{}, now: time.Now}
	p.w = stampWriter{w, p}
	p.start = p.now()
	p.last = p.start
	return p
}

// stampWriter records the time of each write in p.last; p.mu is held by its callers.
type stampWriter struct {
	w io.Writer
	p *progress
}

func (s stampWriter) Write(b []byte) (int, error) {
	s.p.last = s.p.now()
	return s.w.Write(b)
}

// heartbeat prints what runs if nothing was printed for quiet before now: each package with
// a top-level test running (by name), its longest-running test and how long it has run, and
// its tests passed so far.
func (p *progress) heartbeat(now time.Time, quiet time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.last) < quiet {
		return
	}
	names := make([]string, 0, len(p.pkgs))
	for n, s := range p.pkgs {
		if len(s.running) > 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		s := p.pkgs[n]
		test, since := "", now
		for t, at := range s.running {
			if at.Before(since) || (at.Equal(since) && t < test) {
				test, since = t, at
			}
		}
		parts = append(parts, fmt.Sprintf("%s: %s (%s), %d passed so far", n, test, now.Sub(since).Round(time.Second), s.passed))
	}
	what := "waiting for go test (building, or a package's events held until the one before it ends)"
	if len(parts) > 0 {
		what = "running " + strings.Join(parts, "; ")
	}
	fmt.Fprintf(p.w, "... %s: %s\n", now.Sub(p.start).Round(time.Second), what)
}

// read handles every line of r.
func (p *progress) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		p.mu.Lock()
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			fmt.Fprintf(p.w, "%s\n", line)
		} else {
			p.handle(ev)
		}
		p.mu.Unlock()
	}
}

func (p *progress) pkg(name string) *pkgState {
	s := p.pkgs[name]
	if s == nil {
		s = &pkgState{testOutput: map[string]*strings.Builder{}, running: map[string]time.Time{}}
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
	case ev.Test != "" && ev.Action == "run":
		if !strings.Contains(ev.Test, "/") {
			s.running[ev.Test] = p.now()
		}
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
		delete(s.running, ev.Test)
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
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%d passed, %d failed, %d skipped in %d packages (%s)\n",
		p.passed, p.failed, p.skipped, p.done, time.Since(p.start).Round(time.Second))
}
