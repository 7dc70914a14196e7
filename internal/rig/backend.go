package rig

import (
	"context"
	"errors"
	"fmt"

	"github.com/spannerme/spanner-multiendpoint/internal/emulator"
	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// Backend is ONE Spanner: every fake PSC endpoint forwards to it, so that
// sessions and transactions survive a failover (F7).
type Backend struct {
	// Name says which backend it is, for people: "in-memory Spanner
	// (spannertest)" or "Cloud Spanner emulator".
	Name string
	// Addr is its gRPC address, 127.0.0.1:port.
	Addr string
	// Database is the database path, projects/P/instances/I/databases/D.
	Database string
	// Emulator reports whether it is the Cloud Spanner emulator.
	Emulator bool

	close func()
}

// StartBackend starts an in-memory spannertest server, or with useEmulator the
// Cloud Spanner emulator (emulator_main from the gcloud SDK, or
// $SPANNER_EMULATOR_BIN), with the schema of testdata/schema.sql, and seeds it
// with testdata/seed.sql through a direct client. The caller calls Close.
//
// Errors: the backend cannot start (the emulator binary is missing, a port
// cannot be bound), or the schema or seeding fails; nothing is left running
// then. Startup is bounded by ctx.
func StartBackend(ctx context.Context, useEmulator bool) (*Backend, error) {
	var b *Backend
	if useEmulator {
		ddl, err := fixture.Schema()
		if err != nil {
			return nil, err
		}
		emu, err := emulator.Start(ctx, emulator.Options{DDL: ddl})
		if err != nil {
			return nil, err
		}
		b = &Backend{Name: "Cloud Spanner emulator", Addr: emu.Addr(), Database: emu.DatabasePath(), Emulator: true,
			close: func() { _ = emu.Close() }}
	} else {
		srv, db, err := fixture.NewSpannertestServer()
		if err != nil {
			return nil, err
		}
		b = &Backend{Name: "in-memory Spanner (spannertest)", Addr: srv.Addr, Database: db, close: srv.Close}
	}
	direct, err := fixture.NewClient(ctx, b.Addr, b.Database)
	if err == nil {
		err = fixture.Seed(ctx, direct)
		direct.Close()
	}
	if err != nil {
		b.Close()
		return nil, errors.Join(fmt.Errorf("rig: seeding the %s", b.Name), err)
	}
	return b, nil
}

// Close stops the backend and waits for it. It is not safe to call twice.
func (b *Backend) Close() { b.close() }
