package spannermetest

import (
	"context"
	"fmt"
	"testing"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/spannertest"
	"cloud.google.com/go/spanner/spansql"
	"google.golang.org/api/option"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// Database is the database path of a [Spanner]: spannertest serves one database whatever
// its name, and this is the name to give clients.
const Database = "projects/test-project/instances/test-instance/databases/test-db"

// Spanner is an in-memory Cloud Spanner (cloud.google.com/go/spanner/spannertest) serving
// plaintext gRPC on 127.0.0.1, for tests and offline examples. Put fake endpoints
// ([NewEndpoint]) in front of its [Spanner.Addr]. It implements a subset of Spanner SQL and
// DDL (see spannertest's documentation); for the real thing offline, use [StartEmulator].
// Its methods are safe for concurrent use.
type Spanner struct {
	srv *spannertest.Server
}

// NewSpanner starts an in-memory Spanner on 127.0.0.1 (a port the OS picks) whose database
// has the schema ddl: DDL statements, one per string, without a trailing ';', as
// UpdateDatabaseDdl takes them (for example "CREATE TABLE Singers (Id INT64 NOT NULL) PRIMARY
// KEY (Id)"). Its per-statement log is off. It calls [DisableGCEDetection]. The caller must
// call [Spanner.Close].
//
// Errors: a statement spansql cannot parse or spannertest rejects, naming it, or failing to
// listen; nothing is left running then.
func NewSpanner(ddl ...string) (*Spanner, error) {
	DisableGCEDetection()
	parsed := &spansql.DDL{}
	for i, s := range ddl {
		stmt, err := spansql.ParseDDLStmt(s)
		if err != nil {
			return nil, fmt.Errorf("spannermetest: DDL statement %d: %w", i, err)
		}
		parsed.List = append(parsed.List, stmt)
	}
	srv, err := spannertest.NewServer("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("spannermetest: starting spannertest: %w", err)
	}
	srv.SetLogger(func(string, ...any) {})
	if len(parsed.List) > 0 {
		if err := srv.UpdateDDL(parsed); err != nil {
			srv.Close()
			return nil, fmt.Errorf("spannermetest: applying the DDL: %w", err)
		}
	}
	return &Spanner{srv: srv}, nil
}

// NewSpannerTB is [NewSpanner] for a test: it fails tb on error and closes the Spanner in
// tb.Cleanup.
func NewSpannerTB(tb testing.TB, ddl ...string) *Spanner {
	tb.Helper()
	s, err := NewSpanner(ddl...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Addr returns the Spanner's address, "127.0.0.1:port".
func (s *Spanner) Addr() string { return s.srv.Addr }

// Database returns the database path to give clients, [Database].
func (s *Spanner) Database() string { return Database }

// ClientOptions returns the options that connect a client directly to this Spanner: its
// address and the options of [ClientOptions]. Each call returns a new slice.
func (s *Spanner) ClientOptions() []option.ClientOption {
	return append(ClientOptions(), option.WithEndpoint(s.Addr()))
}

// NewClient returns a Spanner client connected directly to this Spanner (no fake endpoint),
// for setting up rows, with [ClientConfig]. The caller closes it. Errors: those of
// spanner.NewClientWithConfig.
func (s *Spanner) NewClient(ctx context.Context) (*spanner.Client, error) {
	return spanner.NewClientWithConfig(ctx, s.Database(), ClientConfig(), s.ClientOptions()...)
}

// Close stops the Spanner; connections to it are closed. Calling it again does nothing
// (as after NewSpannerTB, whose cleanup calls it too).
func (s *Spanner) Close() { s.srv.Close() }

// ClientOptions returns the client options for an offline backend ([Spanner], [Emulator])
// and fake endpoints in front of it: plaintext gRPC and no authentication. Give them to
// spannerme.NewMultiEndpointClient* (whose endpoints say where to connect) or, with
// option.WithEndpoint, to any Google Cloud client. Each call returns a new slice.
func ClientOptions() []option.ClientOption { return fixture.OfflineOptions() }

// ClientConfig returns the Spanner client configuration for an offline backend: the
// client's built-in metrics are off (exporting them looks for credentials and a network),
// everything else is the default.
func ClientConfig() spanner.ClientConfig { return fixture.ClientConfig() }

// DisableGCEDetection settles, for the rest of the process, that it does not run on Google
// Compute Engine, without asking the network. Each new Spanner client detects its region,
// and the first detection in a process asks the GCE metadata server (HTTP to
// 169.254.169.254, a DNS lookup of metadata.google.internal) unless SPANNER_EMULATOR_HOST is
// set (cloud.google.com/go/spanner, metrics.go, detectClientLocation). Offline, that is
// traffic off the machine and, where something answers, an idle connection left open.
//
// It makes the first detection with a cancelled context, which
// cloud.google.com/go/compute/metadata remembers as "not on GCE". It has no effect once the
// process has asked. Call it only in processes that use offline backends; [NewSpanner] and
// [StartEmulator] call it. Safe for concurrent use.
func DisableGCEDetection() { fixture.DisableGCEDetection() }
