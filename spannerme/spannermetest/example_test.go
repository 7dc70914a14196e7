package spannermetest_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"sync"

	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// Two fake PSC endpoints in front of one shared backend (here a TCP echo
// server; in real tests a gRPC server or the Spanner emulator). Stats tell
// which endpoint carried the traffic.
func Example() {
	// The one backend.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_, _ = io.Copy(c, c) // echo until the client closes
				_ = c.Close()
			})
		}
	})
	defer wg.Wait()
	defer ln.Close()

	e1, err := spannermetest.NewEndpoint(ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer e1.Close()
	e2, err := spannermetest.NewEndpoint(ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer e2.Close()

	// Send "hello" through E1 and read the echo.
	c, err := net.Dial("tcp4", e1.Addr())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("echo via E1: %s\n", buf)

	// Bytes are counted as soon as the endpoint receives them, so after
	// the echo the counts are final.
	fmt.Printf("E1: %+v\n", e1.Stats())
	fmt.Printf("E2: %+v\n", e2.Stats())

	// E1 goes down: its port refuses connections; E2 still reaches the
	// same backend.
	e1.Down()
	if _, err := net.Dial("tcp4", e1.Addr()); err != nil {
		fmt.Println("E1 is", e1.Mode())
	}

	// Output:
	// echo via E1: hello
	// E1: {Accepted:1 Active:1 BytesToBackend:5 BytesFromBackend:5}
	// E2: {Accepted:0 Active:0 BytesToBackend:0 BytesFromBackend:0}
	// E1 is down
}
