// Package plaintext tells whether a connection dialed with a caller's client options would
// speak plaintext, without sending anything on the network, so that the client constructors
// can refuse to send credentials over it (docs/transport.md, "No credentials in plaintext").
//
// gRPC does not refuse Google's credentials on a plaintext connection (they do not ask for
// transport security), and the caller's dial options are opaque values: the only way to know
// what they do is to dial with them. Dials does so over an in-memory pipe and reads the first
// bytes the connection writes: HTTP/2's client preface (RFC 9113, section 3.4) on a plaintext
// connection, a TLS ClientHello otherwise.
package plaintext

import (
	"context"
	"io"
	"net"
	"time"

	vkit "cloud.google.com/go/spanner/apiv1"
	"google.golang.org/api/option"
	"google.golang.org/api/option/internaloption"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
)

// preface is what a gRPC client writes first on a plaintext connection (RFC 9113, section
// 3.4); on a TLS connection it writes a ClientHello first.
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Timeout bounds Dials' wait for the first bytes of its in-memory connection.
const Timeout = 5 * time.Second

// Dials reports whether a connection dialed with opts (the Spanner API's defaults first, as
// the pools are dialed) speaks plaintext. It dials one connection with them, without
// credentials (so nothing is looked up or sent), over an in-memory pipe, and reads its first
// bytes while the dial runs: the answer does not depend on whether the dial returns before
// the connection is ready (grpc.WithBlock, grpc.WithReturnConnectionError), since the client
// writes those bytes before it waits for the server, which never answers here. A dial that
// fails, or writes nothing within Timeout, is taken as not plaintext: the pools' own dial
// reports the error. Safe for concurrent use; it returns once the dial has ended.
func Dials(opts []option.ClientOption) bool {
	client, server := net.Pipe()
	defer server.Close()
	all := append(vkit.DefaultClientOptions(), opts...)
	all = append(all, internaloption.SkipDialSettingsValidation(), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return client, nil })),
		option.WithEndpoint("passthrough:///spannerme-transport-probe"), option.WithGRPCConnectionPool(1), option.WithGRPCConn(nil))
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	dialed := make(chan *grpc.ClientConn, 1)
	go func() {
		cc, err := gtransport.Dial(ctx, all...)
		if err != nil {
			client.Close()
			dialed <- nil
			return
		}
		cc.Connect()
		dialed <- cc
	}()
	_ = server.SetReadDeadline(time.Now().Add(Timeout))
	first := make([]byte, len(preface))
	_, err := io.ReadFull(server, first)
	// A blocking dial waits for the server's answer: end it now.
	cancel()
	server.Close()
	if cc := <-dialed; cc != nil {
		cc.Close()
	}
	return err == nil && string(first) == preface
}
