package testutil

import (
	"net"
	"testing"
)

// ClosedAddr returns a loopback address where nothing listens: connections to it are
// refused (until another listener happens to take the port).
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}
