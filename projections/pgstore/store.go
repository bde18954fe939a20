package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a Store.
type Config struct {
	// Rules is the rule set the stream was written under.
	Rules *domain.RuleSet
	// Namespace names the control schema and prefixes the generation
	// schemas (NamespaceDefault when empty).
	Namespace string
	// RefreshEvery is how often a reader looks for a switched generation
	// (1 s when zero): how long, at most, a reader in another process
	// keeps reading a copy that a rebuild replaced.
	RefreshEvery time.Duration
}

// Validate applies defaults and checks the configuration.
func (c *Config) Validate() error {
	if c.Rules == nil {
		return errors.New("projections store: no rule set")
	}
	if c.Namespace == "" {
		c.Namespace = NamespaceDefault
	}
	if c.RefreshEvery <= 0 {
		c.RefreshEvery = time.Second
	}
	return checkNamespace(c.Namespace)
}

// Store is the PostgreSQL store. It is safe for concurrent use; applies are
// serialised by the checkpoint row's lock, across processes too.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
	// pinned stores write to their generation whatever is current: the
	// store a rebuild fills.
	pinned bool

	mu        sync.Mutex
	gen       int
	schema    string
	checkedAt time.Time
	sql       *statements

	applyMu sync.Mutex
	// applyGen is the generation the caller of Apply last learnt the
	// checkpoint of: when a read moves the store to another generation,
	// the next Apply returns ErrSwitched so that the Runner reads the new
	// checkpoint instead of finding a gap.
	applyGen int
	proj     *projections.Projector
	// known is the checkpoint the projector's block facts are in step
	// with; another writer moving the checkpoint makes Apply reload them.
	known    uint64
	hasKnown bool

	wakeMu sync.Mutex
	wake   chan struct{}
}

var _ projections.Store = (*Store)(nil)

// Open migrates the namespace (Migrate) and returns a store on its current
// generation. The pool stays the caller's: Close does not close it.
func Open(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Migrate(ctx, pool, cfg.Namespace); err != nil {
		return nil, err
	}
	s := &Store{pool: pool, cfg: cfg, wake: make(chan struct{})}
	if _, err := s.refresh(ctx, true); err != nil {
		return nil, err
	}
	s.applyGen = s.gen
	return s, nil
}

// openGeneration returns a store pinned to one generation.
func openGeneration(pool *pgxpool.Pool, cfg Config, gen int) *Store {
	schema := genSchema(cfg.Namespace, gen)
	return &Store{pool: pool, cfg: cfg, pinned: true, gen: gen, schema: schema, applyGen: gen,
		sql: newStatements(schema, cfg.Namespace), wake: make(chan struct{})}
}

// Generation returns the generation the store reads and writes.
func (s *Store) Generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// refresh looks up the current generation when the last look is older than
// RefreshEvery (or force), and moves the store to it.
func (s *Store) refresh(ctx context.Context, force bool) (*statements, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pinned || (!force && time.Since(s.checkedAt) < s.cfg.RefreshEvery) {
		return s.sql, nil
	}
	var gen int
	var schema string
	err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT gen, schema_name FROM %s.generations WHERE state = 'current'`, quote(s.cfg.Namespace))).Scan(&gen, &schema)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w in %s", ErrNoGeneration, s.cfg.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("look up the current projections generation: %w", err)
	}
	s.checkedAt = time.Now()
	if gen != s.gen {
		s.gen, s.schema, s.sql = gen, schema, newStatements(schema, s.cfg.Namespace)
	}
	return s.sql, nil
}

// Close implements projections.Store. The pool is the caller's.
func (s *Store) Close() error { return nil }

// Checkpoint implements projections.Store.
func (s *Store) Checkpoint(ctx context.Context) (uint64, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return 0, err
	}
	var seq int64
	if err := s.pool.QueryRow(ctx, q.checkpoint).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read checkpoint: %w", err)
	}
	return uint64(seq), nil
}

// WaitFor implements projections.Store: it wakes at once on an apply by
// this store and polls the checkpoint for applies by other processes.
func (s *Store) WaitFor(ctx context.Context, seq uint64) error {
	return projections.WaitPoll(ctx, seq, s.Checkpoint, func() <-chan struct{} {
		s.wakeMu.Lock()
		defer s.wakeMu.Unlock()
		return s.wake
	})
}

func (s *Store) notify() {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	close(s.wake)
	s.wake = make(chan struct{})
}

// Apply implements projections.Store. One transaction: lock the checkpoint
// row (and check the generation is still the one readers use), fold the
// batch, write every table with one pipelined batch of multi-row
// statements, move the checkpoint, commit.
func (s *Store) Apply(ctx context.Context, batch []projections.Envelope) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.Lock()
	q, gen := s.sql, s.gen
	s.mu.Unlock()
	if gen != s.applyGen {
		s.applyGen, s.hasKnown = gen, false
		return fmt.Errorf("apply batch: readers moved to generation %d: %w", gen, projections.ErrSwitched)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("apply batch: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var cp int64
	var state string
	if err := tx.QueryRow(ctx, q.lockCheckpoint, gen).Scan(&cp, &state); err != nil {
		return fmt.Errorf("apply batch: lock checkpoint of generation %d: %w", gen, err)
	}
	if state == stateRetired || (!s.pinned && state != stateCurrent) {
		s.mu.Lock()
		s.checkedAt = time.Time{}
		s.mu.Unlock()
		s.hasKnown = false
		if _, err := s.refresh(ctx, true); err != nil {
			return err
		}
		s.applyGen = s.Generation()
		return fmt.Errorf("apply batch: generation %d is %s: %w", gen, state, projections.ErrSwitched)
	}
	if !s.hasKnown || s.known != uint64(cp) {
		if err := s.loadFacts(ctx, tx, q); err != nil {
			return err
		}
		s.known, s.hasKnown = uint64(cp), true
	}
	c, err := s.proj.Fold(uint64(cp), batch)
	if err != nil {
		return fmt.Errorf("apply batch after %d: %w", cp, err)
	}
	if c.To == uint64(cp) {
		return nil
	}
	if err := write(ctx, tx, q, c); err != nil {
		return fmt.Errorf("apply %d to %d: %w", c.From, c.To, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("apply %d to %d: commit: %w", c.From, c.To, err)
	}
	s.proj.Commit(c)
	s.known = c.To
	s.notify()
	return nil
}

// loadFacts rebuilds the projector's knowledge of blocks from the rows.
func (s *Store) loadFacts(ctx context.Context, tx pgx.Tx, q *statements) error {
	blocks, err := readBlocks(ctx, tx, q, q.allBlocks)
	if err != nil {
		return fmt.Errorf("load blocks: %w", err)
	}
	s.proj = projections.NewProjector(s.cfg.Rules)
	for i := range blocks {
		s.proj.Know(&blocks[i])
	}
	return nil
}
