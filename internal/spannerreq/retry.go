package spannerreq

import (
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SplitRequestID returns the request key of a Spanner request ID (everything before the
// last dot) and whether the ID names an attempt after the first. It allocates nothing.
func SplitRequestID(id string) (key string, retry bool) {
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		return "", false
	}
	attempt := id[i+1:]
	return id[:i], attempt != "" && attempt != "1" && attempt != "0"
}

// RetryableByClient reports whether the Spanner client retries an attempt that ended with
// err, by code: UNAVAILABLE and RESOURCE_EXHAUSTED (the retry settings of every method,
// cloud.google.com/go/spanner v1.96.1 apiv1/spanner_client.go, and its resumable streams,
// read.go) and the INTERNAL of a reset stream, which its streams retry (retry.go).
func RetryableByClient(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	case codes.Internal:
		return strings.Contains(s.Message(), "stream terminated by RST_STREAM")
	}
	return false
}

// RetryDelay returns the delay of the RetryInfo detail of err's status, if it has one
// (google.rpc.RetryInfo, which Spanner sends with RESOURCE_EXHAUSTED and ABORTED; the
// Spanner client reads it the same way: cloud.google.com/go/spanner v1.96.1, retry.go
// ExtractRetryDelay).
func RetryDelay(err error) (time.Duration, bool) {
	s, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range s.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if d := ri.GetRetryDelay().AsDuration(); d > 0 {
				return d, true
			}
		}
	}
	return 0, false
}

// Overloaded reports whether err is RESOURCE_EXHAUSTED.
func Overloaded(err error) bool {
	return status.Code(err) == codes.ResourceExhausted
}
