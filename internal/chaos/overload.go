package chaos

import (
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The database's overloads (issue 40): what the database behind every endpoint refuses, the
// same at every frontend, so that moving a group to another endpoint relieves nothing.
const (
	// heavyQueryHeader marks the calls of the load's heavy query (opHeavy): the query the
	// database refuses during a query-overload. The Spanner client keeps the caller's outgoing
	// metadata on every RPC of the query (cloud.google.com/go/spanner v1.96.1 client.go,
	// contextWithOutgoingMetadata), so each attempt carries it; the frontends forward messages
	// as bytes and cannot read the SQL text, so the mark stands for it.
	heavyQueryHeader = "x-chaos-heavy-query"
	// dbOverloadFraction is the share of the application's data calls a db-overload fails at
	// every frontend, each with a RetryInfo of dbOverloadDelay (issue 40's case: 30%, 300ms).
	dbOverloadFraction = 0.3
	dbOverloadDelay    = 300 * time.Millisecond
	// overloadMarker is in the message of every error the overloads inject.
	overloadMarker = "chaos: the database"
)

// sessionMethods are the Spanner API's session calls: not data calls, so a db-overload passes
// them (the client's session pool is not what the database sheds).
var sessionMethods = map[string]bool{
	"/google.spanner.v1.Spanner/CreateSession":       true,
	"/google.spanner.v1.Spanner/BatchCreateSessions": true,
	"/google.spanner.v1.Spanner/GetSession":          true,
	"/google.spanner.v1.Spanner/ListSessions":        true,
	"/google.spanner.v1.Spanner/DeleteSession":       true,
}

// dbOverload is the database layer's fault, shared by every endpoint's frontend: its intercept
// (the first of each frontend's stream interceptors) refuses the heavy query during a
// query-overload, and sheds dbOverloadFraction of the data calls during a db-overload. The
// client's probes pass: they judge the endpoint, and the overload is not the endpoint's. Safe
// for concurrent use; the zero value passes every call.
type dbOverload struct {
	kind atomic.Int32 // the Kind in force: KindNone, KindQueryOverload or KindDatabaseOverload

	mu  sync.Mutex // guards rng
	rng *rand.Rand // set by set for a db-overload

	// refusedHeavy counts the heavy query's calls refused, per endpoint (frontend calls:
	// each attempt of a query counts); shed counts the data calls a db-overload failed.
	refusedHeavy, shed [NumEndpoints]atomic.Int64
}

// set puts kind in force (KindNone: none); seed draws which calls a db-overload sheds.
func (d *dbOverload) set(kind Kind, seed uint64) {
	d.mu.Lock()
	d.rng = rand.New(rand.NewPCG(seed, 0x0ad))
	d.mu.Unlock()
	d.kind.Store(int32(kind))
}

// shedNext reports whether the next data call is shed.
func (d *dbOverload) shedNext() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rng.Float64() < dbOverloadFraction
}

// interceptor returns endpoint e's frontend's stream interceptor; see dbOverload.
func (d *dbOverload) interceptor(e int) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		k := Kind(d.kind.Load())
		if k == KindNone || isProbe(ss) {
			return handler(srv, ss)
		}
		switch {
		case k == KindQueryOverload && isHeavy(ss):
			d.refusedHeavy[e].Add(1)
			return status.Error(codes.ResourceExhausted, overloadMarker+" refuses this query: it exceeds a resource limit (query-overload)")
		case k == KindDatabaseOverload && !sessionMethods[info.FullMethod] && d.shedNext():
			d.shed[e].Add(1)
			st := status.New(codes.ResourceExhausted, overloadMarker+" is overloaded: retry later (db-overload)")
			if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(dbOverloadDelay)}); err == nil {
				st = withInfo
			}
			return st.Err()
		}
		return handler(srv, ss)
	}
}

// isHeavy reports whether the call is one of the heavy query's (heavyQueryHeader).
func isHeavy(ss grpc.ServerStream) bool {
	md, _ := metadata.FromIncomingContext(ss.Context())
	return len(md.Get(heavyQueryHeader)) > 0
}

// totals returns the heavy query's refused frontend calls and the shed data calls so far, every
// endpoint together.
func (d *dbOverload) totals() (refusedHeavy, shed int64) {
	for e := range NumEndpoints {
		refusedHeavy += d.refusedHeavy[e].Load()
		shed += d.shed[e].Load()
	}
	return refusedHeavy, shed
}

// isOverloadRefusal reports whether err is one of the overloads' refusals (by its message).
func isOverloadRefusal(err error) bool {
	return err != nil && strings.Contains(err.Error(), overloadMarker)
}
