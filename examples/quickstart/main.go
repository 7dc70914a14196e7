// Command quickstart is the quick start of docs/quickstart.md: one Spanner client over two
// MultiEndpoints of fake PSC endpoints, routing by context, failover and status. It runs
// offline as it is (go run ./examples/quickstart): an in-memory Spanner stands in for Cloud
// Spanner, and fake PSC endpoints (TCP proxies on 127.0.0.1) for real ones.
//
// With real PSC endpoints, drop the "offline" block, write endpoints such as
// "psc-east4.p.googleapis.com:443", your database path, and no client options: the client
// then uses TLS and Application Default Credentials.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Offline: an in-memory Spanner with one table, and three fake PSC endpoints in front of
	// it (all endpoints of one Spanner instance reach the same data).
	sp, err := spannermetest.NewSpanner("CREATE TABLE Greetings (Id INT64 NOT NULL, Text STRING(MAX)) PRIMARY KEY (Id)")
	if err != nil {
		log.Fatal(err)
	}
	defer sp.Close()
	east, eastFallback, west := newEndpoint(sp.Addr()), newEndpoint(sp.Addr()), newEndpoint(sp.Addr())
	defer east.Close()
	defer eastFallback.Close()
	defer west.Close()
	database, config, opts := sp.Database(), spannermetest.ClientConfig(), spannermetest.ClientOptions()

	// Two MultiEndpoints: "default" (east, then its fallback) and "west" (west, then east).
	client, gme, err := spannerme.NewMultiEndpointClientWithConfig(ctx, database, config, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {
				Endpoints:       []string{east.Addr(), eastFallback.Addr()}, // e.g. psc-east4:443, psc-east4-fallback:443
				RecoveryTimeout: 500 * time.Millisecond,                     // how long a down endpoint may recover
				SwitchingDelay:  2 * time.Second,                            // how long a recovered one must stay up
			},
			"west": {Endpoints: []string{west.Addr(), east.Addr()}, RecoveryTimeout: 500 * time.Millisecond},
		},
		Default: "default",
	}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // also closes gme and every endpoint's pool

	if _, err := client.Apply(ctx, []*spanner.Mutation{
		spanner.Insert("Greetings", []string{"Id", "Text"}, []any{1, "hello from spannerme"}),
	}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("default group:", read(ctx, client), "- current endpoint is east:", current(gme, "default") == east.Addr())

	// Route a call to the "west" group by its context.
	before := west.Stats().BytesFromBackend
	text := read(spannerme.NewMEContext(ctx, "west"), client)
	fmt.Println("west group:   ", text, "- served by west:", west.Stats().BytesFromBackend > before)

	// East goes down: the Spanner client's retry of the refused read goes to the fallback at
	// once (retry elsewhere), and after RecoveryTimeout the default group fails over to it.
	east.Down()
	before = eastFallback.Stats().BytesFromBackend
	text = read(ctx, client)
	fmt.Println("east down:    ", text, "- served by the fallback:", eastFallback.Stats().BytesFromBackend > before)
	for deadline := time.Now().Add(10 * time.Second); current(gme, "default") != eastFallback.Addr(); {
		if time.Now().After(deadline) {
			log.Fatal("the default group did not fail over within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("failed over:   current endpoint is the fallback:", current(gme, "default") == eastFallback.Addr())

	for _, g := range gme.Status().Groups {
		fmt.Printf("group %-7s current %s\n", g.Name, name(g.Current, east, eastFallback, west))
		for _, e := range g.Endpoints {
			fmt.Printf("  %d %-13s %s\n", e.Priority, name(e.Endpoint, east, eastFallback, west), e.State)
		}
	}
}

func newEndpoint(backend string) *spannermetest.Endpoint {
	e, err := spannermetest.NewEndpoint(backend)
	if err != nil {
		log.Fatal(err)
	}
	return e
}

// read reads the greeting; a failing endpoint makes the Spanner client retry.
func read(ctx context.Context, client *spanner.Client) string {
	row, err := client.Single().ReadRow(ctx, "Greetings", spanner.Key{1}, []string{"Text"})
	if err != nil {
		log.Fatal(err)
	}
	var text string
	if err := row.Column(0, &text); err != nil {
		log.Fatal(err)
	}
	return text
}

func current(gme *spannerme.GCPMultiEndpoint, group string) string {
	for _, g := range gme.Status().Groups {
		if g.Name == group {
			return g.Current
		}
	}
	return ""
}

// name turns a fake endpoint's address back into the PSC endpoint it stands for.
func name(addr string, east, eastFallback, west *spannermetest.Endpoint) string {
	switch addr {
	case east.Addr():
		return "east"
	case eastFallback.Addr():
		return "east-fallback"
	case west.Addr():
		return "west"
	}
	return addr
}
