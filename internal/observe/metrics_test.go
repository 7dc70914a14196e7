package observe

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client's protos, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func newMetricReader() (*sdkmetric.ManualReader, metric.MeterProvider) {
	r := sdkmetric.NewManualReader()
	return r, sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
}

func collect(t *testing.T, r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rm
}

// find returns the instrument called name in this package's scope.
func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name && sm.Scope.Name == MeterName {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// Every instrument the SDK sees is documented (name and unit), and every documented one
// exists.
func TestInstrumentsMatchTheirDocs(t *testing.T) {
	reader, mp := newMetricReader()
	m := NewMetrics(mp)
	// Make every synchronous instrument report once.
	ctx := context.Background()
	m.calls.Add(ctx, 1)
	m.failures.Add(ctx, 1)
	m.switches.Add(ctx, 1)
	m.ejections.Add(ctx, 1)
	m.cooldowns.Add(ctx, 1)
	m.reroutes.Add(ctx, 1)
	m.resends.Add(ctx, 1)
	m.duration.Record(ctx, 1)
	reg, err := mp.Meter(MeterName).RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(m.state, 1)
		o.ObserveInt64(m.current, 1)
		o.ObserveInt64(m.degraded, 1)
		o.ObserveInt64(m.verdict, 1)
		o.ObserveInt64(m.active, 1)
		o.ObserveInt64(m.waiting, 1)
		o.ObserveInt64(m.hedges, 1)
		o.ObserveInt64(m.tier, 1)
		o.ObserveFloat64(m.latencyScore, 1)
		o.ObserveInt64(m.unknownGroups, 1)
		return nil
	}, m.state, m.current, m.degraded, m.verdict, m.active, m.waiting, m.hedges, m.tier, m.latencyScore, m.unknownGroups)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	rm := collect(t, reader)
	seen := 0
	for _, d := range Docs {
		got, ok := find(rm, d.Name)
		if !ok {
			t.Errorf("%s: documented, not created", d.Name)
			continue
		}
		seen++
		if got.Unit != d.Unit || got.Description != d.Description {
			t.Errorf("%s: unit %q, description %q; documented %q, %q", d.Name, got.Unit, got.Description, d.Unit, d.Description)
		}
	}
	if n := len(rm.ScopeMetrics[0].Metrics); n != seen {
		t.Errorf("%d instruments reported, %d documented", n, seen)
	}
}
