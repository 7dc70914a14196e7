//go:build linux

package main

import (
	"syscall"
	"testing"
)

func writeFD2(t *testing.T, s string) {
	t.Helper()
	if _, err := syscall.Write(2, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

func TestWatchStderrCountsBannersAndPassesEverythingOn(t *testing.T) {
	stop := watchStderr("TEST BANNER 7f3a")
	if stop == nil {
		t.Skip("file descriptor 2 cannot be rearranged here")
	}
	// What the race detector does: write straight to file descriptor 2.
	writeFD2(t, "TEST BANNER 7f3a: first\nsomething else\n")
	writeFD2(t, "again TEST BANNER 7f3a\n")
	if n := stop(); n != 2 {
		t.Errorf("counted %d banners, want 2", n)
	}
	if n := stop(); n != 2 {
		t.Errorf("a second call counted %d, want the same 2", n)
	}
}
