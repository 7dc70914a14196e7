package spannerme_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// Hedged reads: a single-use query that has no answer from the group's current endpoint
// after 50ms is sent to the other endpoint too, and the first answer is the query's.
func ExampleHedgingSettings() {
	database, eps, opts, stop := fakeSpanner(1)
	defer stop()
	backend := eps[0].Backend()
	slow, err := spannermetest.NewFrontend(backend)
	if err != nil {
		log.Fatal(err)
	}
	defer slow.Close()
	other, err := spannermetest.NewFrontend(backend)
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()

	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, database, offlineConfig, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {Endpoints: []string{slow.Addr(), other.Addr()}},
		},
		Default: "default",
	}, spannerme.Settings{
		Hedging: map[string]spannerme.HedgingSettings{
			"default": {Delay: 50 * time.Millisecond}, // Budget: 5% of the hedgeable calls (10 saved up at first)
		},
	}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	countAccounts(ctx, client)
	deadline := time.Now().Add(10 * time.Second)
	for ready := false; !ready && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) { // the other endpoint connects
		for _, e := range gme.Status().Groups[0].Endpoints {
			ready = ready || (e.Endpoint == other.Addr() && e.State == spannerme.Available)
		}
	}

	slow.SetLatency(5 * time.Second) // the current endpoint stalls
	start := time.Now()
	fmt.Println("accounts:", countAccounts(ctx, client))
	fmt.Println("answered before the stall ended:", time.Since(start) < 5*time.Second)
	for _, g := range gme.Status().Groups {
		fmt.Printf("%s: %d sent, %d won\n", g.Name, g.Hedging.Sent, g.Hedging.Won)
	}
	// Output:
	// accounts: 8
	// answered before the stall ended: true
	// default: 1 sent, 1 won
}
