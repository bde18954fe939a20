package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/jackc/pgx/v5"
)

// statements are the SQL of one generation, schema names spliced in once.
type statements struct {
	checkpoint, lockCheckpoint, advance                                    string
	insertAccounts, updateAccounts, insertLimits, insertJournal            string
	closeAccounts                                                          string
	addTotals, insertEmissions, insertBlocks, insertTiers                  string
	updateBlocks, updateTiers, insertPlays, updatePlays, addDays           string
	account, accountsAfter, limitsOf, journal, totals                      string
	allBlocks, block, blocksAfter, tiersOf, history, lastPlay, play, emIDs string
	days                                                                   string
	// Responsible gaming and reporting: bans, cash days, statements,
	// reports.
	more        *moreStatements
	suspensions *suspensionStatements
	adjustments *adjustmentStatements
	erasures    *erasureStatements
}

const blockColumns = `id, emission, idx, price, units, state, seed_hash, root, seed, opened_at, closed_at, settled,
	units_sold, sales, prizes_paid, prizes_settled, prizes_owed, prize_fund, stake_mismatch, settle_mismatch, last_seq, opened_seq, by_system`

const playColumns = `id, player, seq, block, unit, at, stake, status, proof_tier, proof_salt, proof_path, throws,
	tier, prize, settled_at, balance_before, balance_after, settled_seq`

const accountColumns = `player, opened_at, balance, deposited, withdrawn, staked, won, plays, self_excluded, last_seq, self_excluded_until`

const counterColumns = `units_sold, sales, prizes_paid, prizes_settled, prizes_owed, prize_fund, stake_mismatch, settle_mismatch`

// daySums adds up the counters of a day's rows, one per emission, as the
// integers the rows hold (sum of bigint is numeric).
var daySums = func() string {
	cols := strings.Split(counterColumns, ", ")
	for i, c := range cols {
		cols[i] = "sum(" + c + ")::int8"
	}
	return strings.Join(cols, ", ")
}()

func newStatements(schema, control string) *statements {
	f := func(q string) string { return sqlFor(q, schema, control) }
	return &statements{
		checkpoint:     f(`SELECT seq FROM {s}.checkpoint`),
		lockCheckpoint: f(`SELECT c.seq, g.state FROM {s}.checkpoint c, {c}.generations g WHERE g.gen = $1 FOR UPDATE OF c`),
		advance:        f(`UPDATE {s}.checkpoint SET seq = $2, updated_at = now() WHERE seq = $1`),
		insertAccounts: f(`INSERT INTO {s}.accounts (` + accountColumns + `)
			SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::int8[],
				$8::int4[], $9::bool[], $10::int8[], $11::timestamptz[])`),
		updateAccounts: f(`UPDATE {s}.accounts a SET balance = COALESCE(u.balance, a.balance),
				deposited = a.deposited + u.deposited, withdrawn = a.withdrawn + u.withdrawn,
				staked = a.staked + u.staked, won = a.won + u.won, plays = a.plays + u.plays,
				self_excluded = a.self_excluded OR u.self_excluded, last_seq = u.last_seq,
				self_excluded_until = GREATEST(a.self_excluded_until, u.self_excluded_until)
			FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::int4[], $8::bool[], $9::int8[],
				$10::timestamptz[])
				AS u(player, balance, deposited, withdrawn, staked, won, plays, self_excluded, last_seq, self_excluded_until)
			WHERE a.player = u.player`),
		// A closure or a reopening sets closed_at, after the account's
		// insert or update in the same batch.
		closeAccounts: f(`UPDATE {s}.accounts a SET closed_at = u.closed_at
			FROM unnest($1::text[], $2::timestamptz[]) AS u(player, closed_at) WHERE a.player = u.player`),
		insertLimits: f(`INSERT INTO {s}.limit_changes (player, seq, kind, at, amount, effective_at, period_days)
			SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::timestamptz[], $5::int8[], $6::timestamptz[], $7::int4[])`),
		insertJournal: f(`INSERT INTO {s}.journal (seq, line, at, account, side, amount, counterpart, event_type, ref, balance_after)
			SELECT * FROM unnest($1::int8[], $2::int2[], $3::timestamptz[], $4::text[], $5::text[], $6::int8[], $7::text[], $8::text[], $9::text[],
				$10::int8[])`),
		addTotals: f(`INSERT INTO {s}.account_totals AS t (account, credits, debits)
			SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[])
			ON CONFLICT (account) DO UPDATE SET credits = t.credits + EXCLUDED.credits, debits = t.debits + EXCLUDED.debits`),
		insertEmissions: f(`INSERT INTO {s}.emissions (id, price, blocks, rules_version, created_at)
			SELECT * FROM unnest($1::text[], $2::int8[], $3::int4[], $4::text[], $5::timestamptz[])`),
		insertBlocks: f(`INSERT INTO {s}.blocks (` + blockColumns + `)
			SELECT * FROM unnest($1::text[], $2::text[], $3::int4[], $4::int8[], $5::int4[], $6::text[], $7::bytea[], $8::bytea[],
				$9::bytea[], $10::timestamptz[], $11::timestamptz[], $12::int4[], $13::int4[], $14::int8[], $15::int8[], $16::int8[],
				$17::int8[], $18::int8[], $19::int8[], $20::int8[], $21::int8[], $22::int8[], $23::int4[])`),
		insertTiers: f(`INSERT INTO {s}.block_tiers (block, tier, lots, prize, assigned, paid)
			SELECT * FROM unnest($1::text[], $2::int2[], $3::int4[], $4::int8[], $5::int4[], $6::int4[])`),
		updateBlocks: f(`UPDATE {s}.blocks b SET state = COALESCE(u.state, b.state), seed = COALESCE(u.seed, b.seed),
				closed_at = COALESCE(u.closed_at, b.closed_at), settled = b.settled + u.settled,
				units_sold = b.units_sold + u.units_sold, sales = b.sales + u.sales, prizes_paid = b.prizes_paid + u.prizes_paid,
				prizes_settled = b.prizes_settled + u.prizes_settled, prizes_owed = b.prizes_owed + u.prizes_owed,
				prize_fund = b.prize_fund + u.prize_fund, stake_mismatch = b.stake_mismatch + u.stake_mismatch,
				settle_mismatch = b.settle_mismatch + u.settle_mismatch, last_seq = u.last_seq, by_system = b.by_system + u.by_system
			FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[], $5::int4[], $6::int4[], $7::int8[], $8::int8[],
				$9::int8[], $10::int8[], $11::int8[], $12::int8[], $13::int8[], $14::int8[], $15::int4[])
				AS u(id, state, seed, closed_at, settled, units_sold, sales, prizes_paid, prizes_settled, prizes_owed, prize_fund,
					stake_mismatch, settle_mismatch, last_seq, by_system)
			WHERE b.id = u.id`),
		updateTiers: f(`UPDATE {s}.block_tiers t SET assigned = t.assigned + u.assigned, paid = t.paid + u.paid
			FROM unnest($1::text[], $2::int2[], $3::int4[], $4::int4[]) AS u(block, tier, assigned, paid)
			WHERE t.block = u.block AND t.tier = u.tier`),
		insertPlays: f(`INSERT INTO {s}.plays (` + playColumns + `)
			SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::int4[], $6::timestamptz[], $7::int8[], $8::text[],
				$9::int2[], $10::bytea[], $11::bytea[], $12::bytea[], $13::int2[], $14::int8[], $15::timestamptz[], $16::int8[], $17::int8[], $18::int8[])`),
		updatePlays: f(`UPDATE {s}.plays p SET proof_tier = COALESCE(u.proof_tier, p.proof_tier),
				proof_salt = COALESCE(u.proof_salt, p.proof_salt), proof_path = COALESCE(u.proof_path, p.proof_path),
				throws = p.throws || u.throws, status = COALESCE(u.status, p.status), tier = COALESCE(u.tier, p.tier),
				prize = COALESCE(u.prize, p.prize), settled_at = COALESCE(u.settled_at, p.settled_at),
				balance_after = COALESCE(u.balance_after, p.balance_after), settled_seq = COALESCE(u.settled_seq, p.settled_seq)
			FROM unnest($1::text[], $2::text[], $3::int2[], $4::bytea[], $5::bytea[], $6::bytea[], $7::text[], $8::int2[],
				$9::int8[], $10::timestamptz[], $11::int8[], $12::int8[])
				AS u(id, player, proof_tier, proof_salt, proof_path, throws, status, tier, prize, settled_at, balance_after, settled_seq)
			WHERE p.id = u.id AND p.player = u.player`),
		addDays: f(`INSERT INTO {s}.days AS d (day, emission, ` + counterColumns + `, settled, settled_stakes, by_system)
			SELECT * FROM unnest($1::date[], $2::text[], $3::int4[], $4::int8[], $5::int8[], $6::int8[], $7::int8[], $8::int8[], $9::int8[],
				$10::int8[], $11::int4[], $12::int8[], $13::int4[])
			ON CONFLICT (day, emission) DO UPDATE SET units_sold = d.units_sold + EXCLUDED.units_sold, sales = d.sales + EXCLUDED.sales,
				settled = d.settled + EXCLUDED.settled, settled_stakes = d.settled_stakes + EXCLUDED.settled_stakes,
				by_system = d.by_system + EXCLUDED.by_system,
				prizes_paid = d.prizes_paid + EXCLUDED.prizes_paid, prizes_settled = d.prizes_settled + EXCLUDED.prizes_settled,
				prizes_owed = d.prizes_owed + EXCLUDED.prizes_owed, prize_fund = d.prize_fund + EXCLUDED.prize_fund,
				stake_mismatch = d.stake_mismatch + EXCLUDED.stake_mismatch, settle_mismatch = d.settle_mismatch + EXCLUDED.settle_mismatch`),

		account:       f(`SELECT ` + accountColumns + `, closed_at, adjusted_credits, adjusted_debits FROM {s}.accounts WHERE player = $1`),
		accountsAfter: f(`SELECT ` + accountColumns + `, closed_at, adjusted_credits, adjusted_debits FROM {s}.accounts WHERE player > $1 ORDER BY player LIMIT $2`),
		limitsOf: f(`SELECT player, seq, kind, at, amount, effective_at, period_days FROM {s}.limit_changes
			WHERE player = ANY($1) ORDER BY player, seq LIMIT $2`),
		journal: f(`SELECT ` + journalColumns + ` FROM {s}.journal
			WHERE account = $1 AND (seq, line) > ($2, $3) ORDER BY seq, line LIMIT $4`),
		totals:      f(`SELECT credits, debits FROM {s}.account_totals WHERE account = $1`),
		allBlocks:   f(`SELECT ` + blockColumns + ` FROM {s}.blocks ORDER BY id LIMIT ` + fmt.Sprint(projections.ReconciliationRowsMax+1)),
		block:       f(`SELECT ` + blockColumns + ` FROM {s}.blocks WHERE id = $1`),
		blocksAfter: f(`SELECT ` + blockColumns + ` FROM {s}.blocks WHERE id > $1 ORDER BY id LIMIT $2`),
		tiersOf:     f(`SELECT block, tier, lots, prize, assigned, paid FROM {s}.block_tiers WHERE block = ANY($1)`),
		history: f(`SELECT ` + playColumns + ` FROM {s}.plays WHERE player = $1 AND seq < $2
			ORDER BY seq DESC LIMIT $3`),
		lastPlay: f(`SELECT ` + playColumns + ` FROM {s}.plays WHERE player = $1 ORDER BY seq DESC LIMIT 1`),
		play:     f(`SELECT ` + playColumns + ` FROM {s}.plays WHERE id = $1 AND player = $2`),
		emIDs:    f(`SELECT id FROM {s}.emissions ORDER BY id LIMIT ` + fmt.Sprint(projections.ReconciliationRowsMax+1)),
		// Every emission's rows of a day, or one emission's ($1).
		days: f(`SELECT to_char(day, 'YYYY-MM-DD'), ` + daySums + ` FROM {s}.days WHERE $1 = '' OR emission = $1
			GROUP BY day ORDER BY day LIMIT ` + fmt.Sprint(projections.ReconciliationRowsMax+1)),
		more:        newMoreStatements(f),
		suspensions: newSuspensionStatements(f),
		adjustments: newAdjustmentStatements(f),
		erasures:    newErasureStatements(f),
	}
}

const journalColumns = `seq, line, at, account, side, amount, counterpart, event_type, ref, balance_after`

// counted is a statement whose affected rows must be exactly want: an
// update of a row that does not exist means an event for an unknown
// account, block or play.
type counted struct {
	what string
	want int64
}

// write sends every change of the batch in one pipelined round trip and
// checks the updates' row counts.
func write(ctx context.Context, tx pgx.Tx, q *statements, c *projections.Changes) error {
	b := &pgx.Batch{}
	var checks []counted
	queue := func(what string, want int, sql string, args ...any) {
		b.Queue(sql, args...)
		checks = append(checks, counted{what, int64(want)})
	}
	writeAccounts(c, q, queue)
	if n := len(c.LimitChanges); n > 0 {
		var a struct {
			player, kind []string
			seq, amount  []int64
			at, eff      []time.Time
			period       []int32
		}
		for _, l := range c.LimitChanges {
			a.player, a.seq, a.kind = append(a.player, l.Player), append(a.seq, int64(l.Seq)), append(a.kind, string(l.Kind))
			a.at, a.amount, a.eff = append(a.at, l.At), append(a.amount, int64(l.Limit)), append(a.eff, l.EffectiveAt)
			a.period = append(a.period, int32(l.PeriodDays))
		}
		queue("limit changes", n, q.insertLimits, a.player, a.seq, a.kind, a.at, a.amount, a.eff, a.period)
	}
	writeJournal(c, q, queue)
	if n := len(c.Emissions); n > 0 {
		var ids, versions []string
		var prices []int64
		var blocks []int32
		var at []time.Time
		for _, e := range c.Emissions {
			ids, prices, blocks = append(ids, e.ID), append(prices, int64(e.Price)), append(blocks, int32(e.Blocks))
			versions, at = append(versions, e.RulesVersion), append(at, e.CreatedAt)
		}
		queue("emissions", n, q.insertEmissions, ids, prices, blocks, versions, at)
	}
	writeBlocks(c, q, queue)
	if err := writePlays(c, q, queue); err != nil {
		return err
	}
	if n := len(c.Days); n > 0 {
		var days []time.Time
		var emissions []string
		var cols counterArrays
		var settled, bySystem []int32
		var settledStakes []int64
		for _, d := range c.Days {
			day, err := time.Parse(time.DateOnly, d.Day)
			if err != nil {
				return fmt.Errorf("day %q: %w", d.Day, err)
			}
			days, emissions = append(days, day), append(emissions, d.Emission)
			cols.add(d.Counters)
			settled, settledStakes, bySystem = append(settled, int32(d.Settled)), append(settledStakes, int64(d.SettledStakes)), append(bySystem, int32(d.BySystem))
		}
		args := append([]any{days, emissions}, cols.args()...)
		queue("days", n, q.addDays, append(args, settled, settledStakes, bySystem)...)
	}
	if err := writeControls(c, q.more, queue); err != nil {
		return err
	}
	writeSuspensions(c, q.suspensions, queue)
	if err := writeAdjustments(c, q.adjustments, queue); err != nil {
		return err
	}
	if err := writeErasures(c, q.erasures, queue); err != nil {
		return err
	}
	queue("checkpoint", 1, q.advance, int64(c.From-1), int64(c.To))

	res := tx.SendBatch(ctx, b)
	for _, chk := range checks {
		tag, err := res.Exec()
		if err != nil {
			_ = res.Close()
			return fmt.Errorf("write %s: %w", chk.what, err)
		}
		if tag.RowsAffected() != chk.want {
			_ = res.Close()
			return fmt.Errorf("write %s: %w: %d rows written, want %d (an event names a row the read models do not hold, or the checkpoint moved)",
				chk.what, projections.ErrInvalid, tag.RowsAffected(), chk.want)
		}
	}
	if err := res.Close(); err != nil {
		return fmt.Errorf("write batch: %w", err)
	}
	return nil
}

type queueFunc func(what string, want int, sql string, args ...any)

func writeAccounts(c *projections.Changes, q *statements, queue queueFunc) {
	var ins struct {
		player                              []string
		opened                              []time.Time
		balance, dep, wd, staked, won, last []int64
		plays                               []int32
		excluded                            []bool
		until                               []*time.Time
	}
	var upd struct {
		player                     []string
		balance                    []*int64
		dep, wd, staked, won, last []int64
		plays                      []int32
		excluded                   []bool
		until                      []*time.Time
	}
	for _, a := range c.Accounts {
		if a.Opened != nil {
			row := projections.Account{Player: a.Player}
			a.ApplyTo(&row)
			ins.player, ins.opened, ins.balance = append(ins.player, row.Player), append(ins.opened, row.OpenedAt), append(ins.balance, int64(row.Balance))
			ins.dep, ins.wd, ins.staked, ins.won = append(ins.dep, int64(row.Deposited)), append(ins.wd, int64(row.Withdrawn)), append(ins.staked, int64(row.Staked)), append(ins.won, int64(row.Won))
			ins.plays, ins.excluded, ins.last = append(ins.plays, int32(row.Plays)), append(ins.excluded, row.SelfExcluded), append(ins.last, int64(row.LastSeq))
			ins.until = append(ins.until, row.SelfExcludedUntil)
			continue
		}
		var bal *int64
		if a.Balance != nil {
			v := int64(*a.Balance)
			bal = &v
		}
		upd.player, upd.balance = append(upd.player, a.Player), append(upd.balance, bal)
		upd.dep, upd.wd, upd.staked, upd.won = append(upd.dep, int64(a.Deposited)), append(upd.wd, int64(a.Withdrawn)), append(upd.staked, int64(a.Staked)), append(upd.won, int64(a.Won))
		upd.plays, upd.excluded, upd.last = append(upd.plays, int32(a.Plays)), append(upd.excluded, a.SelfExcluded), append(upd.last, int64(a.LastSeq))
		upd.until = append(upd.until, a.ExcludedUntil)
	}
	if n := len(ins.player); n > 0 {
		queue("new accounts", n, q.insertAccounts, ins.player, ins.opened, ins.balance, ins.dep, ins.wd, ins.staked, ins.won, ins.plays, ins.excluded, ins.last, ins.until)
	}
	if n := len(upd.player); n > 0 {
		queue("accounts", n, q.updateAccounts, upd.player, upd.balance, upd.dep, upd.wd, upd.staked, upd.won, upd.plays, upd.excluded, upd.last, upd.until)
	}
	var closed []string
	var closedAt []*time.Time
	for _, a := range c.Accounts {
		if a.ClosureChanged {
			closed, closedAt = append(closed, a.Player), append(closedAt, a.ClosedAt)
		}
	}
	if n := len(closed); n > 0 {
		queue("closures", n, q.closeAccounts, closed, closedAt)
	}
}

func writeJournal(c *projections.Changes, q *statements, queue queueFunc) {
	n := len(c.Journal)
	if n == 0 {
		return
	}
	seq, amount := make([]int64, n), make([]int64, n)
	line := make([]int16, n)
	at := make([]time.Time, n)
	account, side, counterpart, typ, ref := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	balance := make([]*int64, n)
	totals := map[string]*[2]int64{}
	var order []string
	for i, l := range c.Journal {
		seq[i], line[i], at[i], account[i], side[i] = int64(l.Seq), int16(l.Line), l.At, l.Account, string(l.Side)
		amount[i], counterpart[i], typ[i], ref[i], balance[i] = int64(l.Amount), l.Counterpart, l.EventType, l.Ref, amountPtr(l.BalanceAfter)
		t := totals[l.Account]
		if t == nil {
			t = &[2]int64{}
			totals[l.Account] = t
			order = append(order, l.Account)
		}
		if l.Side == projections.Credit {
			t[0] += int64(l.Amount)
		} else {
			t[1] += int64(l.Amount)
		}
	}
	queue("journal", n, q.insertJournal, seq, line, at, account, side, amount, counterpart, typ, ref, balance)
	credits, debits := make([]int64, len(order)), make([]int64, len(order))
	for i, a := range order {
		credits[i], debits[i] = totals[a][0], totals[a][1]
	}
	queue("account totals", len(order), q.addTotals, order, credits, debits)
}

// counterArrays are the columns of Counters, as arrays.
type counterArrays struct {
	unitsSold                                                       []int32
	sales, paid, settled, owed, fund, stakeMismatch, settleMismatch []int64
}

func (a *counterArrays) add(c projections.Counters) {
	a.unitsSold = append(a.unitsSold, int32(c.UnitsSold))
	a.sales, a.paid = append(a.sales, int64(c.Sales)), append(a.paid, int64(c.PrizesPaid))
	a.settled, a.owed = append(a.settled, int64(c.PrizesSettled)), append(a.owed, int64(c.PrizesOwed))
	a.fund, a.stakeMismatch = append(a.fund, int64(c.PrizeFund)), append(a.stakeMismatch, int64(c.StakeMismatch))
	a.settleMismatch = append(a.settleMismatch, int64(c.SettleMismatch))
}

func (a *counterArrays) args() []any {
	return []any{a.unitsSold, a.sales, a.paid, a.settled, a.owed, a.fund, a.stakeMismatch, a.settleMismatch}
}

func writeBlocks(c *projections.Changes, q *statements, queue queueFunc) {
	var ins struct {
		id, emission, state    []string
		idx, units, settled    []int32
		price, last, openedSeq []int64
		bySystem               []int32
		seedHash, root, seed   [][]byte
		opened                 []time.Time
		closed                 []*time.Time
		counters               counterArrays
	}
	var tiers struct {
		block                []string
		tier                 []int16
		lots, assigned, paid []int32
		prize                []int64
	}
	var upd struct {
		id       []string
		state    []*string
		seed     [][]byte
		closed   []*time.Time
		settled  []int32
		bySystem []int32
		counters counterArrays
		last     []int64
	}
	var tierUpd struct {
		block          []string
		tier           []int16
		assigned, paid []int32
	}
	for _, bc := range c.Blocks {
		if bc.Opened != nil {
			row := *bc.Opened
			bc.ApplyTo(&row)
			ins.id, ins.emission, ins.state = append(ins.id, row.ID), append(ins.emission, row.Emission), append(ins.state, string(row.State))
			ins.idx, ins.units, ins.settled = append(ins.idx, int32(row.Index)), append(ins.units, int32(row.Units)), append(ins.settled, int32(row.Settled))
			ins.price, ins.last = append(ins.price, int64(row.Price)), append(ins.last, int64(row.LastSeq))
			ins.openedSeq = append(ins.openedSeq, int64(row.OpenedSeq))
			ins.seedHash, ins.root = append(ins.seedHash, row.Commitment.SeedHash[:]), append(ins.root, row.Commitment.Root[:])
			ins.seed = append(ins.seed, seedBytes(row.Seed))
			ins.opened, ins.closed = append(ins.opened, row.OpenedAt), append(ins.closed, row.ClosedAt)
			ins.counters.add(row.Counters)
			ins.bySystem = append(ins.bySystem, int32(row.BySystem))
			for t, tr := range row.Tiers {
				tiers.block, tiers.tier = append(tiers.block, row.ID), append(tiers.tier, int16(t))
				tiers.lots, tiers.prize = append(tiers.lots, int32(tr.Lots)), append(tiers.prize, int64(tr.Prize))
				tiers.assigned, tiers.paid = append(tiers.assigned, int32(tr.Assigned)), append(tiers.paid, int32(tr.Paid))
			}
			continue
		}
		var state *string
		if bc.State != nil {
			s := string(*bc.State)
			state = &s
		}
		upd.id, upd.state, upd.seed, upd.closed = append(upd.id, bc.ID), append(upd.state, state), append(upd.seed, seedBytes(bc.Seed)), append(upd.closed, bc.ClosedAt)
		upd.settled, upd.last = append(upd.settled, int32(bc.Settled)), append(upd.last, int64(bc.LastSeq))
		upd.bySystem = append(upd.bySystem, int32(bc.BySystem))
		upd.counters.add(bc.Counters)
		for t := range bc.Assigned {
			if bc.Assigned[t] != 0 || bc.Paid[t] != 0 {
				tierUpd.block, tierUpd.tier = append(tierUpd.block, bc.ID), append(tierUpd.tier, int16(t))
				tierUpd.assigned, tierUpd.paid = append(tierUpd.assigned, int32(bc.Assigned[t])), append(tierUpd.paid, int32(bc.Paid[t]))
			}
		}
	}
	if n := len(ins.id); n > 0 {
		args := []any{ins.id, ins.emission, ins.idx, ins.price, ins.units, ins.state, ins.seedHash, ins.root, ins.seed, ins.opened, ins.closed, ins.settled}
		args = append(args, ins.counters.args()...)
		queue("new blocks", n, q.insertBlocks, append(args, ins.last, ins.openedSeq, ins.bySystem)...)
		queue("new block tiers", len(tiers.block), q.insertTiers, tiers.block, tiers.tier, tiers.lots, tiers.prize, tiers.assigned, tiers.paid)
	}
	if n := len(upd.id); n > 0 {
		args := []any{upd.id, upd.state, upd.seed, upd.closed, upd.settled}
		args = append(args, upd.counters.args()...)
		queue("blocks", n, q.updateBlocks, append(args, upd.last, upd.bySystem)...)
	}
	if n := len(tierUpd.block); n > 0 {
		queue("block tiers", n, q.updateTiers, tierUpd.block, tierUpd.tier, tierUpd.assigned, tierUpd.paid)
	}
}

func seedBytes(s *domain.Seed) []byte {
	if s == nil {
		return nil
	}
	return s[:]
}

// proofColumns splits a proof into its columns: tier, salt and the path's
// hashes concatenated (the unit is the play's).
func proofColumns(p *domain.UnitProof) (*int16, []byte, []byte) {
	if p == nil {
		return nil, nil, nil
	}
	tier := int16(p.Tier)
	path := make([]byte, 0, 32*len(p.Path))
	for _, h := range p.Path {
		path = append(path, h[:]...)
	}
	return &tier, p.Salt[:], path
}

func writePlays(c *projections.Changes, q *statements, queue queueFunc) error {
	var ins struct {
		id, player, block, status []string
		throws                    [][]byte
		seq, stake, before, after []int64
		unit                      []int32
		at                        []time.Time
		proofTier, tier           []*int16
		salt, path                [][]byte
		prize, settledSeq         []*int64
		settledAt                 []*time.Time
	}
	var upd struct {
		id, player      []string
		throws          [][]byte
		status          []*string
		proofTier, tier []*int16
		salt, path      [][]byte
		prize, after    []*int64
		settledSeq      []*int64
		settledAt       []*time.Time
	}
	for _, pc := range c.Plays {
		if p := pc.New; p != nil {
			throws, err := encodeThrows(p.Throws)
			if err != nil {
				return fmt.Errorf("play %s: %w", p.ID, err)
			}
			pt, salt, path := proofColumns(p.Proof)
			ins.id, ins.player, ins.block, ins.status = append(ins.id, p.ID), append(ins.player, p.Player), append(ins.block, p.Block), append(ins.status, string(p.Status))
			ins.throws, ins.seq, ins.stake = append(ins.throws, throws), append(ins.seq, int64(p.Seq)), append(ins.stake, int64(p.Stake))
			ins.before, ins.after, ins.unit, ins.at = append(ins.before, int64(p.BalanceBefore)), append(ins.after, int64(p.BalanceAfter)), append(ins.unit, int32(p.Unit)), append(ins.at, p.At)
			ins.proofTier, ins.salt, ins.path = append(ins.proofTier, pt), append(ins.salt, salt), append(ins.path, path)
			ins.tier, ins.prize, ins.settledAt = append(ins.tier, tierPtr(p.Tier)), append(ins.prize, amountPtr(p.Prize)), append(ins.settledAt, p.SettledAt)
			ins.settledSeq = append(ins.settledSeq, seqPtr(p.SettledSeq))
			continue
		}
		throws, err := encodeThrows(pc.Throws)
		if err != nil {
			return fmt.Errorf("play %s: %w", pc.ID, err)
		}
		var status *string
		if pc.Status != nil {
			s := string(*pc.Status)
			status = &s
		}
		pt, salt, path := proofColumns(pc.Proof)
		upd.id, upd.player, upd.throws, upd.status = append(upd.id, pc.ID), append(upd.player, pc.Player), append(upd.throws, throws), append(upd.status, status)
		upd.proofTier, upd.salt, upd.path = append(upd.proofTier, pt), append(upd.salt, salt), append(upd.path, path)
		upd.tier, upd.prize, upd.settledAt, upd.after = append(upd.tier, tierPtr(pc.Tier)), append(upd.prize, amountPtr(pc.Prize)), append(upd.settledAt, pc.SettledAt), append(upd.after, amountPtr(pc.BalanceAfter))
		upd.settledSeq = append(upd.settledSeq, seqPtr(pc.SettledSeq))
	}
	if n := len(ins.id); n > 0 {
		queue("new plays", n, q.insertPlays, ins.id, ins.player, ins.seq, ins.block, ins.unit, ins.at, ins.stake, ins.status,
			ins.proofTier, ins.salt, ins.path, ins.throws, ins.tier, ins.prize, ins.settledAt, ins.before, ins.after, ins.settledSeq)
	}
	if n := len(upd.id); n > 0 {
		queue("plays", n, q.updatePlays, upd.id, upd.player, upd.proofTier, upd.salt, upd.path, upd.throws, upd.status,
			upd.tier, upd.prize, upd.settledAt, upd.after, upd.settledSeq)
	}
	return nil
}

func tierPtr(t *domain.Tier) *int16 {
	if t == nil {
		return nil
	}
	v := int16(*t)
	return &v
}

// seqPtr is a sequence as a nullable column: 0, none, is null.
func seqPtr(seq uint64) *int64 {
	if seq == 0 {
		return nil
	}
	v := int64(seq)
	return &v
}

func amountPtr(a *domain.Amount) *int64 {
	if a == nil {
		return nil
	}
	v := int64(*a)
	return &v
}
