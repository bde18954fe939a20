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

// moreStatements are the SQL of the responsible-gaming and reporting read
// models: bans, cash days, statements and the report pack.
type moreStatements struct {
	insertBans, liftBans, bansOf, activeBansOf    string
	addCashDays, cashDays, reportDays, emissions  string
	accountExists, firstSeqFrom, balanceBeforeSeq string
	statementLines, wins                          string
}

const banColumns = `player, ban, seq, at, reference, reason, by_role, by_subject, lifted_seq, lifted_at, lift_reference,
	lift_reason, lifted_by_role, lifted_by_subject`

func newMoreStatements(f func(string) string) *moreStatements {
	rowsMax := fmt.Sprint(projections.ReconciliationRowsMax + 1)
	return &moreStatements{
		insertBans: f(`INSERT INTO {s}.bans (` + banColumns + `)
			SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::text[],
				$9::int8[], $10::timestamptz[], $11::text[], $12::text[], $13::text[], $14::text[])`),
		liftBans: f(`UPDATE {s}.bans b SET lifted_seq = u.lifted_seq, lifted_at = u.lifted_at, lift_reference = u.lift_reference,
				lift_reason = u.lift_reason, lifted_by_role = u.lifted_by_role, lifted_by_subject = u.lifted_by_subject
			FROM unnest($1::text[], $2::text[], $3::int8[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::text[])
				AS u(player, ban, lifted_seq, lifted_at, lift_reference, lift_reason, lifted_by_role, lifted_by_subject)
			WHERE b.player = u.player AND b.ban = u.ban AND b.lifted_seq IS NULL`),
		bansOf: f(`SELECT ` + banColumns + ` FROM {s}.bans WHERE player = $1 ORDER BY seq LIMIT ` + fmt.Sprint(projections.BansMax)),
		activeBansOf: f(`SELECT ` + banColumns + ` FROM {s}.bans WHERE player = ANY($1) AND lifted_seq IS NULL
			ORDER BY player, seq LIMIT $2`),
		addCashDays: f(`INSERT INTO {s}.cash_days AS d (day, deposits, withdrawals)
			SELECT * FROM unnest($1::date[], $2::int8[], $3::int8[])
			ON CONFLICT (day) DO UPDATE SET deposits = d.deposits + EXCLUDED.deposits, withdrawals = d.withdrawals + EXCLUDED.withdrawals`),
		cashDays: f(`SELECT to_char(day, 'YYYY-MM-DD'), deposits, withdrawals FROM {s}.cash_days ORDER BY day LIMIT ` + rowsMax),
		// The reports' days add up every emission's rows.
		reportDays: f(`SELECT to_char(day, 'YYYY-MM-DD'), ` + daySums + `, sum(settled)::int4, sum(settled_stakes)::int8, sum(by_system)::int4
			FROM {s}.days GROUP BY day ORDER BY day LIMIT ` + rowsMax),
		emissions:     f(`SELECT id, price, blocks, rules_version, created_at FROM {s}.emissions ORDER BY id LIMIT ` + rowsMax),
		accountExists: f(`SELECT EXISTS (SELECT 1 FROM {s}.accounts WHERE player = $1)`),
		// A player's journal lines are in the order of their times: the
		// first line at or after an instant bounds the sequences of a
		// period, read on the primary key.
		firstSeqFrom: f(`SELECT seq FROM {s}.journal WHERE account = $1 AND at >= $2 ORDER BY at, seq LIMIT 1`),
		balanceBeforeSeq: f(`SELECT balance_after FROM {s}.journal WHERE account = $1 AND seq < $2
			ORDER BY seq DESC, line DESC LIMIT 1`),
		statementLines: f(`SELECT ` + journalColumns + ` FROM {s}.journal WHERE account = $1 AND seq >= $2 AND seq < $3 AND seq > $4
			ORDER BY seq, line LIMIT $5`),
		wins: f(`SELECT id, player, block, unit, tier, prize, settled_at, status FROM {s}.plays
			WHERE prize > 0 AND prize >= $1 AND settled_at >= $2 AND settled_at < $3 ORDER BY settled_at, id LIMIT $4`),
	}
}

// actorColumns splits an actor into its two nullable columns.
func actorColumns(a *domain.Actor) (role, subject *string) {
	if a == nil {
		return nil, nil
	}
	return &a.Role, &a.Subject
}

// actorOf joins the two columns back.
func actorOf(role, subject *string) *domain.Actor {
	if role == nil || subject == nil {
		return nil
	}
	return &domain.Actor{Role: *role, Subject: *subject}
}

// writeControls queues the batch's bans and cash days.
func writeControls(c *projections.Changes, q *moreStatements, queue queueFunc) error {
	var ins, lift struct {
		player, ban, reference, reason    []string
		byRole, bySubject                 []*string
		seq                               []int64
		at                                []time.Time
		liftedSeq                         []*int64
		liftedAt                          []*time.Time
		liftRef, liftReason, lRole, lSubj []*string
	}
	for _, b := range c.Bans {
		a := &lift
		if b.New {
			a = &ins
			role, subject := actorColumns(b.By)
			a.seq, a.at, a.reference, a.reason = append(a.seq, int64(b.Seq)), append(a.at, b.At), append(a.reference, b.Reference), append(a.reason, b.Reason)
			a.byRole, a.bySubject = append(a.byRole, role), append(a.bySubject, subject)
		}
		a.player, a.ban = append(a.player, b.Player), append(a.ban, b.Ban.Ban)
		var seq *int64
		var ref, reason *string
		if b.LiftedAt != nil {
			s := int64(b.LiftedSeq)
			seq, ref, reason = &s, &b.LiftReference, &b.LiftReason
		}
		role, subject := actorColumns(b.LiftedBy)
		a.liftedSeq, a.liftedAt, a.liftRef, a.liftReason = append(a.liftedSeq, seq), append(a.liftedAt, b.LiftedAt), append(a.liftRef, ref), append(a.liftReason, reason)
		a.lRole, a.lSubj = append(a.lRole, role), append(a.lSubj, subject)
	}
	if n := len(ins.player); n > 0 {
		queue("new bans", n, q.insertBans, ins.player, ins.ban, ins.seq, ins.at, ins.reference, ins.reason, ins.byRole, ins.bySubject,
			ins.liftedSeq, ins.liftedAt, ins.liftRef, ins.liftReason, ins.lRole, ins.lSubj)
	}
	if n := len(lift.player); n > 0 {
		queue("lifted bans", n, q.liftBans, lift.player, lift.ban, lift.liftedSeq, lift.liftedAt, lift.liftRef, lift.liftReason, lift.lRole, lift.lSubj)
	}
	if n := len(c.CashDays); n > 0 {
		days := make([]time.Time, n)
		deposits, withdrawals := make([]int64, n), make([]int64, n)
		for i, d := range c.CashDays {
			day, err := time.Parse(time.DateOnly, d.Day)
			if err != nil {
				return fmt.Errorf("day %q: %w", d.Day, err)
			}
			days[i], deposits[i], withdrawals[i] = day, int64(d.Deposits), int64(d.Withdrawals)
		}
		queue("cash days", n, q.addCashDays, days, deposits, withdrawals)
	}
	return nil
}

// scanBan reads a row of banColumns.
func scanBan(r pgx.CollectableRow) (projections.Ban, error) {
	var b projections.Ban
	var seq int64
	var liftedSeq *int64
	var byRole, bySubject, liftRef, liftReason, lRole, lSubj *string
	err := r.Scan(&b.Player, &b.Ban, &seq, &b.At, &b.Reference, &b.Reason, &byRole, &bySubject, &liftedSeq, &b.LiftedAt,
		&liftRef, &liftReason, &lRole, &lSubj)
	b.Seq, b.At, b.LiftedAt, b.By, b.LiftedBy = uint64(seq), utc(b.At), utcPtr(b.LiftedAt), actorOf(byRole, bySubject), actorOf(lRole, lSubj)
	if liftedSeq != nil {
		b.LiftedSeq, b.LiftReference, b.LiftReason = uint64(*liftedSeq), *liftRef, *liftReason
	}
	return b, err
}

// activeBans reads the bans in force of players, by player.
func activeBans(ctx context.Context, db querier, q *moreStatements, players []string) (map[string][]projections.Ban, error) {
	rows, err := db.Query(ctx, q.activeBansOf, players, domain.BansActiveMax*len(players)+1)
	if err != nil {
		return nil, err
	}
	bans, err := pgx.CollectRows(rows, scanBan)
	if err != nil {
		return nil, err
	}
	if len(bans) > domain.BansActiveMax*len(players) {
		return nil, fmt.Errorf("%w: more than %d bans in force per account", projections.ErrInvalid, domain.BansActiveMax)
	}
	out := map[string][]projections.Ban{}
	for _, b := range bans {
		out[b.Player] = append(out[b.Player], b)
	}
	return out, nil
}

// Bans implements projections.Store.
func (s *Store) Bans(ctx context.Context, player string) ([]projections.Ban, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q.more.bansOf, player)
	if err != nil {
		return nil, fmt.Errorf("bans of %s: %w", player, err)
	}
	out, err := pgx.CollectRows(rows, scanBan)
	if err != nil {
		return nil, fmt.Errorf("bans of %s: %w", player, err)
	}
	if out == nil {
		out = []projections.Ban{}
	}
	return out, nil
}

// Statement implements projections.Store: the period's sequence bounds,
// the balances before them and a page of lines, in one snapshot.
func (s *Store) Statement(ctx context.Context, sq projections.StatementQuery) (projections.Statement, error) {
	from, to, limit, err := sq.Bounds()
	if err != nil {
		return projections.Statement{}, fmt.Errorf("statement of %s: %w", sq.Player, err)
	}
	q, err := s.refresh(ctx, false)
	if err != nil {
		return projections.Statement{}, err
	}
	account := domain.PlayerAccount(sq.Player)
	out, err := snapshot(ctx, s, func(tx pgx.Tx) (projections.Statement, error) {
		st := projections.Statement{Player: sq.Player, Movements: []projections.Movement{}}
		var exists bool
		if err := tx.QueryRow(ctx, q.more.accountExists, sq.Player).Scan(&exists); err != nil {
			return st, err
		}
		if !exists {
			return st, fmt.Errorf("account %q: %w", sq.Player, projections.ErrNotFound)
		}
		var cp int64
		if err := tx.QueryRow(ctx, q.checkpoint).Scan(&cp); err != nil {
			return st, err
		}
		st.Seq = uint64(cp)
		lo, err := firstSeq(ctx, tx, q.more, account, from)
		if err != nil {
			return st, err
		}
		hi, err := firstSeq(ctx, tx, q.more, account, to)
		if err != nil {
			return st, err
		}
		if st.Opening, err = balanceBefore(ctx, tx, q.more, account, lo); err != nil {
			return st, err
		}
		if st.Closing, err = balanceBefore(ctx, tx, q.more, account, hi); err != nil {
			return st, err
		}
		after := int64(min(sq.After, math.MaxInt64))
		rows, err := tx.Query(ctx, q.more.statementLines, account, lo, hi, after, limit+1)
		if err != nil {
			return st, err
		}
		lines, err := pgx.CollectRows(rows, scanJournalLine)
		if err != nil {
			return st, err
		}
		for i, l := range lines {
			if i == limit {
				st.Next = lines[i-1].Seq
				break
			}
			st.Movements = append(st.Movements, projections.MovementOf(l))
		}
		return st, nil
	})
	if err != nil {
		return out, fmt.Errorf("statement of %s: %w", sq.Player, err)
	}
	return out, nil
}

// firstSeq returns the sequence of an account's first line at or after t,
// or past every sequence when there is none.
func firstSeq(ctx context.Context, tx pgx.Tx, q *moreStatements, account string, t time.Time) (int64, error) {
	var seq int64
	err := tx.QueryRow(ctx, q.firstSeqFrom, account, t).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return math.MaxInt64, nil
	}
	return seq, err
}

// balanceBefore returns an account's balance after its last line before
// sequence seq (0 before the first).
func balanceBefore(ctx context.Context, tx pgx.Tx, q *moreStatements, account string, seq int64) (domain.Amount, error) {
	var b *int64
	err := tx.QueryRow(ctx, q.balanceBeforeSeq, account, seq).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && b == nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return domain.Amount(*b), nil
}

// ReportData implements projections.Store.
func (s *Store) ReportData(ctx context.Context) (projections.ReportData, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return projections.ReportData{}, err
	}
	out, err := snapshot(ctx, s, func(tx pgx.Tx) (projections.ReportData, error) {
		var d projections.ReportData
		var cp int64
		if err := tx.QueryRow(ctx, q.checkpoint).Scan(&cp); err != nil {
			return d, err
		}
		d.Seq = uint64(cp)
		var err error
		if d.Blocks, err = readBlocks(ctx, tx, q, q.allBlocks); err != nil {
			return d, err
		}
		rows, err := tx.Query(ctx, q.more.emissions)
		if err != nil {
			return d, err
		}
		if d.Emissions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.Emission, error) {
			var e projections.Emission
			var price int64
			err := r.Scan(&e.ID, &price, &e.Blocks, &e.RulesVersion, &e.CreatedAt)
			e.Price, e.CreatedAt = domain.Amount(price), utc(e.CreatedAt)
			return e, err
		}); err != nil {
			return d, err
		}
		if rows, err = tx.Query(ctx, q.more.reportDays); err != nil {
			return d, err
		}
		if d.Days, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.Day, error) {
			var x projections.Day
			var sales, paid, settled, owed, fund, stakeMis, settleMis, settledStakes int64
			err := r.Scan(&x.Day, &x.Counters.UnitsSold, &sales, &paid, &settled, &owed, &fund, &stakeMis, &settleMis,
				&x.Settled, &settledStakes, &x.BySystem)
			x.Counters.Sales, x.Counters.PrizesPaid, x.Counters.PrizesSettled = domain.Amount(sales), domain.Amount(paid), domain.Amount(settled)
			x.Counters.PrizesOwed, x.Counters.PrizeFund = domain.Amount(owed), domain.Amount(fund)
			x.Counters.StakeMismatch, x.Counters.SettleMismatch, x.SettledStakes = domain.Amount(stakeMis), domain.Amount(settleMis), domain.Amount(settledStakes)
			return x, err
		}); err != nil {
			return d, err
		}
		if rows, err = tx.Query(ctx, q.more.cashDays); err != nil {
			return d, err
		}
		d.CashDays, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.CashDay, error) {
			var x projections.CashDay
			var dep, wd int64
			err := r.Scan(&x.Day, &dep, &wd)
			x.Deposits, x.Withdrawals = domain.Amount(dep), domain.Amount(wd)
			return x, err
		})
		if err != nil {
			return d, err
		}
		if d.Suspensions, err = readSuspensions(ctx, tx, q.suspensions); err != nil {
			return d, err
		}
		d.AdjustmentDays, err = readAdjustmentDays(ctx, tx, q.adjustments)
		return d, err
	})
	if err != nil {
		return out, fmt.Errorf("report data: %w", err)
	}
	if len(out.Emissions) > projections.ReconciliationRowsMax || len(out.Days) > projections.ReconciliationRowsMax || len(out.CashDays) > projections.ReconciliationRowsMax ||
		len(out.AdjustmentDays) > projections.ReconciliationRowsMax {
		return out, fmt.Errorf("report data: %w: more than %d rows", projections.ErrInvalid, projections.ReconciliationRowsMax)
	}
	return out, nil
}

// LargeWins implements projections.Store.
func (s *Store) LargeWins(ctx context.Context, wq projections.LargeWinsQuery) ([]projections.Win, uint64, bool, error) {
	if err := wq.Check(); err != nil {
		return nil, 0, false, fmt.Errorf("large wins: %w", err)
	}
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, 0, false, err
	}
	type page struct {
		wins []projections.Win
		seq  uint64
	}
	out, err := snapshot(ctx, s, func(tx pgx.Tx) (page, error) {
		var p page
		var cp int64
		if err := tx.QueryRow(ctx, q.checkpoint).Scan(&cp); err != nil {
			return p, err
		}
		p.seq = uint64(cp)
		rows, err := tx.Query(ctx, q.more.wins, int64(wq.Threshold), wq.From.UTC(), wq.To.UTC(), wq.Limit+1)
		if err != nil {
			return p, err
		}
		p.wins, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.Win, error) {
			var w projections.Win
			var unit int32
			var tier int16
			var prize int64
			var status string
			err := r.Scan(&w.Play, &w.Player, &w.Block, &unit, &tier, &prize, &w.At, &status)
			w.Unit, w.Tier, w.Prize, w.At = uint32(unit), domain.Tier(tier), domain.Amount(prize), utc(w.At)
			w.BySystem = projections.PlayStatus(status) == projections.StatusCompletedBySystem
			return w, err
		})
		return p, err
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("large wins: %w", err)
	}
	if len(out.wins) > wq.Limit {
		return out.wins[:wq.Limit], out.seq, true, nil
	}
	if out.wins == nil {
		out.wins = []projections.Win{}
	}
	return out.wins, out.seq, false, nil
}
