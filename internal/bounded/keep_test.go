package bounded

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// What decisions read of an error survives Keep, cut to n bytes: the code, the message, the
// small details (a RetryInfo), the context errors; a large message or detail does not.
func TestKeep(t *testing.T) {
	const n = 64
	big := strings.Repeat("x", 8<<20)
	retry, err := status.New(codes.ResourceExhausted, big).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	huge, err := status.New(codes.Unavailable, "region down").WithDetails(&errdetails.DebugInfo{Detail: big},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	cut := func(s string) string { return Text(s, n) }
	for _, tc := range []struct {
		name     string
		err      error
		isStatus bool
		code     codes.Code
		message  string
		details  int   // kept
		is       error // errors.Is holds
	}{
		{"a status with an 8 MB message", status.Error(codes.Unavailable, big), true, codes.Unavailable, cut(big), 0, nil},
		{"a short status", status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"), true,
			codes.Internal, cut("stream terminated by RST_STREAM with error code: INTERNAL_ERROR"), 0, nil},
		{"a RetryInfo is kept", retry.Err(), true, codes.ResourceExhausted, cut(big), 1, nil},
		{"a detail over n is skipped, the RetryInfo after it kept", huge.Err(), true, codes.Unavailable, "region down", 1, nil},
		{"a wrapped status keeps the wrapped message", fmt.Errorf("attempt 2: %w", status.Error(codes.Unavailable, "transport is closing")), true,
			codes.Unavailable, "transport is closing", 0, nil},
		{"a context's deadline", fmt.Errorf("probe: %w", context.DeadlineExceeded), false, codes.Unknown, "", 0, context.DeadlineExceeded},
		{"a status of a canceled context", status.FromContextError(context.Canceled).Err(), true, codes.Canceled, "context canceled", 0, nil},
		{"a plain error", errors.New(big), false, codes.Unknown, "", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := Keep(tc.err, n)
			if want := Text(tc.err.Error(), n); k.Error() != want {
				t.Errorf("text %.100q, want %.100q", k.Error(), want)
			}
			s, ok := status.FromError(k)
			if ok != tc.isStatus {
				t.Fatalf("status.FromError ok = %v, want %v", ok, tc.isStatus)
			}
			if tc.isStatus {
				if s.Code() != tc.code || s.Message() != tc.message || len(s.Details()) != tc.details {
					t.Errorf("status %v %.100q with %d details, want %v %.100q with %d", s.Code(), s.Message(), len(s.Details()), tc.code, tc.message, tc.details)
				}
				if tc.details > 0 {
					if ri, ok := s.Details()[0].(*errdetails.RetryInfo); !ok || ri.GetRetryDelay().AsDuration() <= 0 {
						t.Errorf("detail %v, want the RetryInfo", s.Details()[0])
					}
				}
			}
			if tc.is != nil && !errors.Is(k, tc.is) {
				t.Errorf("errors.Is(kept, %v) = false", tc.is)
			}
			if size := len(k.Error()) + len(s.Message()); size > 2*(n+len("…[cut: 8388608 bytes in all]")) {
				t.Errorf("the kept error holds %d bytes of text", size)
			}
		})
	}
	if Keep(nil, n) != nil {
		t.Error("Keep(nil) is not nil")
	}
}

// bigError is an error with a gRPC status, whose collection a weak pointer can see.
type bigError struct{ s *status.Status }

func (e *bigError) Error() string              { return e.s.String() }
func (e *bigError) GRPCStatus() *status.Status { return e.s }

// The kept error holds nothing of the error it was made from: once that is dropped, the
// garbage collector frees it (with its 8 MB) while the kept one lives.
func TestKeepDropsTheError(t *testing.T) {
	err := &bigError{s: status.New(codes.Unavailable, strings.Repeat("x", 8<<20))}
	wp := weak.Make(err)
	k := Keep(fmt.Errorf("wrapped: %w", err), ServerText)
	err = nil
	runtime.GC()
	if wp.Value() != nil {
		t.Fatal("the error Keep was given is still reachable after a GC")
	}
	if status.Code(k) != codes.Unavailable || len(k.Error()) > ServerText+len("…[cut: 8388636 bytes in all]") {
		t.Fatalf("kept: %v, %d bytes", status.Code(k), len(k.Error()))
	}
	runtime.KeepAlive(k)
}
