package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/fdj/tresor/projections/projectionstest"
	"github.com/jackc/pgx/v5"
)

// migrateAgain projects the standard stream, takes the generation back to
// version by the undo statements (the generation's schema is %[1]s), as a
// database of that release has it, and migrates it again: what read reads
// of the store is what it read before. It returns the generation's schema.
func migrateAgain(t *testing.T, read func(projections.Store, *projectionstest.World) any, version int, undo ...string) string {
	t.Helper()
	ctx := context.Background()
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	s := openStore(t, rules, "backfill")
	projectionstest.Project(t, s, w.Events, 9)
	want, err := json.Marshal(read(s, w))
	if err != nil {
		t.Fatal(err)
	}
	schema := pgx.Identifier{fmt.Sprintf("%s_g%d", namespace(t, "backfill"), s.Generation())}.Sanitize()
	for _, sql := range append(undo, fmt.Sprintf(`UPDATE %%[1]s.schema_version SET version = %d`, version)) {
		if _, err := testPool.Exec(ctx, fmt.Sprintf(sql, schema)); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := pgstore.Migrate(ctx, testPool, namespace(t, "backfill")); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(read(openStore(t, rules, "backfill"), w)); string(got) != string(want) {
		t.Fatalf("after the backfill:\n%s\nwant:\n%s", got, want)
	}
	return schema
}

// TestMigration003BackfillsAnExistingGeneration: the columns and tables of
// 003 dropped, the statements and report data read from the backfilled rows
// are those the projection wrote. (Limits of other periods than a week came
// with 003: the accounts' limits are not compared; suspensions of sales
// with 005, closures with 006 and adjustments with 007, undone with 004:
// nor are they.)
func TestMigration003BackfillsAnExistingGeneration(t *testing.T) {
	read := func(s projections.Store, w *projectionstest.World) any {
		ctx := context.Background()
		var out []any
		for _, id := range slices.Sorted(maps.Keys(w.Ledger.Accounts)) {
			st, err := s.Statement(ctx, projections.StatementQuery{Player: id, Limit: projections.StatementPageMax})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, st)
		}
		d, err := s.ReportData(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d.Suspensions, d.AdjustmentDays = nil, nil
		return append(out, d)
	}
	schema := migrateAgain(t, read, 2, slices.Concat(undo004, []string{
		`DROP INDEX %[1]s.journal_at`, `DROP INDEX %[1]s.plays_wins`, `DROP TABLE %[1]s.cash_days`, `DROP TABLE %[1]s.bans`,
		`ALTER TABLE %[1]s.journal DROP COLUMN balance_after`, `ALTER TABLE %[1]s.blocks DROP COLUMN by_system`,
		`ALTER TABLE %[1]s.days DROP COLUMN settled, DROP COLUMN settled_stakes, DROP COLUMN by_system`,
		`ALTER TABLE %[1]s.accounts DROP COLUMN self_excluded_until`, `ALTER TABLE %[1]s.limit_changes DROP COLUMN period_days`})...)
	var nulls int
	if err := testPool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s.journal WHERE account LIKE 'player.%%' AND balance_after IS NULL`, schema)).Scan(&nulls); err != nil || nulls != 0 {
		t.Fatalf("player lines without a balance: %d, %v", nulls, err)
	}
}

// TestMigration004SplitsDaysByEmission: the day rows of 003 (one per day,
// every emission added up) are split by emission from the plays, the
// journal and the blocks, to the cent: each emission's days and every
// emission's read as the projection wrote them.
func TestMigration004SplitsDaysByEmission(t *testing.T) {
	read := func(s projections.Store, _ *projectionstest.World) any {
		snap := projectionstest.TakeSnapshot(t, s)
		snap.Suspensions, snap.Reports.Suspensions = nil, nil    // they came with 005
		snap.Adjustments, snap.Reports.AdjustmentDays = nil, nil // and adjustments with 007
		snap.Erasures = nil                                      // and erasures with 010
		for i := range snap.Accounts {
			snap.Accounts[i].ClosedAt = nil // closures with 006
			snap.Accounts[i].AdjustedCredits, snap.Accounts[i].AdjustedDebits = 0, 0
		}
		forgetLosersSettlements(snap) // 009 backfills the winners' only
		return snap
	}
	migrateAgain(t, read, 3, undo004...)
}

// TestMigration008BackfillsTheAdjustedTotals: a generation that applied
// approved adjustments before the accounts had their totals gets them from
// its adjustments, to the cent: every row reads as the projection wrote it.
func TestMigration008BackfillsTheAdjustedTotals(t *testing.T) {
	read := func(s projections.Store, _ *projectionstest.World) any {
		snap := projectionstest.TakeSnapshot(t, s)
		var adjusted int
		for _, a := range snap.Accounts {
			if a.AdjustedCredits != 0 && a.AdjustedDebits != 0 {
				adjusted++
			}
		}
		if adjusted == 0 {
			t.Fatal("no account of the world was both credited and debited by an adjustment")
		}
		forgetLosersSettlements(snap) // 009 backfills the winners' only
		snap.Erasures = nil           // they came with 010
		return snap
	}
	migrateAgain(t, read, 7, undo010, undo009, undo008)
}

// TestMigration009BackfillsTheWinnersSettlements: a generation that
// settled plays before they had a settlement sequence gets each winner's
// from its PrizePaid's journal line, exactly; the plays settled without a
// prize have none until a rebuild, and every other row reads as the
// projection wrote it.
func TestMigration009BackfillsTheWinnersSettlements(t *testing.T) {
	read := func(s projections.Store, _ *projectionstest.World) any {
		snap := projectionstest.TakeSnapshot(t, s)
		winners, losers := forgetLosersSettlements(snap)
		if winners == 0 || losers == 0 {
			t.Fatalf("the world settled %d winners and %d losers: want both", winners, losers)
		}
		snap.Erasures = nil // they came with 010
		return snap
	}
	migrateAgain(t, read, 8, undo010, undo009)
}

// forgetLosersSettlements clears the settlement sequence of the plays
// settled without a prize, which migration 009 cannot backfill, and counts
// the settled plays of each kind.
func forgetLosersSettlements(snap *projectionstest.Snapshot) (winners, losers int) {
	for _, h := range snap.Histories {
		for i := range h {
			switch p := &h[i]; {
			case p.Prize == nil:
			case *p.Prize > 0:
				winners++
			default:
				losers++
				p.SettledSeq = 0
			}
		}
	}
	return winners, losers
}

// undo010 drops what came with 010.
const undo010 = `DROP TABLE %[1]s.erasures`

// undo009 drops what came with 009.
const undo009 = `ALTER TABLE %[1]s.plays DROP COLUMN settled_seq`

// undo008 drops what came with 008.
const undo008 = `ALTER TABLE %[1]s.accounts DROP COLUMN adjusted_credits, DROP COLUMN adjusted_debits`

// undo004 takes the day rows back to one per day, as migration 003 left
// them, and drops what came after 004.
var undo004 = []string{
	undo010, undo009, undo008, `DROP TABLE %[1]s.suspensions`, `DROP TABLE %[1]s.adjustments`, `DROP TABLE %[1]s.adjustment_days`, `ALTER TABLE %[1]s.accounts DROP COLUMN closed_at`,
	`CREATE TABLE %[1]s.days_003 AS SELECT day, sum(units_sold)::integer AS units_sold, sum(sales)::bigint AS sales,
			sum(prizes_paid)::bigint AS prizes_paid, sum(prizes_settled)::bigint AS prizes_settled, sum(prizes_owed)::bigint AS prizes_owed,
			sum(prize_fund)::bigint AS prize_fund, sum(stake_mismatch)::bigint AS stake_mismatch, sum(settle_mismatch)::bigint AS settle_mismatch,
			sum(settled)::integer AS settled, sum(settled_stakes)::bigint AS settled_stakes, sum(by_system)::integer AS by_system
			FROM %[1]s.days GROUP BY day`,
	`DROP TABLE %[1]s.days`, `ALTER TABLE %[1]s.days_003 RENAME TO days`, `ALTER TABLE %[1]s.days ADD PRIMARY KEY (day)`,
}
