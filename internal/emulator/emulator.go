package emulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Names of what Start creates in every emulator.
const (
	// ProjectID is the project of the instance; the emulator accepts any.
	ProjectID = "test-project"
	// InstanceID is the instance created by Start.
	InstanceID = "test-instance"
	// InstanceConfig is the emulator's only instance configuration.
	InstanceConfig = "emulator-config"
	// DefaultDatabaseID is the database Start creates when
	// Options.DatabaseID is empty.
	DefaultDatabaseID = "test-db"
	// DefaultStartupTimeout bounds Start when Options.StartupTimeout is zero.
	DefaultStartupTimeout = 30 * time.Second
)

// ErrNotRunning is wrapped by the errors of [Emulator.CreateDatabase] after
// the emulator was closed or exited.
var ErrNotRunning = errors.New("emulator: not running")

// Options configures [Start]. The zero value is ready to use: the binary from
// [FindBinary], a database named [DefaultDatabaseID] with no tables, and
// [DefaultStartupTimeout].
type Options struct {
	// Binary is the path of emulator_main. Empty means [FindBinary].
	Binary string

	// Args are extra command-line flags for the emulator, for example
	// "--log_requests". Start sets --host_port itself.
	Args []string

	// DatabaseID is the ID of the database created at start (2 to 30
	// characters: lowercase letters, digits, '_' and '-'). Empty means
	// [DefaultDatabaseID].
	DatabaseID string

	// DDL holds the statements (without trailing ';') that create the
	// database's schema, for example from fixture.Schema. Nil or empty
	// means a database without tables.
	DDL []string

	// StartupTimeout bounds the whole of Start: launch, wait until the
	// emulator serves, create the instance and the database. Start is also
	// bounded by its context, whichever ends first. Zero means
	// [DefaultStartupTimeout]; negative is an error.
	StartupTimeout time.Duration
}

// Emulator is a running Cloud Spanner emulator with one instance
// ([ProjectID]/[InstanceID]) and at least one database. It serves plaintext
// gRPC on a loopback address and needs no credentials.
//
// Its methods are safe for concurrent use. Close it when done: the process
// outlives the context given to Start.
type Emulator struct {
	addr       string
	databaseID string
	cmd        *exec.Cmd
	out        *tailBuffer

	// exited is closed once the process has exited and been reaped;
	// waitErr is cmd.Wait's result, written before exited is closed.
	exited  chan struct{}
	waitErr error

	closeOnce sync.Once
	closeErr  error // set by closeOnce

	dbSeq atomic.Int64 // numbers the databases of NewDatabase
}

// maxLaunchAttempts bounds the retries when another process takes the free
// port between its discovery and the emulator's bind.
const maxLaunchAttempts = 5

// errBindRace marks a launch that failed because the port was taken.
var errBindRace = errors.New("port taken before the emulator could bind it")

// Start launches the emulator binary on a free port of 127.0.0.1, waits until
// it serves gRPC, creates the instance and the database of opts, and returns
// the running emulator. ctx bounds the startup only (together with
// opts.StartupTimeout); the emulator runs until Close.
//
// Errors: one wrapping [ErrBinaryNotFound] when the binary is missing; the
// context's error, wrapped, when startup does not finish in time; otherwise
// an error that includes the emulator's recent output. On error nothing is
// left running.
func Start(ctx context.Context, opts Options) (*Emulator, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = FindBinary(); err != nil {
			return nil, err
		}
	} else if err := checkExecutable(bin); err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrBinaryNotFound, bin, err)
	}
	timeout := opts.StartupTimeout
	switch {
	case timeout < 0:
		return nil, fmt.Errorf("emulator: negative StartupTimeout %v", timeout)
	case timeout == 0:
		timeout = DefaultStartupTimeout
	}
	dbID := opts.DatabaseID
	if dbID == "" {
		dbID = DefaultDatabaseID
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var e *Emulator
	for attempt := 1; ; attempt++ {
		var err error
		e, err = launch(ctx, bin, opts.Args)
		if err == nil {
			break
		}
		if !errors.Is(err, errBindRace) || attempt == maxLaunchAttempts {
			return nil, err
		}
	}
	e.databaseID = dbID
	if err := e.createInstance(ctx); err != nil {
		return nil, e.failStart(err)
	}
	if _, err := e.CreateDatabase(ctx, dbID, opts.DDL); err != nil {
		return nil, e.failStart(err)
	}
	return e, nil
}

// launch starts one emulator process on a fresh port and waits until it
// accepts gRPC calls. On error the process is gone.
func launch(ctx context.Context, bin string, args []string) (*Emulator, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	out := &tailBuffer{}
	// Not exec.CommandContext: the emulator must outlive ctx, which bounds
	// the startup only.
	cmd := exec.Command(bin, append([]string{"--host_port", addr}, args...)...)
	cmd.Stdout = out
	cmd.Stderr = out
	// Once the process is gone, stop copying output from any grandchild
	// that still holds the pipes, so that Wait (and Close) returns.
	cmd.WaitDelay = 2 * time.Second
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulator: starting %s: %w", bin, err)
	}
	e := &Emulator{addr: addr, cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		e.waitErr = cmd.Wait()
		close(e.exited)
	}()
	if err := e.waitServing(ctx); err != nil {
		err = e.failStart(err)
		if o := out.String(); strings.Contains(o, "Address already in use") || strings.Contains(o, "Failed to bind") {
			err = fmt.Errorf("%w: %w", errBindRace, err)
		}
		return nil, err
	}
	return e, nil
}

// freeLoopbackAddr returns "127.0.0.1:port" for a port that was free a moment
// ago (the emulator takes no already-open listener).
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("emulator: finding a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("emulator: finding a free port: %w", err)
	}
	return addr, nil
}

// pollInterval is the pause between readiness probes.
const pollInterval = 10 * time.Millisecond

// waitServing returns once the emulator accepts TCP connections and answers
// an admin call, or with an error when it exits or ctx ends first. It probes
// TCP before gRPC because a gRPC channel that failed to connect backs off for
// a second or more before trying again.
func (e *Emulator) waitServing(ctx context.Context) error {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", e.addr)
		if err == nil {
			conn.Close()
			break
		}
		if err := e.pause(ctx); err != nil {
			return err
		}
	}
	for {
		probeErr := e.probe(ctx)
		if probeErr == nil {
			// A process that lost the port exits at once; make sure the
			// answer came from ours.
			select {
			case <-e.exited:
				return e.exitError("exited while starting")
			default:
				return nil
			}
		}
		if err := e.pause(ctx); err != nil {
			return fmt.Errorf("%w (last probe: %v)", err, probeErr)
		}
	}
}

// pause waits pollInterval; it returns an error instead when the emulator
// exits or ctx ends first.
func (e *Emulator) pause(ctx context.Context) error {
	t := time.NewTimer(pollInterval)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-e.exited:
		return e.exitError("exited while starting")
	case <-ctx.Done():
		return fmt.Errorf("emulator: not serving on %s: %w", e.addr, ctx.Err())
	}
}

// exitError describes the exited process, with its output.
func (e *Emulator) exitError(what string) error {
	return fmt.Errorf("emulator: %s %s (%v)%s", e.cmd.Path, what, e.waitErr, e.outputSuffix())
}

// outputSuffix formats the emulator's recent output for an error message.
func (e *Emulator) outputSuffix() string {
	out := strings.TrimSpace(e.out.String())
	if out == "" {
		return "; no output"
	}
	return "\n--- emulator output ---\n" + out + "\n--- end of emulator output ---"
}

// failStart stops the process after a failed start and returns err, with the
// emulator's output appended unless err already carries it.
func (e *Emulator) failStart(err error) error {
	exitedBefore := false
	select {
	case <-e.exited:
		exitedBefore = true
	default:
	}
	_ = e.Close()
	if exitedBefore || strings.Contains(err.Error(), "--- emulator output ---") {
		return err
	}
	return fmt.Errorf("%w%s", err, e.outputSuffix())
}

// Addr returns the emulator's gRPC address, "127.0.0.1:port".
func (e *Emulator) Addr() string { return e.addr }

// Project returns the project ID, [ProjectID].
func (e *Emulator) Project() string { return ProjectID }

// Instance returns the instance ID, [InstanceID].
func (e *Emulator) Instance() string { return InstanceID }

// InstancePath returns "projects/test-project/instances/test-instance".
func (e *Emulator) InstancePath() string {
	return "projects/" + ProjectID + "/instances/" + InstanceID
}

// DatabaseID returns the ID of the database created by Start.
func (e *Emulator) DatabaseID() string { return e.databaseID }

// DatabasePath returns the full name of the database created by Start,
// "projects/test-project/instances/test-instance/databases/<id>", as
// spanner.NewClient expects it.
func (e *Emulator) DatabasePath() string { return e.databasePath(e.databaseID) }

func (e *Emulator) databasePath(id string) string {
	return e.InstancePath() + "/databases/" + id
}

// ClientOptions returns the options that connect a Google Cloud client
// (spanner.NewClient, the admin clients) to this emulator: its endpoint,
// plaintext gRPC and no authentication. Each call returns a new slice.
// For a Spanner client, pair them with
// spanner.ClientConfig{DisableNativeMetrics: true}, or the client looks for
// credentials to export metrics with, and call fixture.DisableGCEDetection
// first (fixture.NewClient does both).
func (e *Emulator) ClientOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(e.addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// Output returns the most recent output of the emulator process (stdout and
// stderr, up to 64 KiB), for diagnostics.
func (e *Emulator) Output() string { return e.out.String() }

// Close kills the emulator process (and its process group) and waits until it
// has exited. It returns nil when the emulator was running until Close, and
// an error with its output when it had exited on its own before. Close is
// idempotent: later calls return the first call's result.
func (e *Emulator) Close() error {
	e.closeOnce.Do(func() {
		select {
		case <-e.exited:
			e.closeErr = e.exitError("had exited before Close")
		default:
			killProcessGroup(e.cmd)
			<-e.exited
		}
	})
	return e.closeErr
}

// running returns an error wrapping ErrNotRunning once the process is gone.
func (e *Emulator) running() error {
	select {
	case <-e.exited:
		return fmt.Errorf("%w: %s (%v)", ErrNotRunning, e.addr, e.waitErr)
	default:
		return nil
	}
}
