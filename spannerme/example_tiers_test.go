package spannerme_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// Tiers: two endpoints of equal priority (two zones of one region) share the calls, over a
// third (another region) that takes them only when both are down. The group's Endpoints are
// its tiers flattened.
func ExampleTierSettings() {
	database, eps, opts, stop := fakeSpanner(3)
	defer stop()
	zoneA, zoneB, region2 := eps[0].Addr(), eps[1].Addr(), eps[2].Addr()
	ctx := context.Background()

	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, database, offlineConfig, &grpcgcp.GCPMultiEndpointOptions{
		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
			"default": {Endpoints: []string{zoneA, zoneB, region2}, RecoveryTimeout: time.Second},
		},
		Default: "default",
	}, spannerme.Settings{Tiers: map[string]spannerme.TierSettings{
		"default": {Tiers: [][]string{{zoneA, zoneB}, {region2}}, SlowStart: 20 * time.Second},
	}}, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	gme.Status() // the first sample of the members' shares
	for range 200 {
		countAccounts(ctx, client)
	}
	tiers := gme.Status().Groups[0].Tiers
	fmt.Println("tiers:", len(tiers.Tiers), "current tier:", tiers.CurrentTier)
	for _, m := range tiers.Members {
		fmt.Printf("tier %d, served calls: %v\n", m.Tier, m.Share > 0)
	}
	// Output:
	// tiers: 2 current tier: 0
	// tier 0, served calls: true
	// tier 0, served calls: true
	// tier 1, served calls: false
}
