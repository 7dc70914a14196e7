package main

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/monitoring/apiv3/v2/monitoringpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.uber.org/goleak"
	"google.golang.org/api/option"
	metricpb "google.golang.org/genproto/googleapis/api/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// fakeMonitoring is a Cloud Monitoring MetricService that keeps the time series it is sent.
type fakeMonitoring struct {
	monitoringpb.UnimplementedMetricServiceServer
	mu     sync.Mutex // guards series
	series []*monitoringpb.TimeSeries
}

func (f *fakeMonitoring) CreateMetricDescriptor(_ context.Context, r *monitoringpb.CreateMetricDescriptorRequest) (*metricpb.MetricDescriptor, error) {
	return r.GetMetricDescriptor(), nil
}

func (f *fakeMonitoring) CreateTimeSeries(_ context.Context, r *monitoringpb.CreateTimeSeriesRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.series = append(f.series, r.GetTimeSeries()...)
	return &emptypb.Empty{}, nil
}

// The recipe's meter provider sends spannerme's metrics as workload.googleapis.com/spannerme.*
// time series, the current endpoint with its priority as a label, to Cloud Monitoring: here
// a fake on 127.0.0.1, reached without credentials.
func TestCloudMonitoringRecipeSendsCurrentEndpoint(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeMonitoring{}
	srv := grpc.NewServer()
	monitoringpb.RegisterMetricServiceServer(srv, fake)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()

	mp, err := newMeterProvider("test-project", time.Hour, // exported by ForceFlush below
		option.WithEndpoint(lis.Addr().String()), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer mp.Shutdown(ctx)

	sp := spannermetest.NewSpannerTB(t, "CREATE TABLE T (Id INT64 NOT NULL) PRIMARY KEY (Id)")
	e := spannermetest.NewEndpointTB(t, sp.Addr())
	gme, err := spannerme.NewGCPMultiEndpointWithSettings(&grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{"default": {Endpoints: []string{e.Addr()}}},
		Default:        "default",
	}, spannerme.Settings{MeterProvider: mp}, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gme.Close()
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	found := false
	for _, ts := range fake.series {
		if ts.GetMetric().GetType() != "workload.googleapis.com/spannerme.multiendpoint.current_endpoint" {
			continue
		}
		l := ts.GetMetric().GetLabels()
		if l["spannerme_multiendpoint"] == "default" && l["spannerme_endpoint"] == e.Addr() && l["spannerme_endpoint_priority"] == "0" {
			found = true
		}
	}
	if !found {
		var types []string
		for _, ts := range fake.series {
			types = append(types, ts.GetMetric().GetType())
		}
		t.Errorf("no current_endpoint series for %s with priority 0 among %d series: %v", e.Addr(), len(fake.series), types)
	}
}

// -endpoints gives each endpoint a name (name=host:port) or none (host:port), in order.
func TestParseEndpointsNames(t *testing.T) {
	addrs, names := parseEndpoints("psc-east4=10.0.0.5:443, psc-west2.p.googleapis.com:443")
	if len(addrs) != 2 || addrs[0] != "10.0.0.5:443" || addrs[1] != "psc-west2.p.googleapis.com:443" {
		t.Errorf("addresses %q", addrs)
	}
	if len(names) != 1 || names["10.0.0.5:443"].Name != "psc-east4" {
		t.Errorf("names %+v, want 10.0.0.5:443 named psc-east4 only", names)
	}
}
