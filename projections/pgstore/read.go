package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/jackc/pgx/v5"
)

// querier is what reads need: the pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// snapshotTx is a read-only repeatable-read transaction: every statement in
// it sees the same committed batches, so rows of two batches never mix and a
// read never shows part of one append (a block's row with its tiers of the
// next batch, say). A read of one statement needs none: a statement sees
// one snapshot anyway.
var snapshotTx = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// snapshot runs read, a read of several statements, in a snapshotTx.
func snapshot[T any](ctx context.Context, s *Store, read func(tx pgx.Tx) (T, error)) (T, error) {
	var out T
	err := pgx.BeginTxFunc(ctx, s.pool, snapshotTx, func(tx pgx.Tx) error {
		var err error
		out, err = read(tx)
		return err
	})
	return out, err
}

// Account implements projections.Store.
func (s *Store) Account(ctx context.Context, player string) (projections.Account, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return projections.Account{}, err
	}
	accounts, err := s.readAccounts(ctx, q, q.account, player)
	if err != nil {
		return projections.Account{}, fmt.Errorf("account %q: %w", player, err)
	}
	if len(accounts) == 0 {
		return projections.Account{}, fmt.Errorf("account %q: %w", player, projections.ErrNotFound)
	}
	return accounts[0], nil
}

// Accounts implements projections.Store.
func (s *Store) Accounts(ctx context.Context, after string, limit int) ([]projections.Account, error) {
	limit, err := projections.ClampLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list accounts: %w", err)
	}
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, err
	}
	out, err := s.readAccounts(ctx, q, q.accountsAfter, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list accounts after %q: %w", after, err)
	}
	return out, nil
}

// readAccounts reads accounts with their limit changes, in one snapshot.
func (s *Store) readAccounts(ctx context.Context, q *statements, sql string, args ...any) ([]projections.Account, error) {
	return snapshot(ctx, s, func(tx pgx.Tx) ([]projections.Account, error) {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return collectAccounts(ctx, tx, q, rows)
	})
}

// collectAccounts collects account rows and adds their limits in force.
func collectAccounts(ctx context.Context, db querier, q *statements, rows pgx.Rows) ([]projections.Account, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.Account, error) {
		var a projections.Account
		var bal, dep, wd, staked, won, last, adjCredits, adjDebits int64
		err := r.Scan(&a.Player, &a.OpenedAt, &bal, &dep, &wd, &staked, &won, &a.Plays, &a.SelfExcluded, &last, &a.SelfExcludedUntil, &a.ClosedAt,
			&adjCredits, &adjDebits)
		a.OpenedAt, a.SelfExcludedUntil, a.ClosedAt = utc(a.OpenedAt), utcPtr(a.SelfExcludedUntil), utcPtr(a.ClosedAt)
		a.Balance, a.Deposited, a.Withdrawn = domain.Amount(bal), domain.Amount(dep), domain.Amount(wd)
		a.Staked, a.Won, a.LastSeq = domain.Amount(staked), domain.Amount(won), uint64(last)
		a.AdjustedCredits, a.AdjustedDebits = domain.Amount(adjCredits), domain.Amount(adjDebits)
		return a, err
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	players := make([]string, len(out))
	for i, a := range out {
		players[i] = a.Player
	}
	rows, err = db.Query(ctx, q.limitsOf, players, projections.LimitChangesMax*len(players)+1)
	if err != nil {
		return nil, err
	}
	changes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.LimitChange, error) {
		var l projections.LimitChange
		var seq, amount int64
		var kind string
		err := r.Scan(&l.Player, &seq, &kind, &l.At, &amount, &l.EffectiveAt, &l.PeriodDays)
		l.Seq, l.Kind, l.Limit, l.At, l.EffectiveAt = uint64(seq), domain.LimitKind(kind), domain.Amount(amount), utc(l.At), utc(l.EffectiveAt)
		return l, err
	})
	if err != nil {
		return nil, err
	}
	if len(changes) > projections.LimitChangesMax*len(players) {
		return nil, fmt.Errorf("%w: more than %d limit changes per account", projections.ErrInvalid, projections.LimitChangesMax)
	}
	byPlayer := map[string][]projections.LimitChange{}
	for _, l := range changes {
		byPlayer[l.Player] = append(byPlayer[l.Player], l)
	}
	bans, err := activeBans(ctx, db, q.more, players)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].SetLimits(byPlayer[out[i].Player])
		out[i].Bans = bans[out[i].Player]
	}
	return out, nil
}

// Journal implements projections.Store.
func (s *Store) Journal(ctx context.Context, account string, after projections.JournalCursor, limit int) ([]projections.JournalLine, error) {
	limit, err := projections.ClampLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", account, err)
	}
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q.journal, account, int64(after.Seq), after.Line, limit)
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", account, err)
	}
	out, err := pgx.CollectRows(rows, scanJournalLine)
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", account, err)
	}
	return out, nil
}

// scanJournalLine reads a row of journalColumns.
func scanJournalLine(r pgx.CollectableRow) (projections.JournalLine, error) {
	var l projections.JournalLine
	var seq, amount int64
	var balance *int64
	var side string
	err := r.Scan(&seq, &l.Line, &l.At, &l.Account, &side, &amount, &l.Counterpart, &l.EventType, &l.Ref, &balance)
	l.Seq, l.Side, l.Amount, l.At = uint64(seq), projections.Side(side), domain.Amount(amount), utc(l.At)
	if balance != nil {
		b := domain.Amount(*balance)
		l.BalanceAfter = &b
	}
	return l, err
}

// AccountTotals implements projections.Store.
func (s *Store) AccountTotals(ctx context.Context, account string) (credits, debits domain.Amount, err error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return 0, 0, err
	}
	var c, d int64
	err = s.pool.QueryRow(ctx, q.totals, account).Scan(&c, &d)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("totals of %s: %w", account, err)
	}
	return domain.Amount(c), domain.Amount(d), nil
}

// readBlocks reads block rows with their tiers, in two statements: db
// must show both the same batches (a snapshotTx, or the apply transaction,
// which holds the checkpoint's lock).
func readBlocks(ctx context.Context, db querier, q *statements, sql string, args ...any) ([]projections.BlockRow, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.BlockRow, error) {
		var b projections.BlockRow
		var price, sales, paid, settledPrizes, owed, fund, stakeMis, settleMis, last, openedSeq int64
		var state string
		var seedHash, root, seed []byte
		err := r.Scan(&b.ID, &b.Emission, &b.Index, &price, &b.Units, &state, &seedHash, &root, &seed, &b.OpenedAt, &b.ClosedAt,
			&b.Settled, &b.Counters.UnitsSold, &sales, &paid, &settledPrizes, &owed, &fund, &stakeMis, &settleMis, &last, &openedSeq, &b.BySystem)
		if err != nil {
			return b, err
		}
		if len(seedHash) != 32 || len(root) != 32 || (seed != nil && len(seed) != 32) {
			return b, fmt.Errorf("block %s: malformed commitment or seed", b.ID)
		}
		b.Price, b.State, b.LastSeq, b.OpenedSeq = domain.Amount(price), domain.BlockState(state), uint64(last), uint64(openedSeq)
		b.OpenedAt, b.ClosedAt = utc(b.OpenedAt), utcPtr(b.ClosedAt)
		copy(b.Commitment.SeedHash[:], seedHash)
		copy(b.Commitment.Root[:], root)
		b.Commitment.Units = b.Units
		if seed != nil {
			var sd domain.Seed
			copy(sd[:], seed)
			b.Seed = &sd
		}
		b.Counters = projections.Counters{UnitsSold: b.Counters.UnitsSold, Sales: domain.Amount(sales), PrizesPaid: domain.Amount(paid),
			PrizesSettled: domain.Amount(settledPrizes), PrizesOwed: domain.Amount(owed), PrizeFund: domain.Amount(fund),
			StakeMismatch: domain.Amount(stakeMis), SettleMismatch: domain.Amount(settleMis)}
		return b, nil
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	if len(out) > projections.ReconciliationRowsMax {
		return nil, fmt.Errorf("%w: more than %d blocks", projections.ErrInvalid, projections.ReconciliationRowsMax)
	}
	ids := make([]string, len(out))
	index := map[string]int{}
	for i, b := range out {
		ids[i], index[b.ID] = b.ID, i
	}
	rows, err = db.Query(ctx, q.tiersOf, ids)
	if err != nil {
		return nil, err
	}
	var block string
	var tier int16
	var lots, assigned, paid int32
	var prize int64
	_, err = pgx.ForEachRow(rows, []any{&block, &tier, &lots, &prize, &assigned, &paid}, func() error {
		if tier < 0 || int(tier) >= domain.TierCount {
			return fmt.Errorf("block %s: tier code %d", block, tier)
		}
		out[index[block]].Tiers[tier] = projections.TierRow{Lots: int(lots), Prize: domain.Amount(prize), Assigned: int(assigned), Paid: int(paid)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Block implements projections.Store.
func (s *Store) Block(ctx context.Context, id string) (projections.BlockReport, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return projections.BlockReport{}, err
	}
	blocks, err := snapshot(ctx, s, func(tx pgx.Tx) ([]projections.BlockRow, error) { return readBlocks(ctx, tx, q, q.block, id) })
	if err != nil {
		return projections.BlockReport{}, fmt.Errorf("block %q: %w", id, err)
	}
	if len(blocks) == 0 {
		return projections.BlockReport{}, fmt.Errorf("block %q: %w", id, projections.ErrNotFound)
	}
	return blocks[0].Report(), nil
}

// Blocks implements projections.Store.
func (s *Store) Blocks(ctx context.Context, after string, limit int) ([]projections.BlockReport, error) {
	limit, err := projections.ClampLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list blocks: %w", err)
	}
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, err
	}
	blocks, err := snapshot(ctx, s, func(tx pgx.Tx) ([]projections.BlockRow, error) {
		return readBlocks(ctx, tx, q, q.blocksAfter, after, limit)
	})
	if err != nil {
		return nil, fmt.Errorf("list blocks after %q: %w", after, err)
	}
	out := make([]projections.BlockReport, len(blocks))
	for i := range blocks {
		out[i] = blocks[i].Report()
	}
	return out, nil
}

func readPlays(ctx context.Context, db querier, sql string, args ...any) ([]projections.Play, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.Play, error) {
		var p projections.Play
		var seq, stake, before, after int64
		var unit int32
		var status string
		var proofTier, tier *int16
		var salt, path, throws []byte
		var prize, settledSeq *int64
		err := r.Scan(&p.ID, &p.Player, &seq, &p.Block, &unit, &p.At, &stake, &status, &proofTier, &salt, &path, &throws,
			&tier, &prize, &p.SettledAt, &before, &after, &settledSeq)
		if err != nil {
			return p, err
		}
		if settledSeq != nil {
			p.SettledSeq = uint64(*settledSeq)
		}
		p.Seq, p.Unit, p.Stake, p.Status = uint64(seq), uint32(unit), domain.Amount(stake), projections.PlayStatus(status)
		p.BalanceBefore, p.BalanceAfter, p.At, p.SettledAt = domain.Amount(before), domain.Amount(after), utc(p.At), utcPtr(p.SettledAt)
		if proofTier != nil {
			if len(salt) != 32 || len(path)%32 != 0 {
				return p, fmt.Errorf("play %s: malformed proof", p.ID)
			}
			proof := &domain.UnitProof{Unit: p.Unit, Tier: domain.Tier(*proofTier), Path: make([][32]byte, len(path)/32)}
			copy(proof.Salt[:], salt)
			for i := range proof.Path {
				copy(proof.Path[i][:], path[32*i:])
			}
			p.Proof = proof
		}
		if tier != nil {
			t := domain.Tier(*tier)
			p.Tier = &t
		}
		if prize != nil {
			a := domain.Amount(*prize)
			p.Prize = &a
		}
		if p.Throws, err = decodeThrows(throws); err != nil {
			return p, fmt.Errorf("play %s: %w", p.ID, err)
		}
		return p, nil
	})
}

// History implements projections.Store.
func (s *Store) History(ctx context.Context, player, before string, limit int) (projections.HistoryPage, error) {
	limit, err := projections.ClampLimit(limit)
	if err != nil {
		return projections.HistoryPage{}, fmt.Errorf("history of %s: %w", player, err)
	}
	cursor, err := projections.ParseHistoryCursor(before)
	if err != nil {
		return projections.HistoryPage{}, fmt.Errorf("history of %s: %w", player, err)
	}
	// The seq column is a bigint: a cursor past its range (as far as any
	// stream goes) reads as the newest page, as it does in memory, instead
	// of wrapping to a negative number that matches nothing.
	if cursor == 0 || cursor > math.MaxInt64 {
		cursor = math.MaxInt64
	}
	q, err := s.refresh(ctx, false)
	if err != nil {
		return projections.HistoryPage{}, err
	}
	plays, err := readPlays(ctx, s.pool, q.history, player, int64(cursor), limit+1)
	if err != nil {
		return projections.HistoryPage{}, fmt.Errorf("history of %s: %w", player, err)
	}
	page := projections.HistoryPage{Plays: plays}
	if len(plays) > limit {
		page.Plays = plays[:limit]
		page.Next = projections.HistoryCursor(plays[limit-1].Seq)
	}
	return page, nil
}

// LastPlay implements projections.Store: one probe of the history index.
func (s *Store) LastPlay(ctx context.Context, player string) (projections.Play, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return projections.Play{}, err
	}
	plays, err := readPlays(ctx, s.pool, q.lastPlay, player)
	if err != nil {
		return projections.Play{}, fmt.Errorf("last play of %s: %w", player, err)
	}
	if len(plays) == 0 {
		return projections.Play{}, fmt.Errorf("last play of %q: %w", player, projections.ErrNotFound)
	}
	return plays[0], nil
}

// Play implements projections.Store: one probe of the primary key.
func (s *Store) Play(ctx context.Context, player, id string) (projections.Play, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return projections.Play{}, err
	}
	plays, err := readPlays(ctx, s.pool, q.play, id, player)
	if err != nil {
		return projections.Play{}, fmt.Errorf("play %s of %s: %w", id, player, err)
	}
	if len(plays) == 0 {
		return projections.Play{}, fmt.Errorf("play %q of %q: %w", id, player, projections.ErrNotFound)
	}
	return plays[0], nil
}

// Reconciliation implements projections.Store. The three scopes read one
// consistent snapshot (a repeatable-read transaction).
func (s *Store) Reconciliation(ctx context.Context, scope projections.Scope, emission string) ([]projections.Reconciliation, error) {
	if !projections.ValidScope(scope) {
		return nil, fmt.Errorf("reconciliation: %w: scope %q", projections.ErrInvalid, scope)
	}
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, err
	}
	out := []projections.Reconciliation{}
	err = pgx.BeginTxFunc(ctx, s.pool, snapshotTx, func(tx pgx.Tx) error {
		switch scope {
		case projections.ScopeDay:
			rows, err := tx.Query(ctx, q.days, emission)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.Reconciliation, error) {
				var day string
				var c projections.Counters
				var sales, paid, settled, owed, fund, stakeMis, settleMis int64
				err := r.Scan(&day, &c.UnitsSold, &sales, &paid, &settled, &owed, &fund, &stakeMis, &settleMis)
				c.Sales, c.PrizesPaid, c.PrizesSettled, c.PrizesOwed = domain.Amount(sales), domain.Amount(paid), domain.Amount(settled), domain.Amount(owed)
				c.PrizeFund, c.StakeMismatch, c.SettleMismatch = domain.Amount(fund), domain.Amount(stakeMis), domain.Amount(settleMis)
				return projections.Reconcile(scope, day, c, 0), err
			})
			return err
		default:
			blocks, err := readBlocks(ctx, tx, q, q.allBlocks)
			if err != nil {
				return err
			}
			if scope == projections.ScopeBlock {
				for i := range blocks {
					if b := &blocks[i]; emission == "" || b.Emission == emission {
						out = append(out, projections.Reconcile(scope, b.ID, b.Counters, b.TableMismatch()))
					}
				}
				return nil
			}
			rows, err := tx.Query(ctx, q.emIDs)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, id := range ids {
				if emission != "" && id != emission {
					continue
				}
				var c projections.Counters
				var mismatch domain.Amount
				for i := range blocks {
					if b := &blocks[i]; b.Emission == id {
						c.Add(b.Counters)
						mismatch += b.TableMismatch()
					}
				}
				out = append(out, projections.Reconcile(scope, id, c, mismatch))
			}
			return nil
		}
	})
	if err != nil {
		return nil, fmt.Errorf("reconciliation by %s: %w", scope, err)
	}
	return out, nil
}
