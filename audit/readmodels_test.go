package audit_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// testDatabase creates a fresh database on TRESOR_TEST_DATABASE_URL (a
// local PostgreSQL with trust auth by default) and drops it after the
// test. An unreachable server fails the test: it never skips.
func testDatabase(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	admin := os.Getenv("TRESOR_TEST_DATABASE_URL")
	if admin == "" {
		admin = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx := ctx(tb)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("this test needs PostgreSQL at TRESOR_TEST_DATABASE_URL (%s): %v", admin, err)
	}
	name := fmt.Sprintf("tresor_audit_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := conn.Exec(dctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("drop test database %s: %v", name, err)
		}
		_ = conn.Close(dctx)
	})
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatal(err)
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// project applies events to a store as the operator's projection runner
// does: in order, seals as nil events.
func project(tb testing.TB, s projections.Store, events []eventstore.RecordedEvent) {
	tb.Helper()
	batch := make([]projections.Envelope, 0, len(events))
	for _, ev := range events {
		env := projections.Envelope{Seq: ev.Sequence, At: ev.RecordedAt}
		if ev.Type != eventstore.SealType {
			e, err := domain.DecodeEvent(ev.Type, ev.Payload)
			if err != nil {
				tb.Fatal(err)
			}
			env.Event = e
		}
		batch = append(batch, env)
	}
	if err := s.Apply(ctx(tb), batch); err != nil {
		tb.Fatal(err)
	}
}

func TestProjectionRowEditedInPostgreSQLIsCaught(t *testing.T) {
	events := played(t)
	rules := smallRules(t)
	pool := testDatabase(t)
	pg, err := pgstore.Open(ctx(t), pool, pgstore.Config{Rules: rules, Namespace: "audited"})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	project(t, pg, events)
	compare := func() *audit.Report {
		a, err := audit.New(audit.Config{Rules: rules, PublicKey: operatorPub, ReadModels: memstore.New(rules)})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			a.Check(ev)
		}
		a.Finish()
		r, err := a.CompareReadModels(ctx(t), pg, 100)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := compare(); !r.OK || !r.ReadModelsCompared {
		t.Fatalf("untouched read models: %+v", r.Violations)
	}
	// when someone edits a balance in PostgreSQL
	var schema string
	if err := pool.QueryRow(ctx(t), `SELECT schema_name FROM audited.generations WHERE state = 'current'`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	tag, err := pool.Exec(ctx(t), fmt.Sprintf(`UPDATE %s.accounts SET balance = balance + 100 WHERE player = 'q1'`, pgx.Identifier{schema}.Sanitize()))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("edit the row: %v, %d rows", err, tag.RowsAffected())
	}
	v := wantCode(t, compare(), audit.CodeProjectionMismatch)
	if v.Expected != "2.80" || v.Found != "3.80" {
		t.Fatalf("difference %+v, want the balance of q1 2.80 in the replay, 3.80 in PostgreSQL", v)
	}
}
