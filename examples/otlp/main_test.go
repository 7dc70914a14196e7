package main

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// receiver is an in-process OTLP/gRPC metrics receiver that keeps what it is sent.
type receiver struct {
	collectorpb.UnimplementedMetricsServiceServer
	mu      sync.Mutex // guards metrics
	metrics []*metricspb.Metric
}

func (r *receiver) Export(_ context.Context, req *collectorpb.ExportMetricsServiceRequest) (*collectorpb.ExportMetricsServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			r.metrics = append(r.metrics, sm.GetMetrics()...)
		}
	}
	return &collectorpb.ExportMetricsServiceResponse{}, nil
}

// intPoints returns the int64 points of the metrics called name, each with its attributes.
func (r *receiver) intPoints(name string) []*metricspb.NumberDataPoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*metricspb.NumberDataPoint
	for _, m := range r.metrics {
		if m.GetName() != name {
			continue
		}
		out = append(out, m.GetGauge().GetDataPoints()...)
		out = append(out, m.GetSum().GetDataPoints()...)
	}
	return out
}

func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// The recipe's meter provider sends spannerme's metrics to an OTLP receiver: after a query
// and a flush, the receiver has the current endpoint (1, by the endpoint's name), the calls
// counted, and each endpoint's ejections at 0.
func TestOTLPRecipeSendsMetrics(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &receiver{}
	srv := grpc.NewServer()
	collectorpb.RegisterMetricsServiceServer(srv, recv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mp, err := newMeterProvider(ctx, lis.Addr().String(), time.Hour) // exported by ForceFlush below
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(ctx)

	sp := spannermetest.NewSpannerTB(t, "CREATE TABLE T (Id INT64 NOT NULL) PRIMARY KEY (Id)")
	east, west := spannermetest.NewEndpointTB(t, sp.Addr()), spannermetest.NewEndpointTB(t, sp.Addr())
	addrs, names := parseEndpoints("psc-east4=" + east.Addr() + ",psc-west2=" + west.Addr())
	client, _, err := spannerme.NewMultiEndpointClientWithSettings(ctx, sp.Database(), spannermetest.ClientConfig(),
		&grpcgcp.GCPMultiEndpointOptions{
			MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{"default": {Endpoints: addrs}},
			Default:        "default",
		}, spannerme.Settings{MeterProvider: mp, EndpointOptions: names}, spannermetest.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil }); err != nil {
		t.Fatalf("query: %v", err)
	}
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}
	current := false
	for _, p := range recv.intPoints("spannerme.multiendpoint.current_endpoint") {
		if attr(p.GetAttributes(), "spannerme.endpoint.name") == "psc-east4" && attr(p.GetAttributes(), "spannerme.multiendpoint") == "default" {
			current = p.GetAsInt() == 1
		}
	}
	if !current {
		t.Errorf("the receiver has no current_endpoint 1 for psc-east4: %v", recv.intPoints("spannerme.multiendpoint.current_endpoint"))
	}
	var calls int64
	for _, p := range recv.intPoints("spannerme.client.calls") {
		calls += p.GetAsInt()
	}
	if calls == 0 {
		t.Error("the receiver has no spannerme.client.calls")
	}
	ejections := map[string]bool{}
	for _, p := range recv.intPoints("spannerme.endpoint.ejections") {
		if p.GetAsInt() == 0 {
			ejections[attr(p.GetAttributes(), "spannerme.endpoint.name")] = true
		}
	}
	if !ejections["psc-east4"] || !ejections["psc-west2"] {
		t.Errorf("ejections at 0 by endpoint name: %v, want psc-east4 and psc-west2", ejections)
	}
}
