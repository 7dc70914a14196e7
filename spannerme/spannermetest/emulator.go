package spannermetest

import (
	"context"
	"testing"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
)

// ErrEmulatorNotFound is wrapped by the error of [StartEmulator] when the Cloud Spanner
// emulator binary is not installed.
var ErrEmulatorNotFound = emulator.ErrBinaryNotFound

// EmulatorBinaryEnv names the environment variable that holds the path of the emulator
// binary (emulator_main). When it is empty, the binary is looked for in the Google Cloud
// SDK (bin/cloud_spanner_emulator/emulator_main under $CLOUDSDK_ROOT_DIR, the SDK of the
// gcloud on PATH, /usr/lib/google-cloud-sdk, /usr/share/google-cloud-sdk,
// /opt/google-cloud-sdk, ~/google-cloud-sdk), then on PATH.
const EmulatorBinaryEnv = emulator.EnvBinary

// Emulator is a running Cloud Spanner emulator (emulator_main from the Google Cloud SDK, a
// child process) serving plaintext gRPC on 127.0.0.1, with one instance and one database.
// Put fake endpoints ([NewEndpoint]) in front of its [Emulator.Addr]. Its methods are safe for
// concurrent use. Close it when done: the process outlives the context given to
// StartEmulator.
type Emulator struct {
	e *emulator.Emulator
}

// StartEmulator starts the installed emulator on a free port of 127.0.0.1 and creates an
// instance and a database with the schema ddl (DDL statements, one per string, without a
// trailing ';'); it returns once the database exists. ctx bounds the startup (at most 30 s
// whatever ctx says). It calls [DisableGCEDetection]. The emulator does not read or need
// SPANNER_EMULATOR_HOST.
//
// Errors: one wrapping [ErrEmulatorNotFound] when the binary is not installed (see
// [EmulatorBinaryEnv]); ctx's error when startup does not finish in time; otherwise an error
// with the emulator's output, for example for a DDL statement it rejects. Nothing is left
// running on error.
func StartEmulator(ctx context.Context, ddl ...string) (*Emulator, error) {
	DisableGCEDetection()
	e, err := emulator.Start(ctx, emulator.Options{DDL: ddl})
	if err != nil {
		return nil, err
	}
	return &Emulator{e: e}, nil
}

// StartEmulatorTB is [StartEmulator] for a test, closed in tb.Cleanup. When the binary is
// not installed it skips the test with a message saying so (printed to stderr once per test
// binary, so that it shows even without -v), and fails it instead when the environment
// variable CI is true, so that CI never passes by skipping. Other errors fail the test.
func StartEmulatorTB(tb testing.TB, ddl ...string) *Emulator {
	tb.Helper()
	DisableGCEDetection()
	return &Emulator{e: emulator.StartTB(tb, emulator.Options{DDL: ddl})}
}

// Addr returns the emulator's address, "127.0.0.1:port".
func (e *Emulator) Addr() string { return e.e.Addr() }

// Database returns the path of the database StartEmulator created,
// "projects/test-project/instances/test-instance/databases/test-db".
func (e *Emulator) Database() string { return e.e.DatabasePath() }

// ClientOptions returns the options that connect a client directly to the emulator: its
// address and the options of [ClientOptions]. Each call returns a new slice.
func (e *Emulator) ClientOptions() []option.ClientOption { return e.e.ClientOptions() }

// NewClient returns a Spanner client connected directly to the emulator (no fake endpoint),
// for setting up rows, with [ClientConfig]. The caller closes it. Errors: those of
// spanner.NewClientWithConfig.
func (e *Emulator) NewClient(ctx context.Context) (*spanner.Client, error) {
	return spanner.NewClientWithConfig(ctx, e.Database(), ClientConfig(), e.ClientOptions()...)
}

// Close stops the emulator and waits until it has exited. It returns an error with its
// output when it had exited on its own before. Close is idempotent.
func (e *Emulator) Close() error { return e.e.Close() }
