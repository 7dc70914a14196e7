package health

import (
	"testing"

	"go.uber.org/goleak"
)

// The real clock's timers run on goroutines of their own: none may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
