// Package pgstore is the PostgreSQL projections.Store (pgx v5): the read
// models in tables, each batch of events written in one transaction with
// multi-row statements (unnest of arrays, one pipelined round trip), the
// checkpoint in the same transaction.
//
// The tables of one copy of the read models live in a generation schema
// (<namespace>_g<n>); the control schema <namespace> records which
// generation is current. Rebuild fills a new generation from the first
// event beside the current one and switches readers to it once it has
// caught up, without downtime.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/fdj/tresor/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

// NamespaceDefault is the control schema's name, and the prefix of the
// generation schemas, unless Config says otherwise.
const NamespaceDefault = "tresor_projections"

// namespacePattern keeps schema names plain identifiers, so that they can be
// spliced into SQL quoted and never need escaping.
var namespacePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// Generation states (control migration 001) that Apply checks; the third
// is "building".
const (
	stateCurrent = "current"
	stateRetired = "retired"
)

// ErrNoGeneration is returned when the control schema names no current
// generation: run Migrate first.
var ErrNoGeneration = errors.New("no current projections generation")

func checkNamespace(ns string) error {
	if !namespacePattern.MatchString(ns) {
		return fmt.Errorf("projections namespace %q: want a lowercase identifier of at most 40 characters", ns)
	}
	return nil
}

func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

func genSchema(ns string, gen int) string { return fmt.Sprintf("%s_g%d", ns, gen) }

// migrateSchema applies a migration set to a schema, creating it first:
// tern keeps its version table inside the schema it migrates. The advisory
// lock tern takes makes concurrent starts safe.
func migrateSchema(ctx context.Context, pool *pgxpool.Pool, schema string, set string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", schema, err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quote(schema)); err != nil {
		return fmt.Errorf("migrate %s: create schema: %w", schema, err)
	}
	m, err := migrate.NewMigrator(ctx, conn.Conn(), quote(schema)+".schema_version")
	if err != nil {
		return fmt.Errorf("migrate %s: %w", schema, err)
	}
	m.Data["control"] = quote(schema)
	m.Data["schema"] = quote(schema)
	fsys := migrations.Projections()
	if set == "control" {
		fsys = migrations.Control()
	}
	if err := m.LoadMigrations(fsys); err != nil {
		return fmt.Errorf("migrate %s: load %s migrations: %w", schema, set, err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", schema, err)
	}
	return nil
}

// Migrate brings the control schema of namespace and every generation that
// is current or building up to the embedded migrations, and creates
// generation 1 as current when there is none: `tresor migrate` and every
// start run it.
func Migrate(ctx context.Context, pool *pgxpool.Pool, namespace string) error {
	if err := checkNamespace(namespace); err != nil {
		return err
	}
	if err := migrateSchema(ctx, pool, namespace, "control"); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.generations (gen, schema_name, state, switched_at)
		SELECT 1, $1, 'current', now() WHERE NOT EXISTS (SELECT 1 FROM %[1]s.generations)
		ON CONFLICT DO NOTHING`, quote(namespace)), genSchema(namespace, 1))
	if err != nil {
		return fmt.Errorf("migrate %s: first generation: %w", namespace, err)
	}
	rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT schema_name FROM %s.generations WHERE state IN ('current', 'building') ORDER BY gen`, quote(namespace)))
	if err != nil {
		return fmt.Errorf("migrate %s: list generations: %w", namespace, err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("migrate %s: list generations: %w", namespace, err)
	}
	for _, s := range schemas {
		if err := migrateSchema(ctx, pool, s, "projections"); err != nil {
			return err
		}
	}
	return nil
}

// sqlFor splices the quoted schema names into a statement written with the
// placeholders {s} (generation) and {c} (control).
func sqlFor(q, schema, control string) string {
	return strings.NewReplacer("{s}", quote(schema), "{c}", quote(control)).Replace(q)
}
