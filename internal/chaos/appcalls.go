package chaos

import (
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// methodCommit is the Spanner API's Commit, the call fe-commit-fail refuses.
const methodCommit = "/google.spanner.v1.Spanner/Commit"

// injectedMarker is in the message of every error a spannermetest.Frontend injects
// (FailAll, FailFraction, FailMethods): "spannermetest: Unavailable injected by frontend ...".
const injectedMarker = "injected by frontend"

// appCalls watches, on one endpoint's frontend, the calls of the application (the load and
// the Spanner client's session calls), not those of the client's health and latency probes
// (whose routing header names spannerme.ProbeSessionID, as every SpannerProbe call does):
// when the frontend refused an application Commit with an injected error, and when an
// application call first reached the backend after a given time (watchFrom). Its intercept
// is the frontend's stream interceptor. Safe for concurrent use; the zero value is ready.
type appCalls struct {
	mu sync.Mutex // guards the fields below
	// refusedCommits are the arrival times of the application Commits the frontend
	// refused (every refusal is a fault's: no healthy frontend injects one).
	refusedCommits []time.Time
	// since and firstServed: the earliest arrival, at or after since, of an application call
	// the frontend forwarded; zero while there is none (or no watch).
	since, firstServed time.Time

	// fo, when set, hears of every application call that succeeded, as endpoint e's.
	fo *failoverWatch
	e  int
}

// intercept records the application's calls; see appCalls.
func (a *appCalls) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if isProbe(ss) {
		return handler(srv, ss)
	}
	at := time.Now()
	err := handler(srv, ss)
	if err == nil && a.fo != nil {
		a.fo.served(a.e, groupOf(ss), at)
	}
	injected := err != nil && strings.Contains(status.Convert(err).Message(), injectedMarker)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case injected && info.FullMethod == methodCommit:
		a.refusedCommits = append(a.refusedCommits, at)
	case !injected && !a.since.IsZero() && !at.Before(a.since) && (a.firstServed.IsZero() || at.Before(a.firstServed)):
		a.firstServed = at
	}
	return err
}

// isProbe reports whether the call is one of spannerme's probes: SpannerProbe's calls name
// the session spannerme.ProbeSessionID in their x-goog-request-params header.
func isProbe(ss grpc.ServerStream) bool {
	md, _ := metadata.FromIncomingContext(ss.Context())
	for _, v := range md.Get("x-goog-request-params") {
		if strings.Contains(v, spannerme.ProbeSessionID) {
			return true
		}
	}
	return false
}

// watchFrom starts watching for the first application call forwarded at or after since,
// replacing the previous watch.
func (a *appCalls) watchFrom(since time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.since, a.firstServed = since, time.Time{}
}

// served returns the arrival of the first application call forwarded at or after the
// watch's since; false if none yet.
func (a *appCalls) served() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.firstServed, !a.firstServed.IsZero()
}

// refused returns the arrival times of the application Commits refused so far, in order
// (they are recorded as they end).
func (a *appCalls) refused() []time.Time {
	a.mu.Lock()
	out := append([]time.Time(nil), a.refusedCommits...)
	a.mu.Unlock()
	slices.SortFunc(out, time.Time.Compare)
	return out
}
