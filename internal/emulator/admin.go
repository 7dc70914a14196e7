package emulator

import (
	"context"
	"fmt"
	"time"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/api/iterator"
)

// probeTimeout bounds one readiness probe; the next probe follows it.
const probeTimeout = 2 * time.Second

// maxOpPollInterval caps the pause between polls of a long-running operation.
// The admin clients' own Wait starts at one second, too slow for tests: the
// emulator finishes most operations at once.
const maxOpPollInterval = 250 * time.Millisecond

// probe makes one admin call (ListInstanceConfigs) and reports whether the
// emulator answered it.
func (e *Emulator) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := instance.NewInstanceAdminClient(ctx, e.ClientOptions()...)
	if err != nil {
		return err
	}
	defer c.Close()
	it := c.ListInstanceConfigs(ctx, &instancepb.ListInstanceConfigsRequest{Parent: "projects/" + ProjectID})
	if _, err := it.Next(); err != nil && err != iterator.Done {
		return err
	}
	return nil
}

// createInstance creates InstanceID with InstanceConfig and waits until it
// exists.
func (e *Emulator) createInstance(ctx context.Context) error {
	c, err := instance.NewInstanceAdminClient(ctx, e.ClientOptions()...)
	if err != nil {
		return fmt.Errorf("emulator: instance admin client: %w", err)
	}
	defer c.Close()
	op, err := c.CreateInstance(ctx, &instancepb.CreateInstanceRequest{
		Parent:     "projects/" + ProjectID,
		InstanceId: InstanceID,
		Instance: &instancepb.Instance{
			Config:      "projects/" + ProjectID + "/instanceConfigs/" + InstanceConfig,
			DisplayName: InstanceID,
			NodeCount:   1,
		},
	})
	if err == nil {
		err = waitOp(ctx, func(ctx context.Context) (bool, error) {
			_, err := op.Poll(ctx)
			return op.Done(), err
		})
	}
	if err != nil {
		return fmt.Errorf("emulator: creating instance %s: %w", e.InstancePath(), err)
	}
	return nil
}

// CreateDatabase creates the database id in the emulator's instance, with the
// schema ddl (statements without trailing ';'; nil for no tables), and
// returns its full path, as [Emulator.DatabasePath] does. It is how a test
// gets a fresh database in a shared emulator.
//
// Errors: one wrapping [ErrNotRunning] after Close; otherwise the admin call's
// gRPC status, wrapped, for example AlreadyExists for a used id or
// InvalidArgument for bad DDL; or ctx's error. Safe for concurrent use.
func (e *Emulator) CreateDatabase(ctx context.Context, id string, ddl []string) (string, error) {
	if err := e.running(); err != nil {
		return "", err
	}
	c, err := database.NewDatabaseAdminClient(ctx, e.ClientOptions()...)
	if err != nil {
		return "", fmt.Errorf("emulator: database admin client: %w", err)
	}
	defer c.Close()
	op, err := c.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{
		Parent:          e.InstancePath(),
		CreateStatement: "CREATE DATABASE `" + id + "`",
		ExtraStatements: ddl,
	})
	if err == nil {
		err = waitOp(ctx, func(ctx context.Context) (bool, error) {
			_, err := op.Poll(ctx)
			return op.Done(), err
		})
	}
	if err != nil {
		return "", fmt.Errorf("emulator: creating database %q: %w", id, err)
	}
	return e.databasePath(id), nil
}

// waitOp calls poll until it reports done or fails, pausing pollInterval
// at first and up to maxOpPollInterval between calls.
func waitOp(ctx context.Context, poll func(context.Context) (done bool, err error)) error {
	delay := pollInterval
	for {
		done, err := poll(ctx)
		if err != nil || done {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		delay = min(2*delay, maxOpPollInterval)
	}
}
