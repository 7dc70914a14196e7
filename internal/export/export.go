// Package export carries the Spanner client's native metrics export to Cloud Monitoring for a
// client whose connection is a front (internal/front), as a plain client's exporter would
// send it.
//
// The Spanner client builds its Cloud Monitoring exporter from its own client options with the
// monitoring endpoint added last (cloud.google.com/go/spanner v1.96.1, metrics.go,
// createExporterOptions: SPANNER_MONITORING_HOST, else monitoring.googleapis.com:443). A
// client over a GCPMultiEndpoint is given the front's options, so its exporter's connection
// carries the front's interceptors and never connects: the front hands that connection's
// MetricService calls to a Conn, which sends them on a MetricClient dialed with the caller's
// client options and the same monitoring endpoint, exactly the connection a plain client's
// exporter would have. The metric types, resources and labels are the Spanner client's own.
package export

import (
	"context"
	"fmt"
	"os"
	"strings"

	monitoring "cloud.google.com/go/monitoring/apiv3/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
)

// Service is the method prefix of Cloud Monitoring's MetricService, whose calls a Conn takes.
const Service = "/google.monitoring.v3.MetricService/"

// Takes reports whether method is a MetricService method, which c sends.
func (c *Conn) Takes(method string) bool { return strings.HasPrefix(method, Service) }

// HostEnv and DefaultHost are the monitoring endpoint as the Spanner client chooses it
// (cloud.google.com/go/spanner v1.96.1, metrics.go, createExporterOptions).
const (
	HostEnv     = "SPANNER_MONITORING_HOST"
	DefaultHost = "monitoring.googleapis.com:443"
)

// Conn is the connection a front sends its exporter's calls on. Safe for concurrent use.
type Conn struct {
	mc *monitoring.MetricClient
}

// Dial returns the Conn of a client built with the caller's client options opts: a
// MetricClient dialed with opts and the monitoring endpoint, as the Spanner client dials its
// exporter's. Errors: those of monitoring.NewMetricClient, wrapped.
func Dial(ctx context.Context, opts []option.ClientOption) (*Conn, error) {
	host := DefaultHost
	if h := os.Getenv(HostEnv); h != "" {
		host = h
	}
	all := append(append([]option.ClientOption(nil), opts...), option.WithEndpoint(host))
	mc, err := monitoring.NewMetricClient(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("spannerme: the native metrics exporter's connection to %s: %w", host, err)
	}
	return &Conn{mc: mc}, nil
}

// Invoke sends a unary MetricService call on c's connection.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	//lint:ignore SA1019 the connection of a one-connection client: the call is the exporter's own, made as its MetricClient would
	return c.mc.Connection().Invoke(ctx, method, args, reply, opts...)
}

// Close closes c's connection; a call after it fails.
func (c *Conn) Close() error { return c.mc.Close() }
