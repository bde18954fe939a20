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

// TestMigration003BackfillsAnExistingGeneration projects a stream, takes
// the generation back to migration 002 (the columns and tables of 003
// dropped, as a database of the previous release has them) and migrates it
// again: the statements and report data read from the backfilled rows are
// those the projection wrote.
func TestMigration003BackfillsAnExistingGeneration(t *testing.T) {
	ctx := context.Background()
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	s := openStore(t, rules, "backfill")
	projectionstest.Project(t, s, w.Events, 9)
	read := func(s projections.Store) string {
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
		b, _ := json.Marshal(append(out, d))
		return string(b)
	}
	want := read(s)
	schema := pgx.Identifier{fmt.Sprintf("%s_g%d", namespace(t, "backfill"), s.Generation())}.Sanitize()
	for _, sql := range []string{
		`DROP INDEX %[1]s.journal_at`, `DROP INDEX %[1]s.plays_wins`, `DROP TABLE %[1]s.cash_days`, `DROP TABLE %[1]s.bans`,
		`ALTER TABLE %[1]s.journal DROP COLUMN balance_after`, `ALTER TABLE %[1]s.blocks DROP COLUMN by_system`,
		`ALTER TABLE %[1]s.days DROP COLUMN settled, DROP COLUMN settled_stakes, DROP COLUMN by_system`,
		`ALTER TABLE %[1]s.accounts DROP COLUMN self_excluded_until`, `ALTER TABLE %[1]s.limit_changes DROP COLUMN period_days`,
		`UPDATE %[1]s.schema_version SET version = 2`,
	} {
		if _, err := testPool.Exec(ctx, fmt.Sprintf(sql, schema)); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := pgstore.Migrate(ctx, testPool, namespace(t, "backfill")); err != nil {
		t.Fatal(err)
	}
	if got := read(openStore(t, rules, "backfill")); got != want {
		t.Fatalf("after the backfill:\n%s\nwant:\n%s", got, want)
	}
	var nulls int
	if err := testPool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.journal WHERE account LIKE 'player.%%' AND balance_after IS NULL`, schema)).Scan(&nulls); err != nil || nulls != 0 {
		t.Fatalf("player lines without a balance: %d, %v", nulls, err)
	}
}
