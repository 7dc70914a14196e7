package spannermetest_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

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

// A fake Google frontend in front of a gRPC backend (here the standard
// health service; in real tests spannertest or the Spanner emulator): it
// forwards calls, then fails every call with UNAVAILABLE while the client's
// connection stays up, then forwards again.
func ExampleFrontend() {
	// The one backend.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()

	fe, err := spannermetest.NewFrontend(ln.Addr().String(),
		spannermetest.WithMaxConcurrentStreams(spannermetest.GoogleFrontendMaxConcurrentStreams))
	if err != nil {
		log.Fatal(err)
	}
	defer fe.Close()

	conn, err := grpc.NewClient(fe.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	check := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Printf("%-9s %v %v\n", fe.Mode().String()+":", resp.GetStatus(), status.Code(err))
	}

	check()
	if err := fe.FailAll(codes.Unavailable); err != nil {
		log.Fatal(err)
	}
	check()
	fe.Pass()
	check()

	st := fe.Stats()
	fmt.Printf("forwarded %d, failed %d, over %d connection(s)\n", st.Forwarded, st.Failed, st.Accepted)
	fmt.Printf("%+v\n", st.Methods["/grpc.health.v1.Health/Check"])

	// Output:
	// pass:     SERVING OK
	// fail-all: UNKNOWN Unavailable
	// pass:     SERVING OK
	// forwarded 2, failed 1, over 1 connection(s)
	// {Received:3 Forwarded:2 Failed:1 Hung:0}
}
