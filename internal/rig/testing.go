package rig

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// StartBackendTB is [StartBackend] (in-memory) for a test, with a direct client to it
// (fixture.NewClient): it fails tb on error and closes both in tb.Cleanup. Setup is bounded
// by a minute.
func StartBackendTB(tb testing.TB) (*Backend, *spanner.Client) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), time.Minute)
	defer cancel()
	b, err := StartBackend(ctx, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	c, err := fixture.NewClient(ctx, b.Addr, b.Database)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return b, c
}
