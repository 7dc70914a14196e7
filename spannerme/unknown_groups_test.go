package spannerme

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/observe"
)

// A call naming a misspelled group is served by the default group and counted, by the name it
// gave, in the unknown-group metric (so that a misroute can be alerted on).
func TestUnknownGroupCountedInMetric(t *testing.T) {
	a, b := startEndpoint(t, "A"), startEndpoint(t, "B")
	r, mp := newMetricReader()
	s := fastSettings(nil)
	s.MeterProvider = mp
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, a.Addr()), "west": group(0, 0, b.Addr())}), s)
	ctx := context.Background()
	if got, err := call(NewMEContext(ctx, "west"), gme); err != nil || got != "B" {
		t.Fatalf("west: served by %q, %v; want B", got, err)
	}
	if _, ok := valueWhere(collect(t, r), observe.MetricUnknownGroups, attribute.String(observe.AttrMultiEndpoint, "west")); ok {
		t.Fatal("a configured group is counted as unknown")
	}
	for range 2 {
		if got, err := call(NewMEContext(ctx, "wset"), gme); err != nil || got != "A" {
			t.Fatalf("wset: served by %q, %v; want the default group's A", got, err)
		}
	}
	n, ok := valueWhere(collect(t, r), observe.MetricUnknownGroups, attribute.String(observe.AttrMultiEndpoint, "wset"))
	if !ok || n != 2 {
		t.Errorf("%s{wset} = %d (present %v), want 2", observe.MetricUnknownGroups, n, ok)
	}
}

// With RejectUnknownGroups, a call naming a misspelled group fails with InvalidArgument naming
// the group, the groups there are and the likely one; it is still counted; a configured
// group's calls and the default's are served as before.
func TestRejectUnknownGroups(t *testing.T) {
	a, b := startEndpoint(t, "A"), startEndpoint(t, "B")
	r, mp := newMetricReader()
	s := fastSettings(nil)
	s.MeterProvider = mp
	s.RejectUnknownGroups = true
	logs := &syncBuffer{}
	s.Logger = fastSettings(logs).Logger
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, a.Addr()), "west": group(0, 0, b.Addr())}), s)
	ctx := context.Background()
	got, err := call(NewMEContext(ctx, "wset"), gme)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("wset: served by %q, err %v; want InvalidArgument", got, err)
	}
	for _, want := range []string{`"wset"`, `did you mean "west"`, `the groups are "default", "west"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := gme.Status().UnknownGroups["wset"]; n != 1 {
		t.Errorf("Status().UnknownGroups[wset] = %d, want 1", n)
	}
	if n, _ := valueWhere(collect(t, r), observe.MetricUnknownGroups, attribute.String(observe.AttrMultiEndpoint, "wset")); n != 1 {
		t.Errorf("%s{wset} = %d, want 1", observe.MetricUnknownGroups, n)
	}
	eventually(t, 5*time.Second, "the WARN line of the refused name", func() bool {
		return strings.Contains(logs.String(), "it fails (Settings.RejectUnknownGroups")
	})
	if strings.Contains(logs.String(), "uses the default one") {
		t.Errorf("a refused call logged as sent to the default group:\n%s", logs)
	}
	// A name far from every group gets no suggestion.
	if _, err := call(NewMEContext(ctx, "analytics"), gme); status.Code(err) != codes.InvalidArgument || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("analytics: %v; want InvalidArgument without a suggestion", err)
	}
	for name, want := range map[string]string{"west": "B", "default": "A", "": "A"} {
		if got, err := call(NewMEContext(ctx, name), gme); err != nil || got != want {
			t.Errorf("%q: served by %q, %v; want %s", name, got, err, want)
		}
	}
}

// Each endpoint's ejections (under every reason) and cooldowns series exist at 0 from the
// moment its pool exists, so that an alert on their increase sees the first event.
func TestPerEndpointCountersStartAtZero(t *testing.T) {
	a, b := startEndpoint(t, "A"), startEndpoint(t, "B")
	r, mp := newMetricReader()
	s := fastSettings(nil)
	s.MeterProvider = mp
	s.EndpointOptions = map[string]EndpointOptions{b.Addr(): {Name: "west-psc"}}
	gme := newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, a.Addr(), b.Addr())}), s)
	_ = gme
	rm := collect(t, r)
	for _, e := range []string{a.Addr(), b.Addr()} {
		for _, reason := range observe.EjectionReasons {
			n, ok := valueWhere(rm, observe.MetricEjections, attribute.String(observe.AttrEndpoint, e),
				attribute.String(observe.AttrEjectionReason, reason))
			if !ok || n != 0 {
				t.Errorf("%s{%s, %s}: %d (present %v), want present at 0", observe.MetricEjections, e, reason, n, ok)
			}
		}
		if n, ok := valueWhere(rm, observe.MetricCooldowns, attribute.String(observe.AttrEndpoint, e)); !ok || n != 0 {
			t.Errorf("%s{%s}: %d (present %v), want present at 0", observe.MetricCooldowns, e, n, ok)
		}
	}
	if _, ok := valueWhere(rm, observe.MetricCooldowns, attribute.String(observe.AttrEndpoint, b.Addr()),
		attribute.String(observe.AttrEndpointName, "west-psc")); !ok {
		t.Errorf("%s of %s lacks its name west-psc", observe.MetricCooldowns, b.Addr())
	}
	if len(observe.EjectionReasons) != 4 {
		t.Errorf("EjectionReasons = %q, want the 4 health reasons", observe.EjectionReasons)
	}
}
