package spannerme

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/spannerme/spanner-multiendpoint/internal/observe"
)

// nameAttrOf returns, for every data point of instrument name, the value of
// AttrEndpointName ("" when absent) by the value of AttrEndpoint. A point of one endpoint
// with two different names (or with and without one) is reported as "<several>".
func nameAttrOf(rm metricdata.ResourceMetrics, name string) map[string]string {
	out := map[string]string{}
	m, _ := find(rm, name)
	add := func(set attribute.Set) {
		e, _ := set.Value(AttrEndpoint)
		n, _ := set.Value(AttrEndpointName)
		if prev, seen := out[e.AsString()]; seen && prev != n.AsString() {
			out[e.AsString()] = "<several>"
			return
		}
		out[e.AsString()] = n.AsString()
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			add(dp.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			add(dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			add(dp.Attributes)
		}
	}
	return out
}

// A named endpoint shows its name next to its address in Status (and its JSON), in its log
// lines and on its metrics; an endpoint without a name shows its address alone: no empty
// name field, log attribute or metric attribute.
func TestEndpointNameShownWithAddress(t *testing.T) {
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	logs := &syncBuffer{}
	reader, mp := newMetricReader()
	s := fastSettings(logs)
	s.MeterProvider = mp
	s.EndpointOptions = map[string]EndpointOptions{e1.Addr(): {Name: "psc-east4"}}
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(200*time.Millisecond, 0, e1.Addr(), e2.Addr())}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "E1", 10*time.Second)
	waitConnected(t, gme, e2.Addr())
	e1.Down()
	waitServedBy(t, ctx, gme, "E2", 10*time.Second)

	st := gme.Status()
	want := map[string]string{e1.Addr(): "psc-east4", e2.Addr(): ""}
	for _, e := range st.Groups[0].Endpoints {
		if e.Name != want[e.Endpoint] {
			t.Errorf("EndpointStatus %s: Name %q, want %q", e.Endpoint, e.Name, want[e.Endpoint])
		}
	}
	for _, p := range st.Pools {
		if p.Name != want[p.Endpoint] {
			t.Errorf("PoolStatus %s: Name %q, want %q", p.Endpoint, p.Name, want[p.Endpoint])
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Groups []struct{ Endpoints []map[string]any }
		Pools  []map[string]any
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	for _, m := range append(j.Pools, j.Groups[0].Endpoints...) {
		name, has := m["name"]
		if wantName := want[m["endpoint"].(string)]; has != (wantName != "") || (has && name != wantName) {
			t.Errorf("JSON %v: name %v (present %v), want %q", m, name, has, wantName)
		}
	}

	// Log lines: the pool's transitions and the switch. E1 may log down and up more than
	// once: a connection whose handshake was under way through the fake when it went down
	// can become READY an instant after the others closed (seen under a loaded -race run);
	// every line about E1 names it.
	e1Lines := logLines(logs, "endpoint="+e1.Addr())
	if named := logLines(logs, "endpoint="+e1.Addr(), "endpoint_name=psc-east4"); len(named) != len(e1Lines) {
		t.Errorf("%d of %d lines about %s name it psc-east4:\n%s", len(named), len(e1Lines), e1.Addr(), logs)
	}
	for _, tc := range []struct {
		parts []string
		n     int
	}{
		{[]string{"endpoint up", "endpoint=" + e1.Addr(), "endpoint_name=psc-east4"}, -1},
		{[]string{"endpoint down", "endpoint=" + e1.Addr(), "endpoint_name=psc-east4"}, -1},
		{[]string{"endpoint up", "endpoint=" + e2.Addr()}, 1},
		{[]string{"endpoint=" + e2.Addr(), "endpoint_name="}, 0},
		{[]string{"current endpoint changed", "from=" + e1.Addr() + " from_name=psc-east4 to=" + e2.Addr() + " reason=fallback"}, 1},
		{[]string{"to_name="}, 0},
	} {
		got := len(logLines(logs, tc.parts...))
		if tc.n < 0 && got == 0 { // -1: at least one
			t.Errorf("no line with %q:\n%s", tc.parts, logs)
		}
		if tc.n >= 0 && got != tc.n {
			t.Errorf("%d lines with %q, want %d:\n%s", got, tc.parts, tc.n, logs)
		}
	}

	// Metrics: every instrument that names an endpoint names it the same way.
	rm := collect(t, reader)
	for _, name := range []string{observe.MetricCalls, observe.MetricDuration, observe.MetricCurrent, observe.MetricEndpointState, observe.MetricActiveCalls} {
		got := nameAttrOf(rm, name)
		if got[e1.Addr()] != "psc-east4" || got[e2.Addr()] != "" {
			t.Errorf("%s: %s by endpoint = %v, want %s: psc-east4 and none for %s", name, AttrEndpointName, got, e1.Addr(), e2.Addr())
		}
	}
	if got := nameAttrOf(rm, observe.MetricSwitches); len(got) != 1 || got[e2.Addr()] != "" {
		t.Errorf("switches: %s by endpoint = %v, want only %s, unnamed", AttrEndpointName, got, e2.Addr())
	}
	m, _ := find(rm, observe.MetricSwitches)
	for _, dp := range int64Points(m) {
		if _, has := dp.Attributes.Value(AttrEndpointName); has {
			t.Errorf("switch to an unnamed endpoint has attribute %s: %v", AttrEndpointName, dp.Attributes.ToSlice())
		}
	}
}

// A reload that changes an endpoint's name takes effect at once on the pool already dialed
// (no restart needed, the endpoint keeps serving): Status and the metrics of later calls carry
// the new name. A reload that would give two endpoints one name is refused and changes
// nothing.
func TestEndpointRenameOnReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spannerme.yaml")
	f := &watchFixture{path: path}
	for _, name := range []string{"one", "two", "three"} {
		f.eps = append(f.eps, startEndpoint(t, name))
	}
	one, two := f.eps[0].Addr(), f.eps[1].Addr()
	named := func(n1, n2 string) string {
		return watchConfigYAML("endpoints:\n  "+one+": {name: "+n1+"}\n  "+two+": {name: "+n2+"}\n", one, two)
	}
	first := named("psc-east4", "psc-west2")
	writeFile(t, path, first)
	reader, mp := newMetricReader()
	fc, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := fc.Settings
	settings.Logger, settings.MeterProvider = fastSettings(nil).Logger, mp
	f.gme = newGME(t, fc.Options, settings)
	f.log = &syncBuffer{}
	f.w, err = WatchConfig(f.gme, path, WatchOptions{Debounce: 20 * time.Millisecond, Settle: 50 * time.Millisecond, Resync: -1,
		Logger: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.w.Close() })
	f.servedBy(t, "one")
	if p, _ := poolOf(f.gme, one); p.Name != "psc-east4" {
		t.Fatalf("pool %s named %q, want psc-east4", one, p.Name)
	}

	// The two names swap: both pools are kept and renamed.
	next := named("psc-west2", "psc-east4")
	writeFile(t, path, next)
	s := f.waitApplied(t, next)
	if len(s.RestartNeeded) != 0 {
		t.Errorf("RestartNeeded = %v after a rename, want none", s.RestartNeeded)
	}
	st := f.gme.Status()
	for _, p := range st.Pools {
		if p.Retired {
			t.Errorf("a rename retired the pool of %s", p.Endpoint)
		}
	}
	for e, want := range map[string]string{one: "psc-west2", two: "psc-east4"} {
		if p, _ := poolOf(f.gme, e); p.Name != want {
			t.Errorf("pool %s named %q after the reload, want %q", e, p.Name, want)
		}
	}
	if e := groupOf(f.gme, "g").Endpoints[0]; e.Name != "psc-west2" {
		t.Errorf("group endpoint %s named %q, want psc-west2", e.Endpoint, e.Name)
	}
	f.servedBy(t, "one")
	rm := collect(t, reader)
	var renamed bool
	m, _ := find(rm, observe.MetricCalls)
	for _, dp := range int64Points(m) {
		e, _ := dp.Attributes.Value(AttrEndpoint)
		n, _ := dp.Attributes.Value(AttrEndpointName)
		if e.AsString() == one && n.AsString() == "psc-west2" {
			renamed = true
		}
		if e.AsString() == one && n.AsString() != "psc-west2" && n.AsString() != "psc-east4" {
			t.Errorf("calls of %s under name %q", one, n.AsString())
		}
	}
	if !renamed {
		t.Errorf("no call of %s counted under its new name psc-west2", one)
	}

	// A name given to two endpoints: refused, nothing changes.
	bad := named("psc-east4", "psc-east4")
	writeFile(t, path, bad)
	s = f.waitStatus(t, "the clashing names refused", func(s ConfigStatus) bool { return s.LastError != nil })
	var fe *ConfigFileError
	if !errors.As(s.LastError, &fe) || fe.Field != "endpoints."+two+".name" || !strings.Contains(fe.Problem, "names must be unique") {
		t.Errorf("LastError = %v, want a *ConfigFileError at endpoints.%s.name", s.LastError, two)
	}
	if p, _ := poolOf(f.gme, one); p.Name != "psc-west2" || s.Hash != hashOf(next) {
		t.Errorf("after a refused edit: pool %s named %q, hash %s; want psc-west2, the previous file", one, p.Name, s.Hash[:8])
	}

	// The names removed: the address alone.
	plain := watchConfigYAML("", one, two)
	writeFile(t, path, plain)
	f.waitApplied(t, plain)
	for _, p := range f.gme.Status().Pools {
		if p.Name != "" {
			t.Errorf("pool %s still named %q after its name was removed", p.Endpoint, p.Name)
		}
	}
}

// Settings.EndpointOptions names an endpoint as the file does; UpdateMultiEndpoints (which
// keeps Settings.EndpointOptions) gives an endpoint it adds the name the settings hold.
func TestEndpointNameFromSettingsAtUpdate(t *testing.T) {
	a, b := startEndpoint(t, "A"), startEndpoint(t, "B")
	s := fastSettings(nil)
	s.EndpointOptions = map[string]EndpointOptions{"https://" + b.Addr(): {Name: "psc-b"}} // the https form matches
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, a.Addr())}), s)
	ctx := context.Background()
	waitServedBy(t, ctx, gme, "A", 10*time.Second)
	if err := gme.UpdateMultiEndpoints(options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, 0, b.Addr(), a.Addr())})); err != nil {
		t.Fatal(err)
	}
	waitServedBy(t, ctx, gme, "B", 10*time.Second)
	g := groupOf(gme, "g")
	if g.Endpoints[0].Name != "psc-b" || g.Endpoints[1].Name != "" {
		t.Errorf("endpoints %+v, want %s named psc-b and %s unnamed", g.Endpoints, b.Addr(), a.Addr())
	}
	if p, _ := poolOf(gme, b.Addr()); p.Name != "psc-b" {
		t.Errorf("pool %s named %q, want psc-b", b.Addr(), p.Name)
	}
}
