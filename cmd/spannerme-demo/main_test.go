package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/testutil"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func runDemo(t *testing.T, args ...string) (*summary, string) {
	t.Helper()
	return runDemoWatched(t, nil, args...)
}

// runDemoWatched runs the demo (status page off unless args say otherwise) and calls watch,
// if not nil, on a goroutine of its own with the output as it grows; watch must return
// once the output says the demo is over.
func runDemoWatched(t *testing.T, watch func(out *testutil.SyncBuffer), args ...string) (*summary, string) {
	t.Helper()
	f, err := parseFlags(append([]string{"-phase", "700ms",
		"-recovery-timeout", "300ms", "-switching-delay", "500ms", "-http", ""}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := &testutil.SyncBuffer{}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if watch != nil {
			watch(out)
		}
	}()
	sum, err := run(ctx, f, out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	out.Write([]byte("\n(demo over)\n"))
	<-watched
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	return sum, out.String()
}

func checkStory(t *testing.T, sum *summary, out string) {
	t.Helper()
	t.Logf("demo output:\n%s", out)
	if !sum.ok() {
		t.Fatalf("demo failed")
	}
	if sum.failover < 300*time.Millisecond || sum.switchBack < 500*time.Millisecond {
		t.Errorf("failover %v (RecoveryTimeout 300ms), switch-back %v (SwitchingDelay 500ms): too early", sum.failover, sum.switchBack)
	}
	for _, want := range []string{"east4 goes DOWN", "failover to psc-east4-fallback", "served by psc-west2: true", "runtime reconfiguration", "switch-back to psc-east4", "result:             OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestDemoInMemory(t *testing.T) {
	// The status page is served while the story plays; read it once the failover happened.
	var page, doc string
	var pageErr error
	url := regexp.MustCompile(`status page: (http://127\.0\.0\.1:[0-9]+/)`)
	sum, out := runDemoWatched(t, func(out *testutil.SyncBuffer) {
		for !strings.Contains(out.String(), "(demo over)") {
			if m := url.FindStringSubmatch(out.String()); m != nil && strings.Contains(out.String(), "failover to") && page == "" {
				page, pageErr = fetch(m[1])
				if pageErr == nil {
					doc, pageErr = fetch(m[1] + "?format=json")
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}, "-http", "127.0.0.1:0")
	checkStory(t, sum, out)
	if pageErr != nil || !strings.Contains(page, `data-group="default"`) || !strings.Contains(page, "<svg") {
		t.Errorf("status page during the demo: %v\n%s", pageErr, page)
	}
	var st spannerme.Status
	if err := json.Unmarshal([]byte(doc), &st); err != nil || len(st.Groups) != 2 {
		t.Errorf("status JSON during the demo: %v\n%s", err, doc)
	}
	// The demo names its endpoints: every pool, and the page, says which PSC endpoint it
	// stands for.
	names := map[string]bool{}
	for _, p := range st.Pools {
		names[p.Name] = true
	}
	for _, want := range []string{"psc-east4", "psc-east4-fallback", "psc-west2"} {
		if !names[want] || !strings.Contains(page, `<span class="name">`+want+`</span>`) {
			t.Errorf("endpoint %s unnamed in the status (pool names %v) or on the page", want, names)
		}
	}
}

// fetch GETs url and returns its body.
func fetch(url string) (string, error) {
	res, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

func TestDemoEmulator(t *testing.T) {
	if _, err := emulator.FindBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the Cloud Spanner emulator is missing: %v", err)
		}
		t.Skipf("SKIPPING the demo against the Cloud Spanner emulator: %v", err)
	}
	sum, out := runDemo(t, "-emulator")
	checkStory(t, sum, out)
}

func TestParseFlags(t *testing.T) {
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	for _, bad := range [][]string{{"-phase", "0s"}, {"-readers", "0", "-writers", "0"}, {"-nope"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	f, err := parseFlags([]string{"-emulator"}, io.Discard)
	if err != nil || f.writers != 1 {
		t.Errorf("-emulator: writers %d, %v; want 1", f.writers, err)
	}
}

func TestLoadConfig(t *testing.T) {
	c, err := loadConfig("") // the embedded default
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.endpointNames(), ","); got != "psc-east4:443,psc-east4-fallback:443,psc-west2:443" {
		t.Errorf("endpoint names %s", got)
	}
	o := c.options(map[string]string{"psc-east4:443": "a:1", "psc-east4-fallback:443": "b:2", "psc-west2:443": "c:3"}, 0, 0)
	if d := o.MultiEndpoints["default"]; o.Default != "default" || d.RecoveryTimeout != time.Second || d.SwitchingDelay != 2*time.Second ||
		strings.Join(d.Endpoints, ",") != "a:1,b:2" {
		t.Errorf("options %+v %+v", o, d)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown field":   "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n    recoveryTime: 1s\n",
		"bad duration":    "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n    recoveryTimeout: soon\n",
		"not yaml at all": "{{{",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadConfig(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The summary names each setting that differs from the defaults, with what the default would
// give, and nothing when none differs.
func TestSummaryNamesNonDefaultSettings(t *testing.T) {
	var b strings.Builder
	(&summary{reconnectMax: 500 * time.Millisecond, switchingDelay: 2 * time.Second, recoveryTimeout: time.Second}).printNonDefaults(&b)
	for _, want := range []string{"ReconnectMaxDelay 500ms (-reconnect-max-delay; default 5s", "up to 4.5s longer",
		"SwitchingDelay 2s (recommended 30s", "RecoveryTimeout 1s (recommended 2s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	(&summary{reconnectMax: defaultReconnectMax, switchingDelay: recommendedSwitchDelay, recoveryTimeout: recommendedRecovery}).printNonDefaults(&b)
	if b.Len() != 0 {
		t.Errorf("defaults reported as differing:\n%s", b.String())
	}
}
