package export

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Google API transport, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
