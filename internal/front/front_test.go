package front

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Google API transport, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// fakeConn counts what its fronts do to it; closed refuses new fronts.
type fakeConn struct {
	closed                bool
	added, dropped, close int
}

func (c *fakeConn) InvokeID(context.Context, string, any, any, string, []grpc.CallOption) error {
	return nil
}
func (c *fakeConn) NewStreamID(context.Context, *grpc.StreamDesc, string, string, []grpc.CallOption) (grpc.ClientStream, error) {
	return nil, nil
}
func (c *fakeConn) Add(*Front) bool {
	if c.closed {
		return false
	}
	c.added++
	return true
}
func (c *fakeConn) Drop(*Front)  { c.dropped++ }
func (c *fakeConn) Close() error { c.close++; return nil }

// What the closing of a front's connection does, by kind: the owner's closes the
// GCPMultiEndpoint every time, a NewClient client's drops the front once, a Configurator's
// does nothing; a closed connection gives no front.
func TestFrontRelease(t *testing.T) {
	for _, tc := range []struct {
		name               string
		kind               Kind
		wantDrop, wantStop int
	}{
		{"owner", Owner, 0, 2},
		{"client", Client, 1, 0},
		{"configurator", Configurator, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeConn{}
			f, ok := New(c, tc.kind, nil)
			if !ok || f.Kind() != tc.kind || len(f.Options()) == 0 || c.added != 1 {
				t.Fatalf("New: %v, kind %v, %d options, %d added", ok, f.Kind(), len(f.Options()), c.added)
			}
			f.Release()
			f.Release()
			if c.dropped != tc.wantDrop || c.close != tc.wantStop {
				t.Fatalf("after two releases: %d drops, %d closes; want %d, %d", c.dropped, c.close, tc.wantDrop, tc.wantStop)
			}
		})
	}
	if f, ok := New(&fakeConn{closed: true}, Client, nil); ok || f != nil {
		t.Fatal("a closed connection gave a front")
	}
}

// A refused pool fails every unary call and stream at once with its error, and its Close
// leaves it usable for the next client.
func TestRefusedFailsEveryCall(t *testing.T) {
	want := status.Error(codes.FailedPrecondition, "spannerme: refused")
	p, err := NewRefused(want)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Invoke(context.Background(), "/google.spanner.v1.Spanner/GetSession", nil, nil); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("Invoke: %v, want the refusal", err)
		}
		if _, err := p.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, "/google.spanner.v1.Spanner/ExecuteStreamingSql"); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("NewStream: %v, want the refusal", err)
		}
		if err := p.Close(); err != nil || p.Num() != 1 || p.Conn() == nil {
			t.Fatalf("Close: %v; Num %d, Conn %v", err, p.Num(), p.Conn())
		}
	}
}
