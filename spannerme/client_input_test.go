package spannerme

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// acceptsWithin reports whether ln accepts a connection within d: one a client opened
// before (the kernel queues it until it is accepted) or opens meanwhile.
func acceptsWithin(t *testing.T, ln *net.TCPListener, d time.Duration) bool {
	t.Helper()
	if err := ln.SetDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("accept: %v", err)
		}
		return false
	}
	c.Close()
	return true
}

// A database path that is not projects/P/instances/I/databases/D is refused by the client
// constructors with a *ConfigError naming it, before any endpoint is dialed: the endpoint's
// listener accepts no connection. The same listener accepts one from a constructor given a
// well-formed path, so it would have seen a dial.
func TestClientRefusesMalformedDatabaseBeforeDialing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.(*net.TCPListener)
	defer ln.Close()
	o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(time.Hour, 0, ln.Addr().String())})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, db := range []string{"x", "", "projects/p/instances/i", "projects/p/instances/i/databases/d/extra", "projects//instances/i/databases/d"} {
		client, gme, err := NewMultiEndpointClientWithSettings(ctx, db, fixture.ClientConfig(), o, fastSettings(nil), clientOptions()...)
		var ce *ConfigError
		if err == nil || client != nil || gme != nil || !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) ||
			!strings.Contains(err.Error(), `database "`+db+`" is not projects/P/instances/I/databases/D`) {
			t.Errorf("database %q: %v, %v, %v; want a *ConfigError naming it and nothing else", db, client, gme, err)
		}
		if client != nil {
			client.Close()
		}
	}
	if acceptsWithin(t, ln, 300*time.Millisecond) {
		t.Fatal("the endpoint was dialed for a malformed database path")
	}

	client, gme, err := NewMultiEndpointClientWithSettings(ctx, fixture.SpannertestDatabase, fixture.ClientConfig(), o, fastSettings(nil), clientOptions()...)
	if err != nil {
		t.Fatalf("well-formed path: %v", err)
	}
	defer gme.Close()
	defer client.Close()
	if !acceptsWithin(t, ln, 10*time.Second) {
		t.Fatal("the endpoint was not dialed for a well-formed path: the listener would not see a dial")
	}
}
