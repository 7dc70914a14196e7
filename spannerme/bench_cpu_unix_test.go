//go:build unix

package spannerme

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used so far, from
// getrusage(RUSAGE_SELF): all of its threads, the in-process servers' included.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processCPU advances while the process computes: the CPU metrics of the benchmarks are
// measured, not made up.
func TestProcessCPUAdvancesWithWork(t *testing.T) {
	start, ok := processCPU()
	if !ok {
		t.Fatal("getrusage failed")
	}
	deadline := time.Now().Add(20 * time.Second)
	x := uint64(1)
	for {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		now, ok := processCPU()
		if !ok {
			t.Fatal("getrusage failed")
		}
		if now-start >= 10*time.Millisecond {
			break
		}
		if now < start || time.Now().After(deadline) {
			t.Fatalf("CPU time went from %v to %v in 20s of computing (%d)", start, now, x)
		}
	}
}
