package chaos

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/rig"
)

// TestVerifyFindsEveryKindOfDamage writes a database that breaks each check of verify once
// and checks that each is reported, and that a failed write that committed is settled.
func TestVerifyFindsEveryKindOfDamage(t *testing.T) {
	_, c := rig.StartBackendTB(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	accts, err := fixture.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	l := newLoad(c, accts, false, func(a string) string { return a })
	a0, a1, a7 := accts[0].AccountID, accts[1].AccountID, accts[7].AccountID
	if err := fixture.Transfer(ctx, c, "t-ok", a0, a1, 10, "test"); err != nil {
		t.Fatal(err)
	}
	l.transfers["t-ok"] = transferRec{from: a0, to: a1, amount: 10, acked: true}
	l.transfers["t-lost"] = transferRec{from: a0, to: a1, amount: 5, acked: true} // never written
	insert := func(row, req string) {
		t.Helper()
		if _, err := c.Apply(ctx, []*spanner.Mutation{spanner.Insert(fixture.TableInserts, []string{"RowId", "RequestId"}, []any{row, req})}); err != nil {
			t.Fatal(err)
		}
	}
	insert("i-ok#1", "i-ok")
	l.inserts["i-ok"] = insertRec{acked: true}
	insert("i-twice#1", "i-twice")
	insert("i-twice#2", "i-twice")
	l.inserts["i-twice"] = insertRec{acked: true}
	insert("i-early#1", "i-early") // failed before Commit, yet present
	l.inserts["i-early"] = insertRec{}
	insert("i-unknown#1", "i-unknown") // failed after sending Commit, present: settled
	l.inserts["i-unknown"] = insertRec{}
	l.inserts["i-gone"] = insertRec{} // failed after sending Commit, absent
	insert("i-phantom#1", "i-phantom")
	fail := errors.New("injected")
	l.failures = []outcome{
		{kind: opInsert, id: "i-early", err: fail},
		{kind: opInsert, id: "i-unknown", err: fail, committing: true},
		{kind: opInsert, id: "i-gone", err: fail, committing: true},
	}
	// Money made out of nothing.
	if _, err := c.Apply(ctx, []*spanner.Mutation{spanner.Update(fixture.TableAccounts, []string{"AccountId", "Balance"}, []any{a7, accts[7].Balance + 5})}); err != nil {
		t.Fatal(err)
	}

	v, err := verify(ctx, c, l)
	if err != nil {
		t.Fatal(err)
	}
	if v.total != l.total+5 || v.wantTotal != l.total {
		t.Errorf("total %d, want %d; seeded %d", v.total, l.total+5, v.wantTotal)
	}
	if len(v.balances) != 1 || !strings.HasPrefix(v.balances[0], a7+":") {
		t.Errorf("balances differing: %q, want only %s", v.balances, a7)
	}
	if v.lost() != 2 || len(v.missing) != 1 || !strings.Contains(v.missing[0], "t-lost") || len(v.duplicated) != 1 || !strings.Contains(v.duplicated[0], "i-twice") {
		t.Errorf("lost %d: missing %q, duplicated %q; want t-lost and i-twice", v.lost(), v.missing, v.duplicated)
	}
	if v.transfersAcked != 2 || v.insertsAcked != 2 {
		t.Errorf("acknowledged: %d transfers, %d inserts; want 2, 2", v.transfersAcked, v.insertsAcked)
	}
	if v.unknown != 2 || v.unknownCommitted != 1 || !v.settled["i-unknown"] || v.settled["i-gone"] {
		t.Errorf("unknown outcomes %d, committed %d, settled %v; want 2, 1, i-unknown only", v.unknown, v.unknownCommitted, v.settled)
	}
	wrong := strings.Join(v.wrong, "\n")
	if len(v.wrong) != 2 || !strings.Contains(wrong, "i-early") || !strings.Contains(wrong, "i-phantom") {
		t.Errorf("wrong rows:\n%s\nwant i-early and i-phantom", wrong)
	}
}
