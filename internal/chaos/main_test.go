package chaos

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

func TestMain(m *testing.M) {
	fixture.DisableGCEDetection() // before any Spanner client probes the metadata server
	// go.opencensus.io, a dependency of the Spanner client, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
