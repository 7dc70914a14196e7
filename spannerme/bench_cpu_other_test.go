//go:build !unix

package spannerme

import "time"

// processCPU is not measured here: benchmarks leave out their CPU metrics.
func processCPU() (time.Duration, bool) { return 0, false }
