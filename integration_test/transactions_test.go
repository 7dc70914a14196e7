package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// txPath is one of two PSC endpoints of the transaction cases: a fake endpoint (a TCP proxy
// that can go down) in front of a frontend (a gRPC server that can fail every call) in front
// of the shared emulator.
type txPath struct {
	front *spannermetest.Frontend
	ep    *spannermetest.Endpoint
}

// txCase is one way a read-write transaction meets a switch: setup runs before the
// transaction, during its first attempt between its inline begin and its next statement,
// and after it.
type txCase struct {
	name   string
	tiers  bool // the group is one tier of both endpoints, spreading its calls
	runs   int
	before func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath)
	during func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath)
	after  func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath)
}

var txCases = []txCase{
	{name: "switch: E1 killed", runs: 5,
		during: func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath) {
			p1.ep.Down()
			waitCurrent(t, gme, p2.ep)
		},
		after: func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath) {
			if err := p1.ep.Up(); err != nil {
				t.Fatal(err)
			}
			waitCurrent(t, gme, p1.ep)
		}},
	{name: "switch: E1 failing UNAVAILABLE on a live connection", runs: 5,
		during: func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath) {
			if err := p1.front.FailAll(codes.Unavailable); err != nil {
				t.Fatal(err)
			}
			waitCurrent(t, gme, p2.ep) // ejected by its failing probes
		},
		after: func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath) {
			p1.front.Pass()
			waitCurrent(t, gme, p1.ep) // readmitted by a probe after the ejection time
		}},
	{name: "E1 failing UNAVAILABLE, the next statement sent at once", runs: 5,
		during: func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath) {
			if err := p1.front.FailAll(codes.Unavailable); err != nil {
				t.Fatal(err)
			}
		},
		after: func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath) {
			waitCurrent(t, gme, p2.ep)
			p1.front.Pass()
			waitCurrent(t, gme, p1.ep)
		}},
	{name: "switch-back: begun on E2, E1 returns", runs: 5,
		before: func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath) {
			p1.ep.Down()
			waitCurrent(t, gme, p2.ep)
		},
		during: func(t *testing.T, gme *spannerme.GCPMultiEndpoint, p1, p2 txPath) {
			if err := p1.ep.Up(); err != nil {
				t.Fatal(err)
			}
			waitCurrent(t, gme, p1.ep)
		}},
	{name: "tier members: one tier of E1 and E2", tiers: true, runs: 30},
}

// txOutcome is what became of one transaction.
type txOutcome struct {
	attempts int    // runs of the transaction function (more than one: aborted and retried by the client)
	err      error  // the transaction's error
	amount   int64  // the row's Amount after it: 2 when applied once (0: not found)
	spanned  bool   // its statements reached both endpoints
	codes    string // the codes of the attempts that failed
}

// served counts the application's calls (with a request ID) f forwarded to the backend.
func served(f *spannermetest.Frontend) int {
	n := 0
	for _, a := range f.Attempts() {
		if a.RequestID != "" && !a.Injected {
			n++
		}
	}
	return n
}

// runTx runs one read-write transaction: an INSERT that begins it inline, during (first
// attempt only), an UPDATE of the same row, a query reading it back, and the commit. It
// returns what became of it, read back with a fresh read.
func runTx(ctx context.Context, t *testing.T, c *spanner.Client, id string, during func(), p1, p2 txPath) txOutcome {
	var o txOutcome
	var failed []string
	before1, before2 := served(p1.front), served(p2.front)
	_, o.err = c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		o.attempts++
		err := func() error {
			if _, err := tx.Update(ctx, spanner.Statement{SQL: "INSERT INTO Orders (OrderId, AccountId, Amount) VALUES (@id, 'tx', 1)",
				Params: map[string]any{"id": id}}); err != nil {
				return err
			}
			if o.attempts == 1 && during != nil {
				during()
			}
			if _, err := tx.Update(ctx, spanner.Statement{SQL: "UPDATE Orders SET Amount = Amount + 1 WHERE OrderId = @id",
				Params: map[string]any{"id": id}}); err != nil {
				return err
			}
			var amount int64
			return tx.Query(ctx, spanner.Statement{SQL: "SELECT Amount FROM Orders WHERE OrderId = @id", Params: map[string]any{"id": id}}).
				Do(func(r *spanner.Row) error { return r.Column(0, &amount) })
		}()
		if err != nil {
			failed = append(failed, spanner.ErrCode(err).String())
		}
		return err
	})
	o.codes = strings.Join(failed, " ")
	o.spanned = served(p1.front) > before1 && served(p2.front) > before2
	row, err := c.Single().ReadRow(ctx, "Orders", spanner.Key{id}, []string{"Amount"})
	if err == nil {
		if err := row.Column(0, &o.amount); err != nil {
			t.Fatal(err)
		}
	} else if spanner.ErrCode(err) != codes.NotFound {
		t.Fatalf("reading %s back: %v", id, err)
	}
	return o
}

// Read-write transactions across a switch, on the emulator: each begins inline (its first
// statement carries the begin) on one endpoint, meets the switch of its group to the other
// endpoint (E1 killed; E1 failing every call with UNAVAILABLE while its connection stays up;
// a switch back to E1; the two members of a tier spreading its calls), runs more statements
// and commits. Each one commits once, or is aborted and retried by the Spanner client as a
// plain client's would be: never lost (a committed transaction's row is there, with both
// statements applied once: Amount 2) and never applied twice. The counts per case are logged
// and stated in docs/failure-semantics.md.
func TestReadWriteTransactionsAcrossSwitch(t *testing.T) {
	b := startEmulator(t)
	for ci, tc := range txCases {
		t.Run(tc.name, func(t *testing.T) {
			f1 := spannermetest.NewFrontendTB(t, b.addr, spannermetest.WithAttemptRecording(100000))
			f2 := spannermetest.NewFrontendTB(t, b.addr, spannermetest.WithAttemptRecording(100000))
			p1 := txPath{front: f1, ep: spannermetest.NewEndpointTB(t, f1.Addr())}
			p2 := txPath{front: f2, ep: spannermetest.NewEndpointTB(t, f2.Addr())}
			settings := spannerme.Settings{ReconnectMaxDelay: 100 * time.Millisecond, MinConnectTimeout: time.Second,
				Logger: slog.New(slog.DiscardHandler)}
			settings.Health.ProbeInterval = 50 * time.Millisecond
			settings.Health.BaseEjectionTime = 200 * time.Millisecond
			eps := []string{p1.ep.Addr(), p2.ep.Addr()}
			if tc.tiers {
				settings.Tiers = map[string]spannerme.TierSettings{"default": {Tiers: [][]string{eps}}}
			}
			groups := map[string]*multiendpoint.MultiEndpointOptions{"default": {Endpoints: eps,
				RecoveryTimeout: 100 * time.Millisecond, SwitchingDelay: 100 * time.Millisecond}}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, b.database, fixture.ClientConfig(),
				&grpcgcp.GCPMultiEndpointOptions{MultiEndpoints: groups, Default: "default"}, settings, offlineOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer gme.Close()
			defer client.Close()
			if !tc.tiers {
				waitCurrent(t, gme, p1.ep)
			}
			counts := map[string]int{}
			spanned := 0
			for i := range tc.runs {
				if tc.before != nil {
					tc.before(t, gme, p1, p2)
				}
				var during func()
				if tc.during != nil {
					during = func() { tc.during(t, gme, p1, p2) }
				}
				o := runTx(ctx, t, client, fmt.Sprintf("tx-%d-%d", ci, i), during, p1, p2)
				if tc.after != nil {
					tc.after(t, gme, p1, p2)
				}
				switch {
				case o.err == nil && o.amount != 2:
					t.Errorf("transaction %d committed, but its row's Amount is %d: want 2 (lost, or applied twice)", i, o.amount)
				case o.err != nil && o.amount != 0:
					t.Errorf("transaction %d failed (%v), but its row's Amount is %d: want no row", i, o.err, o.amount)
				case o.err != nil:
					t.Errorf("transaction %d failed: %v (attempts %d, failed attempts: %s)", i, o.err, o.attempts, o.codes)
				}
				key := "committed once"
				switch {
				case o.err != nil:
					key = "failed: " + spanner.ErrCode(o.err).String()
				case o.attempts > 1:
					key = fmt.Sprintf("committed after %d attempts (retried by the client: %s)", o.attempts, o.codes)
				}
				counts[key]++
				if o.spanned {
					spanned++
				}
			}
			var lines []string
			for k, n := range counts {
				lines = append(lines, fmt.Sprintf("%d %s", n, k))
			}
			sort.Strings(lines)
			t.Logf("%d transactions: %s; %d reached both endpoints", tc.runs, strings.Join(lines, ", "), spanned)
			if spanned == 0 {
				t.Errorf("no transaction reached both endpoints: the case tests nothing")
			}
		})
	}
}
