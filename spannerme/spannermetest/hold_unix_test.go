//go:build unix

package spannermetest

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// While Down, the endpoint's port stays bound: another listener cannot take it (tests of
// other packages run at the same time and listen on 127.0.0.1:0), dials are refused, and Up
// listens on it again.
func TestDownKeepsThePort(t *testing.T) {
	e := NewEndpointTB(t, startEcho(t).addr())
	e.Down()
	if ln, err := net.Listen("tcp4", e.Addr()); err == nil {
		ln.Close()
		t.Fatal("another listener took the port of a Down endpoint")
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listening on a Down endpoint's port: %v, want EADDRINUSE", err)
	}
	if c, err := net.DialTimeout("tcp4", e.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("a dial to a Down endpoint connected")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a Down endpoint: %v, want ECONNREFUSED", err)
	}
	if err := e.Up(); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, dial(t, e.Addr()), []byte("back"))
	e.Down()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", e.Addr()) // Close frees the port
	if err != nil {
		t.Fatalf("the port of a closed endpoint: %v", err)
	}
	ln.Close()
}
