// Command otlp is the OTLP recipe of docs/production.md: spannerme's metrics exported with
// OpenTelemetry's OTLP/gRPC exporter (go.opentelemetry.io/otel/exporters/otlp/otlpmetric/
// otlpmetricgrpc) to an OpenTelemetry Collector, or any OTLP receiver (Grafana Alloy, a
// vendor's agent), every 30 seconds:
//
//	go run ./examples/otlp -collector 127.0.0.1:4317 -database projects/p/instances/i/databases/d \
//	    -endpoints psc-east4=psc-east4.p.googleapis.com:443,psc-west2=psc-west2.p.googleapis.com:443
//
// The collector's address is plaintext here (a collector on the same host or pod, as an
// agent usually runs); drop otlpmetricgrpc.WithInsecure() for TLS. Its test runs the same code
// against an in-process OTLP receiver on 127.0.0.1, with no network.
package main

import (
	"context"
	"flag"
	"log"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// exportInterval is how often the metrics are sent.
const exportInterval = 30 * time.Second

func main() {
	collector := flag.String("collector", "127.0.0.1:4317", "the OTLP/gRPC receiver (host:port, plaintext)")
	database := flag.String("database", "", "projects/P/instances/I/databases/D (required)")
	endpoints := flag.String("endpoints", "", "the default group's endpoints, in priority order, comma-separated, each as name=host:port (the name labels the metrics) or host:port (required)")
	flag.Parse()
	if *database == "" || *endpoints == "" {
		log.Fatal("-database and -endpoints are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	mp, err := newMeterProvider(ctx, *collector, exportInterval)
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
	addrs, names := parseEndpoints(*endpoints)
	client, _, err := spannerme.NewMultiEndpointClientWithSettings(ctx, *database, spanner.ClientConfig{},
		&grpcgcp.GCPMultiEndpointOptions{
			MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
				"default": {Endpoints: addrs, RecoveryTimeout: 2 * time.Second, SwitchingDelay: 30 * time.Second},
			},
			Default: "default",
		},
		spannerme.Settings{MeterProvider: mp, EndpointOptions: names})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	log.Printf("exporting spannerme metrics to %s every %v; Ctrl-C to stop", *collector, exportInterval)
	<-ctx.Done()
}

// newMeterProvider returns a meter provider whose metrics go to the OTLP/gRPC receiver at
// collector (plaintext), every interval, and at its Shutdown or ForceFlush.
func newMeterProvider(ctx context.Context, collector string, interval time.Duration) (*sdkmetric.MeterProvider, error) {
	exporter, err := otlpmetricgrpc.New(ctx,
		otlpmetricgrpc.WithEndpoint(collector),
		otlpmetricgrpc.WithInsecure(), // a collector beside the service; remove for TLS
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
