// Command cloudmonitoring is the Cloud Monitoring recipe of docs/production.md: spannerme's
// metrics exported to Google Cloud Monitoring with Google's OpenTelemetry exporter
// (github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/metric), every 60
// seconds, as workload.googleapis.com/spannerme.* metrics. It needs a project and
// Application Default Credentials allowed to write metrics (roles/monitoring.metricWriter):
//
//	go run ./examples/cloudmonitoring -project my-project -database projects/p/instances/i/databases/d \
//	    -endpoints psc-east4.p.googleapis.com:443,psc-west2.p.googleapis.com:443
//
// Its test runs the same code against a fake Cloud Monitoring on 127.0.0.1, with no
// network and no credentials.
package main

import (
	"context"
	"flag"
	"log"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	mexporter "github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/api/option"

	"cloud.google.com/go/spanner"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// exportInterval is how often the metrics are sent. Cloud Monitoring accepts one point per
// time series every 5 seconds at most (https://cloud.google.com/monitoring/quotas); 60s is
// the exporter's usual interval.
const exportInterval = 60 * time.Second

func main() {
	project := flag.String("project", "", "the Google Cloud project the metrics are written to (required)")
	database := flag.String("database", "", "projects/P/instances/I/databases/D (required)")
	endpoints := flag.String("endpoints", "", "the default group's endpoints, in priority order, comma-separated, each as name=host:port (the name labels the metrics) or host:port (required)")
	flag.Parse()
	if *project == "" || *database == "" || *endpoints == "" {
		log.Fatal("-project, -database and -endpoints are required")
	}
	addrs, names := parseEndpoints(*endpoints)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	mp, err := newMeterProvider(*project, exportInterval)
	if err != nil {
		log.Fatal(err)
	}
	// Shutdown sends what is left; give it its own time.
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mp.Shutdown(shutdown); err != nil {
			log.Print(err)
		}
	}()

	client, _, err := spannerme.NewMultiEndpointClientWithSettings(ctx, *database, spanner.ClientConfig{},
		&grpcgcp.GCPMultiEndpointOptions{
			MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
				"default": {Endpoints: addrs, RecoveryTimeout: 2 * time.Second, SwitchingDelay: 30 * time.Second},
			},
			Default: "default",
		},
		spannerme.Settings{MeterProvider: mp, EndpointOptions: names}) // names label the metrics
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	log.Printf("exporting spannerme metrics to project %s every %v; Ctrl-C to stop", *project, exportInterval)
	<-ctx.Done()
}

// newMeterProvider returns a meter provider whose metrics go to Cloud Monitoring in project,
// every interval. opts are the Cloud Monitoring client's options (none in production: the
// client finds Application Default Credentials; the test points it at a fake).
func newMeterProvider(project string, interval time.Duration, opts ...option.ClientOption) (*sdkmetric.MeterProvider, error) {
	exporter, err := mexporter.New(
		mexporter.WithProjectID(project),
		mexporter.WithMonitoringClientOptions(opts...),
	)
	if err != nil {
		return nil, err
	}
	return sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithInterval(interval))),
	), nil
}

// parseEndpoints reads -endpoints: comma-separated entries, each name=host:port or host:port.
// It returns the addresses in order and the names of those that have one (spannerme's
// EndpointOptions.Name: it labels the metrics spannerme.endpoint.name).
func parseEndpoints(s string) ([]string, map[string]spannerme.EndpointOptions) {
	var addrs []string
	names := map[string]spannerme.EndpointOptions{}
	for _, e := range strings.Split(s, ",") {
		name, addr, named := strings.Cut(strings.TrimSpace(e), "=")
		if !named {
			addr, name = name, ""
		}
		addrs = append(addrs, addr)
		if name != "" {
			names[addr] = spannerme.EndpointOptions{Name: name}
		}
	}
	return addrs, names
}
