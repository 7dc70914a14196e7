package testutil

import (
	"net"
	"sync"
	"testing"
)

// Serve accepts connections on 127.0.0.1:0 and hands each to handle on a goroutine of its
// own, closing the connection when handle returns. It returns the listener's address. The
// test's cleanup closes the listener and every connection still open (which ends a handle
// blocked on one), and waits for every handle to return.
func Serve(tb testing.TB, handle func(net.Conn)) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex // guards conns
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case add && conns == nil: // cleaned up
			return false
		case add:
			conns[c] = true
		default:
			delete(conns, c)
		}
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			if !track(c, true) {
				c.Close()
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer track(c, false)
				defer c.Close()
				handle(c)
			}()
		}
	}()
	tb.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	return lis.Addr().String()
}
