//go:build linux

package main

import (
	"bufio"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/spannerme/spanner-multiendpoint/internal/chaos"
)

// raceBanner starts every report of the race detector.
const raceBanner = "WARNING: DATA RACE"

// watchRaces counts the race detector's reports when the binary is built with -race; see
// watchStderr. It returns nil (not counted) without -race.
func watchRaces() func() int {
	if !chaos.RaceEnabled {
		return nil
	}
	return watchStderr(raceBanner)
}

// watchStderr counts the lines holding banner that anything writes to file descriptor 2,
// where the race detector writes its reports: a pipe takes the descriptor's place and a
// goroutine copies every line through to the real stderr, counting. The returned function
// puts the real stderr back, waits for the copy to drain, and returns the count; call it at
// the end of the run (later calls return the same count). It returns nil if the descriptors
// cannot be rearranged.
func watchStderr(banner string) func() int {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil
	}
	orig, err := syscall.Dup(2)
	if err != nil {
		pr.Close()
		pw.Close()
		return nil
	}
	if err := syscall.Dup3(int(pw.Fd()), 2, 0); err != nil {
		pr.Close()
		pw.Close()
		syscall.Close(orig)
		return nil
	}
	realStderr := os.NewFile(uintptr(orig), "stderr")
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, banner) {
				n++
			}
			_, _ = realStderr.WriteString(line + "\n")
		}
	}()
	return sync.OnceValue(func() int {
		_ = syscall.Dup3(orig, 2, 0) // the real stderr is back on 2; the pipe's last writer is pw
		pw.Close()
		<-done
		pr.Close()
		return n
	})
}
