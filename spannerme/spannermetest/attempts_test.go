package spannermetest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Each call is recorded with its request ID, method and the code it got, injected or
// forwarded, within the limit; ResetStats forgets them; a frontend without the option keeps
// none.
func TestFrontendRecordsAttempts(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr, WithAttemptRecording(3))
	plain := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	call := func(id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if id != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, id)
		}
		_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{})
		return err
	}
	if err := call("1.a.1.1.1.1"); err != nil {
		t.Fatal(err)
	}
	if err := f.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	if err := call("1.a.1.1.2.1"); status.Code(err) != codes.Unavailable {
		t.Fatalf("call during FailAll: %v", err)
	}
	f.Pass()
	for _, id := range []string{"", "1.a.1.1.3.1"} { // the limit keeps the first only
		if err := call(id); err != nil {
			t.Fatal(err)
		}
	}
	const m = "/grpc.testing.TestService/UnaryCall"
	want := []Attempt{
		{Frontend: f.Addr(), Method: m, RequestID: "1.a.1.1.1.1", Code: codes.OK},
		{Frontend: f.Addr(), Method: m, RequestID: "1.a.1.1.2.1", Code: codes.Unavailable, Injected: true},
		{Frontend: f.Addr(), Method: m, Code: codes.OK},
	}
	got := f.Attempts()
	if len(got) != len(want) {
		t.Fatalf("Attempts() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("attempt %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	f.ResetStats()
	if got := f.Attempts(); len(got) != 0 || got == nil {
		t.Errorf("Attempts() after ResetStats = %#v, want empty", got)
	}
	if got := plain.Attempts(); got != nil {
		t.Errorf("Attempts() without WithAttemptRecording = %+v, want nil", got)
	}
	if _, err := NewFrontend(b.addr, WithAttemptRecording(0)); err == nil {
		t.Error("WithAttemptRecording(0) accepted")
	}
}

// SetRetryDelay adds a RetryInfo to the injected errors, across mode changes, until it is
// set to zero.
func TestFrontendRetryDelay(t *testing.T) {
	b := startTestBackend(t)
	f := NewFrontendTB(t, b.addr)
	tc := testClient(t, f.Addr())
	delayOf := func() (time.Duration, bool) {
		err := unary(tc, "x")
		wantCode(t, "unary", err, codes.ResourceExhausted)
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration(), true
			}
		}
		return 0, false
	}
	f.SetRetryDelay(3 * time.Second)
	if err := f.FailAll(codes.ResourceExhausted); err != nil {
		t.Fatal(err)
	}
	if d, ok := delayOf(); !ok || d != 3*time.Second {
		t.Fatalf("RetryInfo = %v (%v), want 3s", d, ok)
	}
	f.SetRetryDelay(0)
	if d, ok := delayOf(); ok {
		t.Fatalf("RetryInfo %v after SetRetryDelay(0)", d)
	}
}
