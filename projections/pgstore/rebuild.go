package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/fdj/tresor/projections"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// catchUpRoundsMax bounds the rounds of a rebuild's catch-up: each round
// applies up to the head read at its start; the rebuild switches once a
// round ends within one batch of the head (the live projection applies the
// rest), or after this many rounds whatever the remaining lag.
const catchUpRoundsMax = 20

// Progress is what a rebuild reports while it runs.
type Progress struct {
	Generation int
	Applied    uint64
	Head       uint64
	// Switched is set on the last report: readers now use Generation.
	Switched bool
}

// Rebuild builds a fresh generation of the read models from the first event
// of src, beside the generation in use, and switches readers to it once it
// has caught up with the stream: readers never see a half-built copy and
// never stop. The live projection notices the switch at its next batch
// (ErrSwitched) and goes on from the new copy's checkpoint. The previous
// generation is kept, retired, for readers that have not refreshed yet;
// older retired and abandoned generations are dropped. progress, when not
// nil, is called after each batch. It returns the new generation.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, cfg Config, src projections.Source, progress func(Progress)) (int, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	if err := Migrate(ctx, pool, cfg.Namespace); err != nil {
		return 0, err
	}
	ctl := quote(cfg.Namespace)
	var gen int
	err := pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s.generations (gen, schema_name, state)
		SELECT n, $1 || n, 'building' FROM (SELECT COALESCE(max(gen), 0) + 1 AS n FROM %[1]s.generations) g
		RETURNING gen`, ctl), cfg.Namespace+"_g").Scan(&gen)
	if err != nil {
		return 0, fmt.Errorf("rebuild: allocate a generation: %w", err)
	}
	if err := migrateSchema(ctx, pool, genSchema(cfg.Namespace, gen), "projections"); err != nil {
		return 0, fmt.Errorf("rebuild: %w", err)
	}
	st := openGeneration(pool, cfg, gen)
	var head uint64
	report := func(applied uint64, switched bool) {
		if progress != nil {
			progress(Progress{Generation: gen, Applied: applied, Head: head, Switched: switched})
		}
	}
	runner := projections.NewRunner(src, st, projections.WithProgress(func(applied uint64) { report(applied, false) }))
	for range catchUpRoundsMax {
		if head, err = src.Head(ctx); err != nil {
			return 0, fmt.Errorf("rebuild: read the head: %w", err)
		}
		if head > runner.Applied() {
			if err := runner.RunTo(ctx, head); err != nil {
				return 0, fmt.Errorf("rebuild generation %d: %w", gen, err)
			}
		}
		next, err := src.Head(ctx)
		if err != nil {
			return 0, fmt.Errorf("rebuild: read the head: %w", err)
		}
		if next-runner.Applied() <= projections.BatchMax {
			break
		}
	}
	if err := switchTo(ctx, pool, cfg.Namespace, gen); err != nil {
		return 0, err
	}
	report(runner.Applied(), true)
	return gen, nil
}

// switchTo makes gen current, retires the previous current generation and
// drops the generations older than it, in one transaction.
func switchTo(ctx context.Context, pool *pgxpool.Pool, namespace string, gen int) error {
	ctl := quote(namespace)
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var prev int
		err := tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %s.generations SET state = 'retired' WHERE state = 'current' RETURNING gen`, ctl)).Scan(&prev)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("rebuild: retire the current generation: %w", err)
		}
		tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s.generations SET state = 'current', switched_at = now() WHERE gen = $1 AND state = 'building'`, ctl), gen)
		if err != nil {
			return fmt.Errorf("rebuild: switch to generation %d: %w", gen, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("rebuild: generation %d is no longer building", gen)
		}
		rows, err := tx.Query(ctx, fmt.Sprintf(`DELETE FROM %s.generations WHERE gen < $1 AND gen <> $2 RETURNING schema_name`, ctl), gen, prev)
		if err != nil {
			return fmt.Errorf("rebuild: forget old generations: %w", err)
		}
		old, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("rebuild: forget old generations: %w", err)
		}
		for _, schema := range old {
			if _, err := tx.Exec(ctx, "DROP SCHEMA IF EXISTS "+quote(schema)+" CASCADE"); err != nil {
				return fmt.Errorf("rebuild: drop %s: %w", schema, err)
			}
		}
		return nil
	})
}
