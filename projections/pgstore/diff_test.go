package pgstore_test

import (
	"context"
	"reflect"
	"strconv"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
	"github.com/jackc/pgx/v5"
)

// TestDiffNamesEditedRows projects one stream into memory and PostgreSQL,
// finds no difference, then edits PostgreSQL rows with SQL, as a tampering
// operator or a buggy migration would: Diff names each edited row's model,
// key and field with the value the stream gives and the value found.
func TestDiffNamesEditedRows(t *testing.T) {
	ctx := context.Background()
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	mem := memstore.New(rules)
	projectionstest.Project(t, mem, w.Events, 13)
	pg := openStore(t, rules, "pg")
	projectionstest.Project(t, pg, w.Events, 13)
	if diffs, err := projections.Diff(ctx, mem, pg, 10); err != nil || len(diffs) != 0 {
		t.Fatalf("Diff of memory and PostgreSQL projections of one stream: %v, %v", diffs, err)
	}

	p2, err := mem.Account(ctx, "p2")
	if err != nil {
		t.Fatal(err)
	}
	block, err := mem.Block(ctx, "E0001-B001")
	if err != nil {
		t.Fatal(err)
	}
	sapphires := block.Tiers[domain.SapphireX3]
	var won projections.Play
	for _, p := range projectionstest.History(t, mem, "p3", projections.PageMax) {
		if p.Prize != nil && *p.Prize > 0 {
			won = p
			break
		}
	}
	if won.ID == "" {
		t.Fatal("p3 won nothing in the standard stream")
	}
	lines, err := mem.Journal(ctx, domain.PlayerAccount("p4"), projections.JournalCursor{}, 1)
	if err != nil || len(lines) != 1 {
		t.Fatalf("p4's first journal line: %v, %v", lines, err)
	}
	first := lines[0]

	schema := pgx.Identifier{namespace(t, "pg") + "_g1"}.Sanitize()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"UPDATE " + schema + ".accounts SET balance = balance + 1 WHERE player = $1", []any{"p2"}},
		{"UPDATE " + schema + ".block_tiers SET paid = paid - 1 WHERE block = $1 AND tier = $2", []any{block.ID, int16(domain.SapphireX3)}},
		{"UPDATE " + schema + ".plays SET prize = prize + 500 WHERE id = $1", []any{won.ID}},
		{"DELETE FROM " + schema + ".journal WHERE account = $1 AND seq = $2 AND line = $3", []any{first.Account, int64(first.Seq), first.Line}},
	} {
		if tag, err := testPool.Exec(ctx, q.sql, q.args...); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("%s: %v, %d rows", q.sql, err, tag.RowsAffected())
		}
	}

	diffs, err := projections.Diff(ctx, mem, pg, 10)
	if err != nil {
		t.Fatal(err)
	}
	tierKey := block.ID + "/" + domain.SapphireX3.ID()
	want := []projections.Difference{
		{Model: "accounts", Key: "p2", Field: "balance", Want: p2.Balance.String(), Got: (p2.Balance + 1).String()},
		{Model: "block_tiers", Key: tierKey, Field: "left", Want: strconv.Itoa(sapphires.Left), Got: strconv.Itoa(sapphires.Left + 1)},
		{Model: "block_tiers", Key: tierKey, Field: "paid", Want: strconv.Itoa(sapphires.Paid), Got: strconv.Itoa(sapphires.Paid - 1)},
		{Model: "journal", Key: first.Account + "@" + strconv.FormatUint(first.Seq, 10) + ":" + strconv.Itoa(first.Line), Want: "present", Got: "absent"},
		{Model: "plays", Key: won.ID, Field: "prize", Want: won.Prize.String(), Got: (*won.Prize + 500).String()},
	}
	if !reflect.DeepEqual(diffs, want) {
		t.Fatalf("Diff after editing PostgreSQL:\n got %v\nwant %v", diffs, want)
	}
	// At most max differences: the first two.
	if diffs, err := projections.Diff(ctx, mem, pg, 2); err != nil || !reflect.DeepEqual(diffs, want[:2]) {
		t.Fatalf("Diff with max 2: %v, %v; want %v", diffs, err, want[:2])
	}
}
