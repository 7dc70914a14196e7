package spannerme

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/monitoring/apiv3/v2/monitoringpb"
	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// fakeMetricService is a Cloud Monitoring MetricService on loopback that keeps what it is
// sent: the Spanner client's exporter sends its built-in metrics with CreateServiceTimeSeries.
type fakeMetricService struct {
	monitoringpb.UnimplementedMetricServiceServer
	addr   string
	mu     sync.Mutex // guards series
	series []*monitoringpb.TimeSeries
}

func (f *fakeMetricService) CreateServiceTimeSeries(_ context.Context, r *monitoringpb.CreateTimeSeriesRequest) (*emptypb.Empty, error) {
	f.mu.Lock()
	f.series = append(f.series, r.GetTimeSeries()...)
	f.mu.Unlock()
	return &emptypb.Empty{}, nil
}

func (f *fakeMetricService) CreateTimeSeries(ctx context.Context, r *monitoringpb.CreateTimeSeriesRequest) (*emptypb.Empty, error) {
	return f.CreateServiceTimeSeries(ctx, r)
}

func startFakeMetricService(t *testing.T) *fakeMetricService {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMetricService{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	monitoringpb.RegisterMetricServiceServer(srv, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return f
}

// randomLabels are the labels whose values are drawn per client (cloud.google.com/go/spanner
// v1.96.1, metrics.go: generateClientUID and generateClientHash).
var randomLabels = []string{"client_uid", "client_hash"}

// exported lists what f received: each time series' metric type, resource type and labels
// (values of randomLabels left out), sorted, without duplicates.
func (f *fakeMetricService) exported() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	labels := func(m map[string]string) string {
		var kv []string
		for k, v := range m {
			if slices.Contains(randomLabels, k) {
				v = "<drawn>"
			}
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		return strings.Join(kv, ",")
	}
	for _, ts := range f.series {
		seen[fmt.Sprintf("%s {%s} on %s {%s}", ts.GetMetric().GetType(), labels(ts.GetMetric().GetLabels()),
			ts.GetResource().GetType(), labels(ts.GetResource().GetLabels()))] = true
	}
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// A NewMultiEndpointClient* client exports the Spanner client's native metrics to Cloud
// Monitoring as a plain client does: at a fake MetricService reached with
// SPANNER_MONITORING_HOST, each client's Close delivers the same metric types, resource and
// metric labels after the same work; with DisableNativeMetrics or
// SPANNER_DISABLE_BUILTIN_METRICS, nothing.
func TestClient_NativeMetricsExportedAsPlainClient(t *testing.T) {
	fixture.DisableGCEDetection()
	addr, db := startSeededSpannertest(t)
	front := spannermetest.NewFrontendTB(t, addr, spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(sendServerTiming)))
	work := func(t *testing.T, client *spanner.Client) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := countAccounts(ctx, client); err != nil {
			t.Fatal(err)
		}
		if _, err := client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.Update(ctx, spanner.Statement{SQL: "UPDATE Accounts SET Region = 'x' WHERE AccountId = 'none'"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	config := fixture.ClientConfig()
	config.DisableNativeMetrics = false
	plainSink := startFakeMetricService(t)
	t.Setenv("SPANNER_MONITORING_HOST", plainSink.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := spanner.NewClientWithConfig(ctx, db, config, append(clientOptions(), option.WithEndpoint(front.Addr()))...)
	if err != nil {
		t.Fatal(err)
	}
	work(t, plain)
	plain.Close()
	want := plainSink.exported()
	if len(want) == 0 {
		t.Fatal("the plain client exported nothing: the test tests nothing")
	}
	for _, tc := range []struct {
		name    string
		disable bool   // ClientConfig.DisableNativeMetrics
		env     string // SPANNER_DISABLE_BUILTIN_METRICS
	}{
		{name: "exported"},
		{name: "DisableNativeMetrics", disable: true},
		{name: "SPANNER_DISABLE_BUILTIN_METRICS", env: "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := startFakeMetricService(t)
			t.Setenv("SPANNER_MONITORING_HOST", sink.addr)
			t.Setenv("SPANNER_DISABLE_BUILTIN_METRICS", tc.env)
			config := config
			config.DisableNativeMetrics = tc.disable
			o := options("default", map[string]*multiendpoint.MultiEndpointOptions{"default": group(0, 0, front.Addr())})
			client, gme, err := NewMultiEndpointClientWithSettings(ctx, db, config, o, fastSettings(nil), clientOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer gme.Close()
			work(t, client)
			client.Close()
			got := sink.exported()
			if tc.disable || tc.env != "" {
				if len(got) > 0 {
					t.Errorf("exported %d kinds of time series; want none:\n\t%s", len(got), strings.Join(got, "\n\t"))
				}
				return
			}
			if !slices.Equal(got, want) {
				t.Errorf("spannerme exported:\n\t%s\nthe plain client:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
			}
			t.Logf("%d kinds of time series, as the plain client's:\n\t%s", len(got), strings.Join(got, "\n\t"))
		})
	}
}
