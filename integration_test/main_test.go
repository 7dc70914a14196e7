// Package integration_test runs one suite of end-to-end scenarios twice: against the
// in-memory Spanner (spannertest) and against the real Cloud Spanner emulator. In both cases
// the Spanner client reaches ONE backend through three fake PSC endpoints (spannermetest), so
// that sessions survive a failover (F7), and SPANNER_EMULATOR_HOST is never set (F8).
//
// Subtests are named TestIntegration/<backend>/<scenario>. The emulator subtests share one
// emulator process per test binary (stopped in TestMain) with a fresh database per test; they
// skip loudly when the emulator binary is not installed, and fail instead under CI=true.
package integration_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

func TestMain(m *testing.M) {
	fixture.DisableGCEDetection() // before any Spanner client probes the metadata server
	goleak.VerifyTestMain(emulator.StopSharedAfter(m),
		// Started by the init of go.opencensus.io/stats/view (imported by the Spanner
		// client); it lives as long as the process.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// backend is ONE Spanner database that every fake endpoint of a test forwards to.
type backend struct {
	name     string // "spannertest" or "emulator"
	addr     string // the backend's gRPC address, 127.0.0.1:port
	database string // projects/P/instances/I/databases/D
	// writers is how many goroutines may run read-write transactions at once: the emulator
	// fails concurrent read-write transactions ("Transaction not found") even for a plain
	// client, so it gets one.
	writers int
}

// backendKind starts a fresh, seeded backend for one test.
type backendKind struct {
	name  string
	start func(t *testing.T) backend
}

var backendKinds = []backendKind{
	{"spannertest", startSpannertest},
	{"emulator", startEmulator},
}

// startSpannertest starts an in-memory Spanner with the schema and the seed rows; it is
// closed at the end of the test.
func startSpannertest(t *testing.T) backend {
	t.Helper()
	srv, db := fixture.StartSpannertest(t)
	b := backend{name: "spannertest", addr: srv.Addr, database: db, writers: 2}
	seed(t, b)
	return b
}

// startEmulator creates a fresh database with the schema and the seed rows in the test
// binary's shared emulator.
func startEmulator(t *testing.T) backend {
	t.Helper()
	emu := emulator.Shared(t) // skips (or fails under CI=true) without the binary
	ddl, err := fixture.Schema()
	if err != nil {
		t.Fatal(err)
	}
	b := backend{name: "emulator", addr: emu.Addr(), database: emu.NewDatabase(t, ddl), writers: 1}
	seed(t, b)
	return b
}

// seed writes the seed rows through a direct client (no fake endpoint in between).
func seed(t *testing.T, b backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct, err := fixture.NewClient(ctx, b.addr, b.database)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := fixture.Seed(ctx, direct); err != nil {
		t.Fatalf("seeding %s: %v", b.name, err)
	}
}

// scenario is one end-to-end story, run once per backend.
type scenario struct {
	name string
	run  func(t *testing.T, b backend)
}

var scenarios = []scenario{
	{"reads_and_transactions_by_group", testReadsAndTransactionsByGroup},
	{"primary_down_under_load", testPrimaryDownUnderLoad},
	{"primary_blackholed_under_load", testPrimaryBlackholedUnderLoad},
	{"switch_back_after_switching_delay", testSwitchBack},
	{"all_endpoints_down_then_recover", testAllDownThenRecover},
	{"reconfiguration_under_load", testReconfigurationUnderLoad},
	{"close_with_every_endpoint_blackholed", testCloseAllBlackholed},
	{"directed_reads_by_group", testDirectedReadsByGroup},
}

func TestIntegration(t *testing.T) {
	for _, k := range backendKinds {
		t.Run(k.name, func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					sc.run(t, k.start(t))
				})
			}
		})
	}
}
