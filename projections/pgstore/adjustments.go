package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/jackc/pgx/v5"
)

// adjustmentStatements are the SQL of the adjustments.
type adjustmentStatements struct {
	insert, decide, list, addDays, days, addToAccounts string
}

func newAdjustmentStatements(f func(string) string) *adjustmentStatements {
	return &adjustmentStatements{
		insert: f(`INSERT INTO {s}.adjustments (id, n, player, state, doc)
			SELECT u.id, u.n, u.player, u.state, u.doc::jsonb
			FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[]) AS u(id, n, player, state, doc)`),
		// A decision merges its fields into the row of a pending one; any
		// other writes no row, which the batch's row count refuses.
		decide: f(`UPDATE {s}.adjustments x SET state = u.state, doc = x.doc || u.patch::jsonb
			FROM unnest($1::text[], $2::text[], $3::text[]) AS u(id, state, patch)
			WHERE x.id = u.id AND x.state = '` + string(domain.AdjustmentStatePending) + `'`),
		list: f(`SELECT doc FROM {s}.adjustments
			WHERE ($1 = '' OR id = $1) AND ($2 = '' OR player = $2) AND (NOT $3::bool OR state = '` + string(domain.AdjustmentStatePending) + `')
			ORDER BY n DESC LIMIT ` + fmt.Sprint(projections.AdjustmentsMax)),
		addDays: f(`INSERT INTO {s}.adjustment_days AS d (day, kind, approved, credits, debits)
			SELECT * FROM unnest($1::date[], $2::text[], $3::int4[], $4::int8[], $5::int8[])
			ON CONFLICT (day, kind) DO UPDATE SET approved = d.approved + EXCLUDED.approved,
				credits = d.credits + EXCLUDED.credits, debits = d.debits + EXCLUDED.debits`),
		days: f(`SELECT to_char(day, 'YYYY-MM-DD'), kind, approved, credits, debits FROM {s}.adjustment_days
			ORDER BY day, kind LIMIT ` + fmt.Sprint(projections.ReconciliationRowsMax+1)),
		// After the account's insert or update in the same batch.
		addToAccounts: f(`UPDATE {s}.accounts a SET adjusted_credits = a.adjusted_credits + u.credits,
				adjusted_debits = a.adjusted_debits + u.debits
			FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(player, credits, debits) WHERE a.player = u.player`),
	}
}

// writeAdjustments queues the batch's new adjustments and decisions of
// earlier ones.
func writeAdjustments(c *projections.Changes, q *adjustmentStatements, queue queueFunc) error {
	var ins, dec struct {
		id, player, state, doc []string
		n                      []int64
	}
	for _, x := range c.Adjustments {
		if !x.New {
			patch, err := x.DecisionJSON()
			if err != nil {
				return fmt.Errorf("adjustment %s: %w", x.ID, err)
			}
			dec.id, dec.state, dec.doc = append(dec.id, x.ID), append(dec.state, string(x.State)), append(dec.doc, string(patch))
			continue
		}
		doc, err := json.Marshal(x.Adjustment)
		if err != nil {
			return fmt.Errorf("adjustment %s: %w", x.ID, err)
		}
		ins.id, ins.n, ins.player = append(ins.id, x.ID), append(ins.n, int64(domain.AdjustmentNumber(x.ID))), append(ins.player, x.Player)
		ins.state, ins.doc = append(ins.state, string(x.State)), append(ins.doc, string(doc))
	}
	if n := len(ins.id); n > 0 {
		queue("new adjustments", n, q.insert, ins.id, ins.n, ins.player, ins.state, ins.doc)
	}
	if n := len(dec.id); n > 0 {
		queue("decided adjustments", n, q.decide, dec.id, dec.state, dec.doc)
	}
	writeAdjustedAccounts(c, q, queue)
	return writeAdjustmentDays(c, q, queue)
}

// writeAdjustedAccounts queues the batch's deltas of the accounts' totals
// of approved adjustments.
func writeAdjustedAccounts(c *projections.Changes, q *adjustmentStatements, queue queueFunc) {
	var players []string
	var credits, debits []int64
	for _, a := range c.Accounts {
		if a.AdjustedCredits != 0 || a.AdjustedDebits != 0 {
			players, credits, debits = append(players, a.Player), append(credits, int64(a.AdjustedCredits)), append(debits, int64(a.AdjustedDebits))
		}
	}
	if n := len(players); n > 0 {
		queue("adjusted accounts", n, q.addToAccounts, players, credits, debits)
	}
}

// writeAdjustmentDays queues the batch's deltas of adjustments per day.
func writeAdjustmentDays(c *projections.Changes, q *adjustmentStatements, queue queueFunc) error {
	n := len(c.AdjustmentDays)
	if n == 0 {
		return nil
	}
	days, kinds, approved := make([]time.Time, n), make([]string, n), make([]int32, n)
	credits, debits := make([]int64, n), make([]int64, n)
	for i, d := range c.AdjustmentDays {
		day, err := time.Parse(time.DateOnly, d.Day)
		if err != nil {
			return fmt.Errorf("day %q: %w", d.Day, err)
		}
		days[i], kinds[i], approved[i], credits[i], debits[i] = day, string(d.Kind), int32(d.Approved), int64(d.Credits), int64(d.Debits)
	}
	queue("adjustment days", n, q.addDays, days, kinds, approved, credits, debits)
	return nil
}

// readAdjustmentDays reads the report data's adjustments per day.
func readAdjustmentDays(ctx context.Context, db querier, q *adjustmentStatements) ([]projections.AdjustmentDay, error) {
	rows, err := db.Query(ctx, q.days)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.AdjustmentDay, error) {
		var x projections.AdjustmentDay
		var credits, debits int64
		err := r.Scan(&x.Day, &x.Kind, &x.Approved, &credits, &debits)
		x.Credits, x.Debits = domain.Amount(credits), domain.Amount(debits)
		return x, err
	})
}

// Adjustments implements projections.Store.
func (s *Store) Adjustments(ctx context.Context, aq projections.AdjustmentQuery) ([]projections.Adjustment, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, err
	}
	out, err := readAdjustments(ctx, s.pool, q.adjustments, aq)
	if err != nil {
		return nil, fmt.Errorf("adjustments: %w", err)
	}
	return out, nil
}

// readAdjustments reads what Store.Adjustments answers.
func readAdjustments(ctx context.Context, db querier, q *adjustmentStatements, aq projections.AdjustmentQuery) ([]projections.Adjustment, error) {
	rows, err := db.Query(ctx, q.list, aq.ID, aq.Player, aq.Pending)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.Adjustment, error) {
		var doc []byte
		var x projections.Adjustment
		if err := r.Scan(&doc); err != nil {
			return x, err
		}
		return x, json.Unmarshal(doc, &x)
	})
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	if out == nil {
		out = []projections.Adjustment{}
	}
	return out, nil
}
