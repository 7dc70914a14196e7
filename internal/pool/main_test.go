package pool

import (
	"testing"

	"go.uber.org/goleak"
)

// Monitors, probes and gRPC's own goroutines: none may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
