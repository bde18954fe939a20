package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CheckpointsTable holds the checkpoint of every feed into a PostgreSQL
// database, one row per feed name, in the same database as the messages.
const CheckpointsTable = "tresor_feed_checkpoints"

// tablePattern is what --table accepts: a plain lowercase identifier, so
// that finance's SQL needs no quoting.
var tablePattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidTable reports whether name can be a feed's messages table.
func ValidTable(name string) bool { return tablePattern.MatchString(name) && name != CheckpointsTable }

// SQLTarget publishes into an outbox-style PostgreSQL table through
// watermill-sql's publisher (its default PostgreSQL schema: offset, uuid,
// created_at, payload JSON, metadata JSON, transaction_id), with the
// feed's checkpoint in the same transaction as the rows it covers: a
// crash keeps or loses both, so the table holds every message exactly
// once (but for --from replays).
type SQLTarget struct {
	url, table, name string
	pool             *pgxpool.Pool
	schema           OutboxSchema
	// expect is the checkpoint this feed last read or wrote: a row found
	// elsewhere means another feed of the same name moved it.
	expect uint64
}

// NewSQLTarget returns a target for table in the database at url, for the
// feed name. It connects on first use.
func NewSQLTarget(url, table, name string) (*SQLTarget, error) {
	if !ValidTable(table) {
		return nil, fmt.Errorf("table %q: want a lowercase identifier (letters, digits, _), not %s", table, CheckpointsTable)
	}
	return &SQLTarget{url: url, table: table, name: name, schema: NewOutboxSchema(table)}, nil
}

// OutboxSchema is watermill-sql's default PostgreSQL schema (the same
// table, which a watermill subscriber reads as usual) whose INSERT takes
// the messages as three arrays: one statement text for any number of
// messages, prepared once, where the default's multi-row VALUES is a new
// statement, parsed and planned again, for every batch size.
type OutboxSchema struct {
	wsql.DefaultPostgreSQLSchema
}

// NewOutboxSchema returns the schema of a messages table.
func NewOutboxSchema(table string) OutboxSchema {
	return OutboxSchema{wsql.DefaultPostgreSQLSchema{GenerateMessagesTableName: func(string) string { return pgx.Identifier{table}.Sanitize() }}}
}

// InsertQuery inserts the messages in their order: the offsets, which
// readers order by, follow the arrays' order.
func (s OutboxSchema) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	uuids, payloads, metadata := make([]string, len(params.Msgs)), make([]string, len(params.Msgs)), make([]string, len(params.Msgs))
	for i, m := range params.Msgs {
		meta, err := json.Marshal(m.Metadata)
		if err != nil {
			return wsql.Query{}, fmt.Errorf("encode metadata of message %s: %w", m.UUID, err)
		}
		uuids[i], payloads[i], metadata[i] = m.UUID, string(m.Payload), string(meta)
	}
	q := `INSERT INTO ` + s.MessagesTable(params.Topic) + ` (uuid, payload, metadata, transaction_id)
		SELECT u, p::json, m::json, pg_current_xact_id() FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS x(u, p, m, i) ORDER BY i`
	return wsql.Query{Query: q, Args: []any{uuids, payloads, metadata}}, nil
}

// Table is the messages table's name.
func (t *SQLTarget) Table() string { return t.table }

// connect opens the pool and creates the tables and the feed's checkpoint
// row when missing.
func (t *SQLTarget) connect(ctx context.Context) error {
	if t.pool != nil {
		return nil
	}
	cfg, err := pgxpool.ParseConfig(t.url)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	if err := t.migrate(ctx, pool); err != nil {
		pool.Close()
		return err
	}
	t.pool = pool
	return nil
}

// migrate creates the messages table (watermill's schema, under its
// advisory lock) and the checkpoints table, and the feed's row.
func (t *SQLTarget) migrate(ctx context.Context, pool *pgxpool.Pool) error {
	queries, err := t.schema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: t.table})
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, q := range queries {
			if _, err := tx.Exec(ctx, q.Query, q.Args...); err != nil {
				return fmt.Errorf("create table %s: %w", t.table, err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+CheckpointsTable+` (
			name text PRIMARY KEY, target text NOT NULL, seq bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create table %s: %w", CheckpointsTable, err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+CheckpointsTable+` (name, target, seq) VALUES ($1, $2, 0) ON CONFLICT (name) DO NOTHING`, t.name, t.table)
		return err
	})
}

// Checkpoint implements Target.
func (t *SQLTarget) Checkpoint(ctx context.Context) (uint64, error) {
	if err := t.connect(ctx); err != nil {
		return 0, err
	}
	var seq int64
	var table string
	err := t.pool.QueryRow(ctx, `SELECT seq, target FROM `+CheckpointsTable+` WHERE name = $1`, t.name).Scan(&seq, &table)
	if err != nil {
		return 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if table != t.table {
		return 0, fmt.Errorf("feed %s publishes to table %s, not %s: choose another --name: %w", t.name, table, t.table, ErrFenced)
	}
	t.expect = uint64(seq)
	return t.expect, nil
}

// Publish implements Target: one transaction moves the feed's checkpoint
// (if no one else did), inserts the messages through a watermill
// publisher on that transaction, and commits.
func (t *SQLTarget) Publish(ctx context.Context, msgs []Message, to uint64) error {
	if err := t.connect(ctx); err != nil {
		return err
	}
	tx, err := t.pool.Begin(ctx)
	if err != nil {
		return classifySQL(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Moving the checkpoint first takes its row lock for the transaction:
	// a second feed of the same name waits, then finds it moved.
	tag, err := tx.Exec(ctx, `UPDATE `+CheckpointsTable+` SET seq = $3, updated_at = now() WHERE name = $1 AND seq = $2`,
		t.name, int64(t.expect), int64(to))
	if err != nil {
		return classifySQL(fmt.Errorf("move checkpoint: %w", err))
	}
	if tag.RowsAffected() != 1 {
		var seq int64
		if err := tx.QueryRow(ctx, `SELECT seq FROM `+CheckpointsTable+` WHERE name = $1`, t.name).Scan(&seq); err != nil {
			return classifySQL(fmt.Errorf("read checkpoint: %w", err))
		}
		if uint64(seq) == to {
			// The last attempt committed and lost its answer.
			t.expect = to
			return nil
		}
		return fmt.Errorf("checkpoint of feed %s is %d, this feed left it at %d: %w", t.name, seq, t.expect, ErrFenced)
	}
	if len(msgs) > 0 {
		pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: t.schema}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		w := make([]*message.Message, len(msgs))
		for i, m := range msgs {
			w[i] = m.Watermill()
			w[i].SetContext(ctx)
		}
		if err := pub.Publish(t.table, w...); err != nil {
			return classifySQL(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return classifySQL(fmt.Errorf("commit: %w", err))
	}
	t.expect = to
	return nil
}

// classifySQL marks an error the database answered for a reason that a
// retry cannot change (bad data, a constraint, a missing table or right)
// as ErrRefused; connection errors, timeouts, shutdowns, serialization
// failures and lack of resources stay retryable.
func classifySQL(err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || len(pg.Code) < 2 {
		return err
	}
	switch pg.Code[:2] {
	case "08", "40", "53", "57", "58":
		return err
	}
	return fmt.Errorf("%w: %w", ErrRefused, err)
}

// Close implements Target.
func (t *SQLTarget) Close() error {
	if t.pool != nil {
		t.pool.Close()
		t.pool = nil
	}
	return nil
}
