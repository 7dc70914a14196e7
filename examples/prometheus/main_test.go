package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// get returns the status and body of path on h.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// The recipe works offline: after a query, /ready answers 200 and /metrics has the series
// the alert rules of docs/production.md query, under the names Prometheus gives them.
func TestPrometheusRecipeServesAlertSeries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sp := spannermetest.NewSpannerTB(t, "CREATE TABLE Greetings (Id INT64 NOT NULL) PRIMARY KEY (Id)")
	east, west := spannermetest.NewEndpointTB(t, sp.Addr()), spannermetest.NewEndpointTB(t, sp.Addr())
	a, err := newApp(ctx, sp.Database(), []namedEndpoint{{"psc-east4", east.Addr()}, {"psc-west2", west.Addr()}}, spannermetest.ClientConfig(), spannermetest.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Client.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil }); err != nil {
		t.Fatalf("query: %v", err)
	}
	if code, body := get(t, a.Mux, "/ready"); code != http.StatusOK {
		t.Errorf("/ready: %d %q, want 200", code, body)
	}
	code, body := get(t, a.Mux, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`spannerme_multiendpoint_current_endpoint{`,
		`spannerme_endpoint_priority="0"`,
		`spannerme_endpoint_state{`,
		`spannerme_endpoint_state="available"`,
		`spannerme_client_calls_total{`,
		`spannerme_client_call_duration_seconds_bucket{`,
		`spannerme_multiendpoint="default"`,
		`spannerme_endpoint_name="psc-east4"`,
		`spannerme_endpoint_name="psc-west2"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The current endpoint, priority 0, reads 1.
	found := false
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "spannerme_multiendpoint_current_endpoint{") && strings.Contains(l, `spannerme_endpoint_priority="0"`) {
			found = strings.HasSuffix(l, " 1")
		}
	}
	if !found {
		t.Errorf("current_endpoint of priority 0 is not 1:\n%s", body)
	}
	east.Down()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := get(t, a.Mux, "/metrics")
		if code == 200 && strings.Contains(body, `spannerme_endpoint_priority="1"`) && strings.Contains(lineOf(body, `spannerme_endpoint_priority="1"`), "} 1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the first endpoint went down, no current endpoint of priority 1:\n%s", body)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lineOf returns the current_endpoint line containing s.
func lineOf(body, s string) string {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "spannerme_multiendpoint_current_endpoint{") && strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// The alert rules parse, every rule has an alert name, an expression and a summary, and
// every metric and label they query is one that /metrics serves (the ejections counter is
// served at 0 from the pool's start; the unknown-group counter only appears at the first call
// naming an unknown group: it is checked by its name in spannerme's metric table,
// docs/observability.md). docs/production.md holds the file verbatim.
func TestAlertRulesQueryServedSeries(t *testing.T) {
	raw, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil || len(rules.Groups) != 1 || len(rules.Groups[0].Rules) < 5 {
		t.Fatalf("alerts.yaml: %v, %+v", err, rules)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sp := spannermetest.NewSpannerTB(t, "CREATE TABLE T (Id INT64 NOT NULL) PRIMARY KEY (Id)")
	e := spannermetest.NewEndpointTB(t, sp.Addr())
	a, err := newApp(ctx, sp.Database(), []namedEndpoint{{"psc-east4", e.Addr()}}, spannermetest.ClientConfig(), spannermetest.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Client.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil }); err != nil {
		t.Fatalf("query: %v", err)
	}
	_, scrape := get(t, a.Mux, "/metrics")
	observability, err := os.ReadFile(filepath.Join("..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`spannerme_[a-z_]+`)
	for _, r := range rules.Groups[0].Rules {
		if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" {
			t.Errorf("rule %+v lacks an alert name, an expression or a summary", r)
		}
		for _, n := range names.FindAllString(r.Expr, -1) {
			// The unknown-group counter appears at the first call naming an unknown group:
			// the metric table must name it instead.
			if doc, ok := map[string]string{"spannerme_client_unknown_group_calls_total": "`spannerme.client.unknown_group_calls`"}[n]; ok {
				if !strings.Contains(string(observability), doc) {
					t.Errorf("%s: %s is not in the metric table", r.Alert, doc)
				}
				continue
			}
			if !strings.Contains(scrape, n) {
				t.Errorf("%s: %s is not served by /metrics", r.Alert, n)
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "production.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```yaml\n"+string(raw)+"```\n") {
		t.Error("docs/production.md does not hold examples/prometheus/alerts.yaml verbatim in a yaml code block")
	}
}
