// Command prometheus is the Prometheus recipe of docs/production.md: spannerme's metrics
// exported with OpenTelemetry's Prometheus exporter, served at /metrics next to a readiness
// probe (/ready) and the status page (/spannerme/), on one private port. It runs offline as
// it is (go run ./examples/prometheus, then curl localhost:9464/metrics): an in-memory
// Spanner stands in for Cloud Spanner, and fake PSC endpoints (TCP proxies on 127.0.0.1) for
// real ones.
//
// With real PSC endpoints, drop the "offline" block, write your endpoints and database, and
// no client options: the client then uses TLS and Application Default Credentials.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/api/option"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
	"github.com/spannerme/spanner-multiendpoint/spannerme/statuspage"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "where to serve /metrics, /ready and /spannerme/ (keep it private)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Offline: an in-memory Spanner and two fake PSC endpoints in front of it.
	sp, err := spannermetest.NewSpanner("CREATE TABLE Greetings (Id INT64 NOT NULL, Text STRING(MAX)) PRIMARY KEY (Id)")
	if err != nil {
		log.Fatal(err)
	}
	defer sp.Close()
	east, west := newEndpoint(sp.Addr()), newEndpoint(sp.Addr())
	defer east.Close()
	defer west.Close()
	// Each endpoint with its name: names label the metrics (spannerme_endpoint_name), the logs
	// and the status page, so that an alert says "psc-east4", not an address.
	endpoints := []namedEndpoint{{"psc-east4", east.Addr()}, {"psc-west2", west.Addr()}} // e.g. psc-east4:443, psc-west2:443

	app, err := newApp(ctx, sp.Database(), endpoints, spannermetest.ClientConfig(), spannermetest.ClientOptions()...)
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()
	srv := &http.Server{Addr: *addr, Handler: app.Mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("serving http://%s/metrics, /ready and /spannerme/", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// app is the service: a Spanner client over one MultiEndpoint, and its operations mux.
type app struct {
	Client *spanner.Client
	GME    *spannerme.GCPMultiEndpoint
	Mux    *http.ServeMux
	mp     *sdkmetric.MeterProvider
}

// namedEndpoint is an endpoint (host:port) and its name (EndpointOptions.Name).
type namedEndpoint struct{ Name, Addr string }

// newApp creates the client over endpoints, in priority order, with its metrics going to a
// Prometheus registry of its own, and the mux serving them.
func newApp(ctx context.Context, database string, endpoints []namedEndpoint, config spanner.ClientConfig, opts ...option.ClientOption) (*app, error) {
	addrs, names := make([]string, len(endpoints)), make(map[string]spannerme.EndpointOptions, len(endpoints))
	for i, e := range endpoints {
		addrs[i], names[e.Addr] = e.Addr, spannerme.EndpointOptions{Name: e.Name}
	}
	// The exporter is a Reader: Prometheus pulls, nothing is pushed.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))

	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, database, config,
		&grpcgcp.GCPMultiEndpointOptions{
			MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
				"default": {Endpoints: addrs, RecoveryTimeout: 2 * time.Second, SwitchingDelay: 30 * time.Second},
			},
			Default: "default",
		},
		// spannerme's instruments (docs/observability.md), labelled with the endpoints' names.
		spannerme.Settings{MeterProvider: mp, EndpointOptions: names},
		opts...)
	if err != nil {
		_ = mp.Shutdown(ctx)
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	mux.Handle("/ready", statuspage.Ready(gme))
	mux.Handle("/spannerme/", http.StripPrefix("/spannerme", statuspage.Handler(gme)))
	return &app{Client: client, GME: gme, Mux: mux, mp: mp}, nil
}

// Close closes the client (and so the GCPMultiEndpoint), then the meter provider.
func (a *app) Close() {
	a.Client.Close()
	_ = a.mp.Shutdown(context.Background())
}

func newEndpoint(backend string) *spannermetest.Endpoint {
	e, err := spannermetest.NewEndpoint(backend)
	if err != nil {
		log.Fatal(err)
	}
	return e
}
