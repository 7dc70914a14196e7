package spannerme

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// ProbeFunc probes one endpoint through its channel pool; see HealthSettings.Probe.
type ProbeFunc func(ctx context.Context, conn grpc.ClientConnInterface) error

// ProbeSessionID is the session ID SpannerProbe asks for. No such session exists: Spanner
// answers NOT_FOUND ("Session not found").
const ProbeSessionID = "spannerme-health-probe"

// SpannerProbe returns the probe NewMultiEndpointClient* install by default for database
// ("projects/P/instances/I/databases/D"): one call, for a session of that database that does
// not exist, down the path the probe must prove (ProbeClass):
//
//   - "writes" (the probes that may readmit an endpoint ejected because its commits, DML or
//     rollbacks kept failing): a Commit of a transaction that does not exist, in that session;
//   - "reads" (one ejected because its queries and reads kept failing): an ExecuteSql of
//     "SELECT 1" in that session;
//   - otherwise (every other probe: standbys, suspects, the confirmation of a fallback, the
//     latency probes): a GetSession of that session.
//
// None of them creates a session, reads data or writes anything: the NOT_FOUND that Spanner
// (or the emulator) answers comes from the database's own session lookup, so each proves the
// whole path of its kind of call (PSC endpoint, frontend, and the Spanner backend serving the
// database) without acting. A GetSession is a read-only metadata RPC (Spanner's
// ListSessions/GetSession API); a session ID no client ever created needs no cleanup.
//
// The probe passes on any answer of the backend (NOT_FOUND, and also PERMISSION_DENIED or
// UNAUTHENTICATED: the backend answered, credentials are not the endpoint's fault) and fails
// on UNAVAILABLE, a stream reset, or no answer before ctx's deadline; answered CANCELED, or
// on a connection that went away, it decides nothing (probeVerdict). It carries the
// routing headers the Spanner client sends (x-goog-request-params,
// google-cloud-resource-prefix).
func SpannerProbe(database string) ProbeFunc {
	name := database + "/sessions/" + ProbeSessionID
	params := "name=" + url.QueryEscape(name)
	sessionParams := "session=" + url.QueryEscape(name)
	return func(ctx context.Context, conn grpc.ClientConnInterface) error {
		var err error
		switch health.ProbeClass(ctx) {
		case health.Writes:
			ctx = metadata.AppendToOutgoingContext(ctx, "x-goog-request-params", sessionParams, "google-cloud-resource-prefix", database)
			err = conn.Invoke(ctx, "/google.spanner.v1.Spanner/Commit", &spannerpb.CommitRequest{Session: name,
				Transaction: &spannerpb.CommitRequest_TransactionId{TransactionId: []byte(ProbeSessionID)}}, &spannerpb.CommitResponse{})
		case health.Reads:
			ctx = metadata.AppendToOutgoingContext(ctx, "x-goog-request-params", sessionParams, "google-cloud-resource-prefix", database)
			err = conn.Invoke(ctx, "/google.spanner.v1.Spanner/ExecuteSql", &spannerpb.ExecuteSqlRequest{Session: name, Sql: "SELECT 1"}, &spannerpb.ResultSet{})
		default:
			ctx = metadata.AppendToOutgoingContext(ctx, "x-goog-request-params", params, "google-cloud-resource-prefix", database)
			err = conn.Invoke(ctx, "/google.spanner.v1.Spanner/GetSession", &spannerpb.GetSessionRequest{Name: name}, &spannerpb.Session{})
		}
		return probeVerdict(err)
	}
}

// ProbeClass returns what the probe run with ctx must prove, for a ProbeFunc
// (HealthSettings.Probe) that can prove more than one kind of call: "writes" for the probes
// that may readmit an endpoint ejected because its writes (commits, DML, batch DML,
// rollbacks) kept failing, "reads" for one ejected because its queries and reads kept failing,
// "session calls" for one whose session calls did, and "calls" for every other probe. These
// are the class names of HealthStatus.Class. A ProbeFunc that ignores it proves one path for
// all: an endpoint ejected for failing writes is then readmitted by a probe its reads would
// pass. Safe for concurrent use.
func ProbeClass(ctx context.Context) string { return health.ProbeClass(ctx).String() }

// unimplementedProbeMethod is a method no server implements.
const unimplementedProbeMethod = "/spannerme.health.v1.Probe/Check"

// UnimplementedMethodProbe is the probe NewGCPMultiEndpoint* install by default: one call to
// a method no server implements ("/spannerme.health.v1.Probe/Check"). Any answer passes,
// UNIMPLEMENTED included, since it proves that a gRPC server answered through the endpoint;
// UNAVAILABLE, a stream reset, or no answer before ctx's deadline fail; CANCELED or a lost
// connection decide nothing. Where a proxy answers
// for the backend (a Google frontend may answer an unknown method itself), it proves the path
// to that proxy only: set HealthSettings.Probe to a call the backend must answer.
func UnimplementedMethodProbe(ctx context.Context, conn grpc.ClientConnInterface) error {
	return probeVerdict(conn.Invoke(ctx, unimplementedProbeMethod, &emptypb.Empty{}, &emptypb.Empty{}))
}

// probeVerdict turns a probe call's error into the probe's result: nil if the backend
// answered, the error if the path failed or nothing answered in time, and an error wrapping
// health.ErrProbeSkipped (no verdict: the endpoint is probed again after ProbeInterval) if
// the probe says nothing about the endpoint: it was answered CANCELED (a frontend's
// RST_STREAM CANCEL, or a cancelled context), or its connection went away (a connectivity
// event, not the endpoint's health).
func probeVerdict(err error) error {
	switch health.Classify(err, false, false) {
	case health.Failure, health.Timeout:
		return err
	case health.Ignore, health.ConnectionLost:
		if err != nil {
			return fmt.Errorf("%w: %w: %w", health.ErrProbeSkipped, errProbeNoVerdict, err)
		}
	}
	return nil
}

// errProbeNoVerdict marks a probe that ended without saying anything about the endpoint.
var errProbeNoVerdict = errors.New("spannerme: probe ended without a verdict")
