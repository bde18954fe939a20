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
// with 003: the accounts' limits are not compared.)
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
	read := func(s projections.Store, _ *projectionstest.World) any { return projectionstest.TakeSnapshot(t, s) }
	migrateAgain(t, read, 3, undo004...)
}

// undo004 takes the day rows back to one per day, as migration 003 left
// them.
var undo004 = []string{
	`CREATE TABLE %[1]s.days_003 AS SELECT day, sum(units_sold)::integer AS units_sold, sum(sales)::bigint AS sales,
			sum(prizes_paid)::bigint AS prizes_paid, sum(prizes_settled)::bigint AS prizes_settled, sum(prizes_owed)::bigint AS prizes_owed,
			sum(prize_fund)::bigint AS prize_fund, sum(stake_mismatch)::bigint AS stake_mismatch, sum(settle_mismatch)::bigint AS settle_mismatch,
			sum(settled)::integer AS settled, sum(settled_stakes)::bigint AS settled_stakes, sum(by_system)::integer AS by_system
			FROM %[1]s.days GROUP BY day`,
	`DROP TABLE %[1]s.days`, `ALTER TABLE %[1]s.days_003 RENAME TO days`, `ALTER TABLE %[1]s.days ADD PRIMARY KEY (day)`,
}
