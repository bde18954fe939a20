// Package projections is Tresor's read side: the read models that players,
// finance and operators query (accounts with their double-entry journal,
// blocks, player history, reconciliation), built from the event stream.
//
// The stream is the only source of truth; every read model here can be
// dropped and rebuilt from the first event. A Store applies events in
// stream order, in batches, and writes its checkpoint (the stream sequence
// it covers) in the same transaction as the rows: a crash never applies an
// event twice or skips one, and a gap in sequences is an error. Fold turns a
// batch into Changes, the one description of what the batch does, so that
// the in-memory and PostgreSQL stores cannot disagree on meaning.
//
// This package imports domain only, never eventstore: cmd adapts the event
// store to Source.
package projections

import (
	"context"
	"errors"
	"time"

	"github.com/fdj/tresor/domain"
)

// Envelope is one record of the stream as a projection sees it. Event is
// nil for a record that is not a domain event (a Seal of the hash chain):
// it holds no read-model data but its sequence still counts, so that the
// checkpoint moves over it and the sequence stays gap-free.
type Envelope struct {
	Seq   uint64
	At    time.Time
	Event domain.Event
	// AppendRemaining is how many records of the same atomic append (one
	// command's events, committed together) follow this one, at the next
	// sequences: 0 for the last or only record of its append. The Runner
	// applies an append whole, so that no reader ever sees part of one.
	AppendRemaining int
	// Seal marks a Seal record of the hash chain (Event is nil): the
	// runner reports the last one it applied.
	Seal bool
}

// Source is the stream as the read side reads it. cmd adapts the event store
// to it; tests use an in-memory stream (projectionstest).
type Source interface {
	// Read calls fn for every record from sequence from (1 is the first) in
	// stream order, then follows the tail, until ctx ends (it returns
	// ctx.Err()), fn returns an error (it returns it) or reading fails.
	// Event is nil for a record that is not a domain event. Sequences must
	// be contiguous; the projection refuses a gap anyway.
	Read(ctx context.Context, from uint64, fn func(Envelope) error) error
	// Head returns the sequence of the last record of the stream, 0 when it
	// is empty: the projection's lag is Head minus its checkpoint.
	Head(ctx context.Context) (uint64, error)
}

// Limits of the read side. Every query and batch is bounded.
const (
	// BatchMax is the most records a Runner gathers into one transaction
	// before it takes no new append, only the rest of the append its last
	// record belongs to (see AppendMax). Large enough to amortise a
	// transaction, small enough to keep one batch's memory and lock time
	// short.
	BatchMax = 1000
	// AppendMax is the most records one atomic append holds: the event
	// store's limit of one atomic batch (nats-server's max_batch_size),
	// which cmd checks is the same. A Runner completes the append a batch
	// ends in, so a batch holds fewer than BatchMax+AppendMax records.
	AppendMax = 1000
	// PageMax bounds every paged query (history, journal, accounts).
	PageMax = 100
	// PageDefault is the page size when a query asks for none.
	PageDefault = 20
	// WaitMax bounds WaitFor: a reader asking for a position the
	// projection does not reach in that time gets ErrNotReached instead
	// of hanging.
	WaitMax = 10 * time.Second
	// ReconciliationRowsMax bounds the rows of one reconciliation scope
	// (blocks, emissions or days: a few thousand in a decade).
	ReconciliationRowsMax = 100_000
	// LimitChangesMax bounds the limit changes replayed for one account's
	// limits in force (they are a handful in practice).
	LimitChangesMax = 10_000
)

// Errors of the read side. Store methods return them wrapped with context;
// test them with errors.Is.
var (
	// ErrGap is returned when a batch does not continue the checkpoint:
	// a missing sequence is never skipped.
	ErrGap = errors.New("gap in stream sequences")
	// ErrNotFound is returned for an account, block or play the read
	// models do not hold.
	ErrNotFound = errors.New("not found")
	// ErrNotReached is returned by WaitFor when the projection did not
	// reach the asked position in time.
	ErrNotReached = errors.New("projection has not reached the stream position")
	// ErrInvalid is returned for a query outside its bounds (a page size
	// above PageMax, a malformed cursor) and for an event the read models
	// cannot place (a stake on an unknown block).
	ErrInvalid = errors.New("invalid")
	// ErrSwitched is returned by Apply when the store's readers were
	// switched to a rebuilt copy: the caller re-reads the checkpoint and
	// goes on from there.
	ErrSwitched = errors.New("projection switched to a rebuilt copy")
)

// Store holds the read models. The in-memory store serves the embedded
// default; the PostgreSQL store serves production. projectionstest.Run is
// their common conformance suite.
type Store interface {
	// Apply applies a batch of records in stream order and moves the
	// checkpoint to the last one, atomically. Records at or below the
	// checkpoint are skipped (re-applying is a no-op); the first record
	// above it must be checkpoint+1 and the rest contiguous, or Apply
	// returns ErrGap and changes nothing. It returns ErrInvalid for an
	// event the read models cannot place and ErrSwitched when the readers
	// moved to a rebuilt copy.
	Apply(ctx context.Context, batch []Envelope) error
	// Checkpoint returns the last stream sequence applied, 0 for none.
	Checkpoint(ctx context.Context) (uint64, error)
	// WaitFor returns once the checkpoint is at least seq
	// (read-your-writes). It waits at most WaitMax, or less if ctx ends,
	// and then returns ErrNotReached.
	WaitFor(ctx context.Context, seq uint64) error

	// Account returns a player's account, or ErrNotFound.
	Account(ctx context.Context, player string) (Account, error)
	// Accounts lists player accounts in id order after the player id
	// after ("" for the first page), at most limit (≤ PageMax).
	Accounts(ctx context.Context, after string, limit int) ([]Account, error)
	// Journal lists the journal lines of a ledger account (a player's,
	// a block's or the house's; see domain.PlayerAccount) in stream order
	// after the cursor after (the zero cursor for the first page), at most
	// limit (≤ PageMax).
	Journal(ctx context.Context, account string, after JournalCursor, limit int) ([]JournalLine, error)
	// AccountTotals returns the sum of a ledger account's credit lines and
	// of its debit lines: its balance is credits minus debits.
	AccountTotals(ctx context.Context, account string) (credits, debits domain.Amount, err error)

	// Block returns a block's report, or ErrNotFound.
	Block(ctx context.Context, id string) (BlockReport, error)
	// Blocks lists block reports in id order after the block id after,
	// at most limit (≤ PageMax).
	Blocks(ctx context.Context, after string, limit int) ([]BlockReport, error)

	// History returns a player's plays, newest first, before the cursor
	// before ("" for the newest), at most limit (≤ PageMax, PageDefault
	// when 0), with the cursor of the next page ("" when there is none).
	History(ctx context.Context, player, before string, limit int) (HistoryPage, error)
	// LastPlay returns a player's newest play (Article 4.2: did my last
	// unit win?), or ErrNotFound.
	LastPlay(ctx context.Context, player string) (Play, error)
	// Play returns one play of a player by id, however old, or ErrNotFound
	// (also for another player's play: an answer must not tell whether it
	// exists).
	Play(ctx context.Context, player, id string) (Play, error)

	// Reconciliation returns finance's reconciliation rows of a scope (per
	// block, per emission or per day), in key order. A non-empty emission
	// keeps that emission's rows: its own, its blocks', or its days' (the
	// activity of its blocks alone); without one, a day row adds up every
	// emission's activity. It returns ErrInvalid for another scope.
	Reconciliation(ctx context.Context, scope Scope, emission string) ([]Reconciliation, error)

	// Statement returns, in one snapshot, a player's balances before the
	// query's period and before its end and a page of the movements
	// between them (StatementQuery), or ErrNotFound for no account, or
	// ErrInvalid for a query outside its bounds.
	Statement(ctx context.Context, q StatementQuery) (Statement, error)
	// Bans returns a player's bans, in force and lifted, oldest first (at
	// most BansMax).
	Bans(ctx context.Context, player string) ([]Ban, error)
	// Suspensions returns the suspensions of sales in force and the
	// newest SuspensionsResumedMax resumed ones, oldest first.
	Suspensions(ctx context.Context) ([]Suspension, error)
	// Adjustments returns the newest AdjustmentsMax adjustments a query
	// selects, oldest first.
	Adjustments(ctx context.Context, q AdjustmentQuery) ([]Adjustment, error)
	// Erasures returns the newest ErasuresMax erasures of personal data a
	// query selects, oldest first.
	Erasures(ctx context.Context, q ErasureQuery) ([]Erasure, error)
	// ReportData returns, in one snapshot, what the report pack reads.
	ReportData(ctx context.Context) (ReportData, error)
	// LargeWins returns, in one snapshot, the wins a query asks for
	// (oldest first) and the stream position they reflect; more is true
	// when the limit left some out. A query outside its bounds is
	// ErrInvalid.
	LargeWins(ctx context.Context, q LargeWinsQuery) (wins []Win, seq uint64, more bool, err error)

	// Close releases the store's resources.
	Close() error
}

// Dropper is a Store that can drop its rows by itself, outside Apply (the
// in-memory store, when a shard of its snapshot fails to load). Waiting
// for the next event to hear of it would leave reads unavailable for as
// long as the stream stays idle.
type Dropper interface {
	// Dropped returns a channel that is closed while a drop has not been
	// reported yet: the Runner then calls Apply with no records, which
	// returns ErrSwitched, and applies the stream again from the new
	// checkpoint at once.
	Dropped() <-chan struct{}
}

// ClampLimit checks a page size: 0 means PageDefault, above PageMax or below
// zero is ErrInvalid.
func ClampLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return PageDefault, nil
	case limit < 0 || limit > PageMax:
		return 0, errorsf(ErrInvalid, "page size %d: want 1 to %d", limit, PageMax)
	}
	return limit, nil
}
