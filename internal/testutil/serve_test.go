package testutil

import (
	"io"
	"net"
	"testing"
	"time"
)

// A handler blocked on a connection the client keeps open ends at the test's cleanup, which
// closes the connection: the client then reads EOF.
func TestServeClosesOpenConnectionsAtCleanup(t *testing.T) {
	var client net.Conn
	reading, done := make(chan struct{}), make(chan struct{})
	t.Run("serving", func(t *testing.T) {
		addr := Serve(t, func(c net.Conn) {
			defer close(done)
			if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
				return
			}
			close(reading)
			_, _ = io.Copy(io.Discard, c) // until the cleanup closes c
		})
		var err error
		if client, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-reading:
		case <-time.After(5 * time.Second):
			t.Fatal("the handler did not read within 5s")
		}
	})
	defer client.Close()
	select {
	case <-done:
	default:
		t.Fatal("the handler had not returned when the cleanup did")
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("client read after the cleanup: %v, want EOF", err)
	}
}
