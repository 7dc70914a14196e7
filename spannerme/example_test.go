package spannerme_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// fakeSpanner starts an in-memory Spanner with an Accounts table of 8 rows, and n fake PSC
// endpoints in front of it. Real code has real endpoints such as "psc-east4:443" instead.
func fakeSpanner(n int) (database string, endpoints []*spannermetest.Endpoint, opts []option.ClientOption, stop func()) {
	ctx := context.Background()
	sp, err := spannermetest.NewSpanner("CREATE TABLE Accounts (AccountId STRING(36) NOT NULL, Balance INT64 NOT NULL) PRIMARY KEY (AccountId)")
	if err != nil {
		log.Fatal(err)
	}
	direct, err := sp.NewClient(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var rows []*spanner.Mutation
	for i := range 8 {
		rows = append(rows, spanner.Insert("Accounts", []string{"AccountId", "Balance"}, []any{fmt.Sprintf("acct-%d", i), 100}))
	}
	if _, err := direct.Apply(ctx, rows); err != nil {
		log.Fatal(err)
	}
	direct.Close()
	for range n {
		e, err := spannermetest.NewEndpoint(sp.Addr())
		if err != nil {
			log.Fatal(err)
		}
		endpoints = append(endpoints, e)
	}
	// Offline: no credentials and plaintext (real PSC endpoints use TLS and credentials).
	return sp.Database(), endpoints, spannermetest.ClientOptions(), func() {
		for _, e := range endpoints {
			e.Close()
		}
		sp.Close()
	}
}

// offlineConfig is the Spanner client configuration for a machine without credentials: no
// built-in metrics export.
var offlineConfig = spannermetest.ClientConfig()

func countAccounts(ctx context.Context, client *spanner.Client) int64 {
	var n int64
	err := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT COUNT(*) FROM Accounts"}).Do(func(r *spanner.Row) error {
		return r.Column(0, &n)
	})
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// One endpoint: the simplest MultiEndpoint configuration.
func ExampleNewMultiEndpointClientWithConfig_singleEndpoint() {
	database, eps, opts, stop := fakeSpanner(1)
	defer stop()
	ctx := context.Background()

	client, gme, err := spannerme.NewMultiEndpointClientWithConfig(ctx, database, offlineConfig, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {Endpoints: []string{eps[0].Addr()}}, // e.g. "psc-east4:443"
		},
		Default: "default",
	}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // closes gme too
	fmt.Println("accounts:", countAccounts(ctx, client))
	fmt.Println("groups:", len(gme.Status().Groups))
	// Output:
	// accounts: 8
	// groups: 1
}

// Several groups: a call picks one with NewMEContext (grpcgcp.NewMEContext works too);
// without it, the Default group serves.
func ExampleNewMEContext() {
	database, eps, opts, stop := fakeSpanner(2)
	defer stop()
	east, west := eps[0], eps[1]
	ctx := context.Background()

	client, _, err := spannerme.NewMultiEndpointClientWithConfig(ctx, database, offlineConfig, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {Endpoints: []string{east.Addr(), west.Addr()}}, // psc-east4, then psc-west2
			"west":    {Endpoints: []string{west.Addr(), east.Addr()}}, // psc-west2, then psc-east4
		},
		Default: "default",
	}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	countAccounts(ctx, client) // the session exists from here on
	before := west.Stats().BytesFromBackend
	countAccounts(spannerme.NewMEContext(ctx, "west"), client)
	fmt.Println("served by west:", west.Stats().BytesFromBackend > before)
	// Output:
	// served by west: true
}

// Fallback: the primary endpoint goes down; after RecoveryTimeout the group fails over to the
// next endpoint; when the primary is back, it switches back after SwitchingDelay.
func ExampleNewMultiEndpointClientWithSettings_fallback() {
	database, eps, opts, stop := fakeSpanner(2)
	defer stop()
	primary, fallback := eps[0], eps[1]
	ctx := context.Background()

	switched := make(chan spannerme.SwitchEvent, 10)
	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, database, offlineConfig, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {
				Endpoints:       []string{primary.Addr(), fallback.Addr()},
				RecoveryTimeout: 300 * time.Millisecond, // how long a down endpoint may recover
				SwitchingDelay:  300 * time.Millisecond, // how long a recovered one must stay up
			},
		},
		Default: "default",
	}, spannerme.Settings{OnSwitch: func(ev spannerme.SwitchEvent) { switched <- ev }}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	countAccounts(ctx, client)

	primary.Down()
	ev := <-switched
	fmt.Println(ev.Reason, "to the fallback:", ev.To == fallback.Addr())
	fmt.Println("accounts:", countAccounts(ctx, client))

	if err := primary.Up(); err != nil {
		log.Fatal(err)
	}
	ev = <-switched
	fmt.Println(ev.Reason, "to the primary:", ev.To == primary.Addr())
	fmt.Println("current is primary:", gme.Status().Groups[0].Current == primary.Addr())
	// Output:
	// fallback to the fallback: true
	// accounts: 8
	// recovery to the primary: true
	// current is primary: true
}

// Runtime reconfiguration: groups and endpoints change while calls flow; nothing changes if
// the new configuration is invalid.
func ExampleGCPMultiEndpoint_UpdateMultiEndpoints() {
	database, eps, opts, stop := fakeSpanner(2)
	defer stop()
	ctx := context.Background()

	cfg := func(endpoints ...string) *grpcgcp.GCPMultiEndpointOptions {
		return &grpcgcp.GCPMultiEndpointOptions{
			MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{"default": {Endpoints: endpoints}},
			Default:        "default",
		}
	}
	client, gme, err := spannerme.NewMultiEndpointClientWithConfig(ctx, database, offlineConfig, cfg(eps[0].Addr()), opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	countAccounts(ctx, client)

	// Move the traffic to the second endpoint.
	if err := gme.UpdateMultiEndpoints(cfg(eps[1].Addr())); err != nil {
		log.Fatal(err)
	}
	before := eps[1].Stats().BytesFromBackend
	fmt.Println("accounts:", countAccounts(ctx, client))
	fmt.Println("served by the new endpoint:", eps[1].Stats().BytesFromBackend > before)

	// An invalid configuration is rejected as a whole.
	err = gme.UpdateMultiEndpoints(cfg(eps[0].Addr(), "no-port"))
	fmt.Println(err)
	// Output:
	// accounts: 8
	// served by the new endpoint: true
	// invalid MultiEndpoint configuration: group "default": endpoint 1 "no-port": not host:port (address no-port: missing port in address)
}

// A configuration file, applied at start and again at every edit (a Kubernetes ConfigMap
// volume works too). An invalid edit changes nothing and is reported.
func ExampleWatchConfig() {
	database, eps, opts, stop := fakeSpanner(2)
	defer stop()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "spannerme-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "spannerme.yaml") // e.g. a ConfigMap mounted at /etc/spannerme
	write := func(endpoint, extra string) {
		cfg := fmt.Sprintf("default: default\nmultiEndpoints:\n  default:\n    endpoints: [%s]\n    recoveryTimeout: 2s\n%s", endpoint, extra)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			log.Fatal(err)
		}
	}
	write(eps[0].Addr(), "")

	fc, err := spannerme.LoadConfig(path)
	if err != nil {
		log.Fatal(err)
	}
	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, database, offlineConfig, fc.Options, fc.Settings, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	w, err := spannerme.WatchConfig(gme, path, spannerme.WatchOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	fmt.Println("accounts:", countAccounts(ctx, client))

	waitFor := func(cond func(spannerme.ConfigStatus) bool) spannerme.ConfigStatus {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if s := w.Status(); cond(s) {
				return s
			}
		}
		log.Fatal("timed out")
		return spannerme.ConfigStatus{}
	}
	write(eps[1].Addr(), "    recoveryTimout: 2s\n") // a typo
	s := waitFor(func(s spannerme.ConfigStatus) bool { return s.LastError != nil })
	var fe *spannerme.ConfigFileError
	if errors.As(s.LastError, &fe) {
		fmt.Printf("rejected: line %d: %s: %s\n", fe.Line, fe.Field, fe.Problem)
	}
	fmt.Println("still on the first endpoint:", gme.Status().Groups[0].Current == eps[0].Addr())

	write(eps[1].Addr(), "")
	waitFor(func(s spannerme.ConfigStatus) bool { return s.LastError == nil && s.Applied == 2 })
	fmt.Println("moved to the second endpoint:", gme.Status().Groups[0].Current == eps[1].Addr())
	// Output:
	// accounts: 8
	// rejected: line 6: multiEndpoints.default.recoveryTimout: unknown field (did you mean recoveryTimeout?)
	// still on the first endpoint: true
	// moved to the second endpoint: true
}

// Health from call outcomes: the primary's frontend answers every call UNAVAILABLE while its
// connections stay up (its region is down). Its calls eject it, the group fails over after
// RecoveryTimeout, and once it heals a probe readmits it and traffic returns after
// SwitchingDelay.
func ExampleHealthSettings() {
	database, eps, opts, stop := fakeSpanner(1)
	defer stop()
	backend := eps[0].Backend()
	primary, err := spannermetest.NewFrontend(backend) // HTTP/2 ends here, as at a Google frontend
	if err != nil {
		log.Fatal(err)
	}
	defer primary.Close()
	fallback, err := spannermetest.NewFrontend(backend)
	if err != nil {
		log.Fatal(err)
	}
	defer fallback.Close()
	ctx := context.Background()

	health := make(chan spannerme.HealthEvent, 10)
	switched := make(chan spannerme.SwitchEvent, 10)
	client, _, err := spannerme.NewMultiEndpointClientWithSettings(ctx, database, offlineConfig, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {
				Endpoints:       []string{primary.Addr(), fallback.Addr()},
				RecoveryTimeout: 300 * time.Millisecond,
				SwitchingDelay:  300 * time.Millisecond,
			},
		},
		Default: "default",
	}, spannerme.Settings{
		Health: spannerme.HealthSettings{
			BaseEjectionTime: 500 * time.Millisecond, // default 30s
			ProbeInterval:    200 * time.Millisecond, // default 10s
		},
		OnHealth: func(ev spannerme.HealthEvent) { health <- ev },
		OnSwitch: func(ev spannerme.SwitchEvent) { switched <- ev },
	}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	countAccounts(ctx, client)

	if err := primary.FailAll(codes.Unavailable); err != nil {
		log.Fatal(err)
	}
	fmt.Println("accounts:", countAccounts(ctx, client)) // retried by the Spanner client, served by the fallback
	ev := <-health
	fmt.Println("primary", ev.Kind, ev.Endpoint == primary.Addr()) // ev.Reason, ev.Detail say why
	sw := <-switched
	fmt.Println(sw.Reason, "to the fallback:", sw.To == fallback.Addr())

	primary.Pass()
	ev = <-health
	fmt.Println("primary", ev.Kind, ev.Endpoint == primary.Addr())
	sw = <-switched
	fmt.Println(sw.Reason, "to the primary:", sw.To == primary.Addr())
	// Output:
	// accounts: 8
	// primary ejected true
	// fallback to the fallback: true
	// primary readmitted true
	// recovery to the primary: true
}

// Several databases of one instance over one GCPMultiEndpoint: one set of pools, health
// probes, metrics and status for all of them. Closing a client leaves the others serving;
// gme.Close alone closes the GCPMultiEndpoint.
func ExampleNewClient() {
	database, eps, opts, stop := fakeSpanner(2)
	defer stop()
	ctx := context.Background()

	gme, err := spannerme.NewGCPMultiEndpointForSpanner(database, offlineConfig, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {Endpoints: []string{eps[0].Addr(), eps[1].Addr()}, RecoveryTimeout: time.Second},
		},
		Default: "default",
	}, spannerme.Settings{}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer gme.Close() // after the clients: nothing else closes it

	// The in-memory Spanner serves every database name from one store; a real instance has
	// a database of each name.
	orders, err := spannerme.NewClient(ctx, database, gme, offlineConfig, opts...)
	if err != nil {
		log.Fatal(err)
	}
	billing, err := spannerme.NewClient(ctx, database[:strings.LastIndex(database, "/")]+"/billing", gme, offlineConfig, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer billing.Close()
	fmt.Println("accounts:", countAccounts(ctx, orders), countAccounts(ctx, billing))
	fmt.Println("clients:", gme.Status().Clients)

	orders.Close() // gme stays open for billing
	fmt.Println("clients:", gme.Status().Clients, "closed:", gme.Status().Closed)
	fmt.Println("accounts:", countAccounts(ctx, billing))
	// Output:
	// accounts: 8 8
	// clients: 2
	// clients: 1 closed: false
	// accounts: 8
}

// database/sql through go-sql-spanner: its ConnectorConfig.Configurator takes the function
// Configurator returns, and every Spanner client the driver creates then goes through gme:
//
//	connector, err := spannerdriver.CreateConnector(spannerdriver.ConnectorConfig{
//		Project: "p", Instance: "i", Database: "d",
//		Configurator: spannerme.Configurator(gme),
//	})
//	db := sql.OpenDB(connector)
//
// The driver calls the function once, when it creates the connector, and keeps the config
// and options; it creates a Spanner client with them on the first Connect, closes it when
// its last connection closes, and creates the next with the same options. gme serves them in
// turn and is closed by gme.Close alone. Here the driver's steps are written out.
func ExampleConfigurator() {
	database, eps, opts, stop := fakeSpanner(1)
	defer stop()
	ctx := context.Background()

	gme, err := spannerme.NewGCPMultiEndpointForSpanner(database, offlineConfig, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{"default": {Endpoints: []string{eps[0].Addr()}}},
		Default:        "default",
	}, spannerme.Settings{}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer gme.Close()

	// CreateConnector: the Configurator, once.
	config, clientOpts := offlineConfig, append([]option.ClientOption(nil), opts...)
	spannerme.Configurator(gme)(&config, &clientOpts)
	for range 2 { // two driver lifetimes: the last connection closes, a new one opens
		client, err := spanner.NewClientWithConfig(ctx, database, config, clientOpts...)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("accounts:", countAccounts(ctx, client))
		client.Close()
		fmt.Println("gme closed:", gme.Status().Closed)
	}
	// Output:
	// accounts: 8
	// gme closed: false
	// accounts: 8
	// gme closed: false
}
