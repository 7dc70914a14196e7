package spannerreq

import (
	"testing"

	"go.uber.org/goleak"
)

// The Spanner client's package starts OpenCensus's view worker at init, for good.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
