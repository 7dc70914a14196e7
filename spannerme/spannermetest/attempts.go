package spannermetest

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// RequestIDHeader is the Spanner client's request-ID header, which names the request and
// the attempt of each call (cloud.google.com/go/spanner v1.96.1, request_id_header.go:
// version.process.client.channel.request.attempt).
const RequestIDHeader = "x-goog-spanner-request-id"

// WithAttemptRecording makes the frontend record each call it receives, up to limit calls
// (later ones are not kept), for [Frontend.Attempts]: its method, its Spanner request ID
// and the code the frontend answered with, so that a test with several frontends can tell
// which endpoint served each attempt of a request. Without it nothing is kept. A limit below
// 1 makes [NewFrontend] fail.
func WithAttemptRecording(limit int) FrontendOption {
	return func(o *frontendOptions) {
		if limit < 1 {
			o.errs = append(o.errs, fmt.Errorf("WithAttemptRecording(%d): limit below 1", limit))
			return
		}
		o.attempts = limit
	}
}

// Attempt is one call a [Frontend] received ([WithAttemptRecording]).
type Attempt struct {
	// Frontend is the address of the frontend that received the call ([Frontend.Addr]).
	Frontend string
	// Method is the call's full method name.
	Method string
	// RequestID is the call's RequestIDHeader, "" when it had none.
	RequestID string
	// Code is the status the frontend answered with: the injected code of a failed call,
	// the backend's status of a forwarded one (codes.OK when it ended well), the caller's
	// CANCELED or DEADLINE_EXCEEDED for a call it gave up.
	Code codes.Code
	// Injected: the frontend failed the call itself (a fail mode), the backend never saw it.
	Injected bool
}

// Attempts returns the calls recorded since [NewFrontend] or the last
// [Frontend.ResetStats], in the order they ended, with [WithAttemptRecording]; nil without
// it. The slice is a fresh copy. Safe for concurrent use.
func (f *Frontend) Attempts() []Attempt {
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	if f.attemptLimit == 0 {
		return nil
	}
	return append([]Attempt{}, f.attempts...)
}

// recordAttempt keeps a call's attempt, within the limit of WithAttemptRecording.
func (f *Frontend) recordAttempt(method string, md metadata.MD, err error, injected bool) {
	if f.attemptLimit == 0 {
		return
	}
	a := Attempt{Frontend: f.addr, Method: method, Code: status.Code(err), Injected: injected}
	if ids := md.Get(RequestIDHeader); len(ids) > 0 {
		a.RequestID = ids[0]
	}
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	if len(f.attempts) < f.attemptLimit {
		f.attempts = append(f.attempts, a)
	}
}

// SetRetryDelay makes the errors the frontend injects from now on (FailAll, FailFraction,
// FailMethods) carry a google.rpc.RetryInfo detail with retry delay d, as Spanner sends
// with RESOURCE_EXHAUSTED to say when to come back. Zero or negative means no RetryInfo,
// the default. It composes with every mode and is kept across mode changes, as
// [Frontend.SetLatency]. It does nothing after Close.
func (f *Frontend) SetRetryDelay(d time.Duration) {
	d = max(d, 0)
	f.update(func(b *behavior) { b.retryDelay = d })
}

// injectedError is the error of a call the frontend fails with b's code.
func (f *Frontend) injectedError(b *behavior) error {
	st := status.Newf(b.code, "spannermetest: %v injected by frontend %s", b.code, f.addr)
	if b.retryDelay > 0 {
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(b.retryDelay)}); err == nil {
			st = withInfo
		}
	}
	return st.Err()
}
