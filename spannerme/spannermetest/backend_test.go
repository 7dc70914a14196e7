package spannermetest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"

	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

const singersDDL = "CREATE TABLE Singers (Id INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (Id)"

// checkBackend writes a row directly and reads it back through a fake endpoint.
func checkBackend(t *testing.T, database, addr string, direct *spanner.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := direct.Apply(ctx, []*spanner.Mutation{spanner.Insert("Singers", []string{"Id", "Name"}, []any{1, "Marc"})}); err != nil {
		t.Fatal(err)
	}
	ep := spannermetest.NewEndpointTB(t, addr)
	client, err := spanner.NewClientWithConfig(ctx, database, spannermetest.ClientConfig(),
		append(spannermetest.ClientOptions(), option.WithEndpoint(ep.Addr()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	row, err := client.Single().ReadRow(ctx, "Singers", spanner.Key{1}, []string{"Name"})
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := row.Column(0, &name); err != nil || name != "Marc" {
		t.Errorf("read %q, %v; want Marc", name, err)
	}
	if ep.Stats().BytesFromBackend == 0 {
		t.Error("the read did not go through the fake endpoint")
	}
}

func TestSpanner(t *testing.T) {
	s := spannermetest.NewSpannerTB(t, singersDDL)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Database() != spannermetest.Database {
		t.Errorf("Addr %q, Database %q", s.Addr(), s.Database())
	}
	direct, err := s.NewClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	checkBackend(t, s.Database(), s.Addr(), direct)
}

func TestNewSpannerBadDDL(t *testing.T) {
	for _, ddl := range [][]string{{"CREATE TABEL X (Id INT64) PRIMARY KEY (Id)"}, {singersDDL, singersDDL}} {
		if s, err := spannermetest.NewSpanner(ddl...); err == nil {
			s.Close()
			t.Errorf("NewSpanner(%q) succeeded", ddl)
		}
	}
	_, err := spannermetest.NewSpanner(singersDDL, "CREATE TABEL X")
	if err == nil || !strings.Contains(err.Error(), "DDL statement 1") {
		t.Errorf("error %v does not name statement 1", err)
	}
}

func TestEmulator(t *testing.T) {
	emu := spannermetest.StartEmulatorTB(t, singersDDL)
	if !strings.HasPrefix(emu.Addr(), "127.0.0.1:") || !strings.HasSuffix(emu.Database(), "/databases/test-db") {
		t.Errorf("Addr %q, Database %q", emu.Addr(), emu.Database())
	}
	direct, err := emu.NewClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	checkBackend(t, emu.Database(), emu.Addr(), direct)
}

func TestStartEmulatorNotInstalled(t *testing.T) {
	t.Setenv(spannermetest.EmulatorBinaryEnv, "/nonexistent/emulator_main")
	emu, err := spannermetest.StartEmulator(t.Context(), singersDDL)
	if !errors.Is(err, spannermetest.ErrEmulatorNotFound) || emu != nil {
		t.Errorf("StartEmulator without the binary = %v, %v; want ErrEmulatorNotFound", emu, err)
	}
}
