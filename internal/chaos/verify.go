package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"cloud.google.com/go/spanner"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
)

// verdict is what the database holds at the end, compared with what the load saw.
type verdict struct {
	total, wantTotal int64
	// balances lists the accounts whose balance is not seed + the transfers that committed.
	balances []string

	transfersAcked, insertsAcked int
	// missing and duplicated are acknowledged commits absent, or present more than once.
	missing, duplicated []string
	// unknown counts failed writes whose Commit was sent; unknownCommitted of them committed.
	unknown, unknownCommitted int
	// wrong lists rows no call can explain: a write that failed before its Commit yet
	// committed, a failed insert present twice, rows of no call, an order that differs from
	// its transfer.
	wrong []string
	// settled are the failed writes found committed: they are not failed calls.
	settled map[string]bool
}

// lost is the number of acknowledged commits not present exactly once.
func (v *verdict) lost() int { return len(v.missing) + len(v.duplicated) }

// verify reads the whole database through client (a direct client, no fake endpoint in
// between) after the load stopped, and settles every failed write by its ID.
func verify(ctx context.Context, client *spanner.Client, l *load) (*verdict, error) {
	v := &verdict{wantTotal: l.total, settled: map[string]bool{}}
	seed := map[string]int64{}
	for _, a := range l.accounts {
		seed[a.AccountID] = a.Balance
	}
	balances := map[string]int64{}
	err := client.Single().Read(ctx, fixture.TableAccounts, spanner.AllKeys(), []string{"AccountId", "Balance"}).Do(func(r *spanner.Row) error {
		var id string
		var bal int64
		if err := r.Columns(&id, &bal); err != nil {
			return err
		}
		balances[id] = bal
		v.total += bal
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: reading Accounts: %w", err)
	}
	orders := map[string]bool{}
	want := map[string]int64{}
	for id, bal := range seed {
		want[id] = bal
	}
	err = client.Single().Read(ctx, fixture.TableOrders, spanner.AllKeys(), []string{"OrderId", "AccountId", "Amount"}).Do(func(r *spanner.Row) error {
		var id, acct string
		var amount int64
		if err := r.Columns(&id, &acct, &amount); err != nil {
			return err
		}
		orders[id] = true
		rec, ok := l.transfers[id]
		switch {
		case !ok:
			v.wrong = append(v.wrong, "Orders row "+id+" of no transfer call")
		case rec.from != acct || rec.amount != amount:
			v.wrong = append(v.wrong, fmt.Sprintf("Orders row %s is %s %d, its transfer %s %d", id, acct, amount, rec.from, rec.amount))
		default:
			want[rec.from] -= rec.amount
			want[rec.to] += rec.amount
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: reading Orders: %w", err)
	}
	rows := map[string]int{}
	err = client.Single().Read(ctx, fixture.TableInserts, spanner.AllKeys(), []string{"RequestId"}).Do(func(r *spanner.Row) error {
		var id string
		if err := r.Column(0, &id); err != nil {
			return err
		}
		rows[id]++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: reading Inserts: %w", err)
	}

	for id, bal := range balances {
		if bal != want[id] {
			v.balances = append(v.balances, fmt.Sprintf("%s: %d, want %d (seed %d + committed transfers)", id, bal, want[id], seed[id]))
		}
	}
	for id, rec := range l.transfers {
		if rec.acked {
			v.transfersAcked++
			if !orders[id] {
				v.missing = append(v.missing, "transfer "+id)
			}
		}
	}
	for id, rec := range l.inserts {
		n := rows[id]
		switch {
		case rec.acked:
			v.insertsAcked++
			if n == 0 {
				v.missing = append(v.missing, "insert "+id)
			}
			if n > 1 {
				v.duplicated = append(v.duplicated, fmt.Sprintf("insert %s: %d rows", id, n))
			}
		case n > 1:
			v.wrong = append(v.wrong, fmt.Sprintf("failed insert %s has %d rows", id, n))
		}
	}
	for id := range rows {
		if _, ok := l.inserts[id]; !ok {
			v.wrong = append(v.wrong, "Inserts rows of RequestId "+id+" of no insert call")
		}
	}
	// Settle every failed write by its ID.
	for _, f := range l.failures {
		if !f.kind.isWrite() {
			continue
		}
		present := orders[f.id]
		if f.kind == opInsert {
			present = rows[f.id] > 0
		}
		if f.committing {
			v.unknown++
		}
		switch {
		case present && f.committing:
			v.unknownCommitted++
			v.settled[f.id] = true
		case present:
			v.wrong = append(v.wrong, fmt.Sprintf("%s %s failed before its Commit (%v), yet committed", f.kind, f.id, f.err))
		}
	}
	for _, s := range [][]string{v.balances, v.missing, v.duplicated, v.wrong} {
		sort.Strings(s)
	}
	return v, nil
}

// firstLines returns at most n of lines, and a line saying how many more there are.
func firstLines(lines []string, n int) []string {
	if len(lines) <= n {
		return lines
	}
	return append(lines[:n:n], fmt.Sprintf("... and %d more", len(lines)-n))
}

// joinOr joins lines, or returns none.
func joinOr(lines []string, none string) string {
	if len(lines) == 0 {
		return none
	}
	return strings.Join(lines, "; ")
}
