package pgstore_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// testPool is a pool on the fresh database TestMain creates for this
// package and drops after it.
var testPool *pgxpool.Pool

const defaultTestURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// TestMain creates a fresh database on TRESOR_TEST_DATABASE_URL (a local
// PostgreSQL with trust auth by default). PostgreSQL tests never skip: an
// unreachable server fails the package with a message saying what to start.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	admin := os.Getenv("TRESOR_TEST_DATABASE_URL")
	if admin == "" {
		admin = defaultTestURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgstore tests need PostgreSQL at TRESOR_TEST_DATABASE_URL (%s): %v\n", admin, err)
		return 1
	}
	name := fmt.Sprintf("tresor_pgstore_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		fmt.Fprintf(os.Stderr, "create test database %s: %v\n", name, err)
		return 1
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		if _, err := conn.Exec(dctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "drop test database %s: %v\n", name, err)
		}
		_ = conn.Close(dctx)
	}()
	u, err := url.Parse(admin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "parse %s: %v\n", admin, err)
		return 1
	}
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		fmt.Fprintf(os.Stderr, "parse %s: %v\n", u, err)
		return 1
	}
	cfg.MaxConns = 8
	if testPool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "connect to %s: %v\n", u, err)
		return 1
	}
	defer testPool.Close()
	return m.Run()
}

// namespace names a store's schemas after the test and the store's name,
// and drops them when the test ends, so that the test run again in this
// process (-count) starts from no schema, as it did the first time.
func namespace(tb testing.TB, name string) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s", tb.Name(), name)
	ns := fmt.Sprintf("t%016x", h.Sum64())
	tb.Cleanup(func() { dropNamespace(tb, ns) })
	return ns
}

// dropNamespace drops the control schema ns and its generations' schemas.
func dropNamespace(tb testing.TB, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := testPool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname = $1 OR nspname LIKE $1 || '\_g%'`, ns)
	if err == nil {
		var schemas []string
		schemas, err = pgx.CollectRows(rows, pgx.RowTo[string])
		for _, schema := range schemas {
			if err == nil {
				_, err = testPool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			}
		}
	}
	if err != nil {
		tb.Errorf("drop the schemas of %s: %v", ns, err)
	}
}

// openStore opens (or reopens: same test, same name) a PostgreSQL store.
func openStore(tb testing.TB, rules *domain.RuleSet, name string) *pgstore.Store {
	tb.Helper()
	s, err := pgstore.Open(context.Background(), testPool, pgstore.Config{Rules: rules, Namespace: namespace(tb, name)})
	if err != nil {
		tb.Fatalf("open store %s: %v", name, err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

var _ projections.Store = (*pgstore.Store)(nil)
