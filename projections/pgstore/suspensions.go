package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/jackc/pgx/v5"
)

// suspensionStatements are the SQL of the suspensions of sales.
type suspensionStatements struct {
	insert, resume, list string
}

const suspensionColumns = `id, scope, seq, at, reason, by_role, by_subject, resumed_seq, resumed_at, resume_reason,
	resumed_by_role, resumed_by_subject`

func newSuspensionStatements(f func(string) string) *suspensionStatements {
	return &suspensionStatements{
		insert: f(`INSERT INTO {s}.suspensions (` + suspensionColumns + `)
			SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::timestamptz[], $5::text[], $6::text[], $7::text[],
				$8::int8[], $9::timestamptz[], $10::text[], $11::text[], $12::text[])`),
		resume: f(`UPDATE {s}.suspensions x SET resumed_seq = u.resumed_seq, resumed_at = u.resumed_at, resume_reason = u.resume_reason,
				resumed_by_role = u.resumed_by_role, resumed_by_subject = u.resumed_by_subject
			FROM unnest($1::text[], $2::int8[], $3::timestamptz[], $4::text[], $5::text[], $6::text[])
				AS u(id, resumed_seq, resumed_at, resume_reason, resumed_by_role, resumed_by_subject)
			WHERE x.id = u.id AND x.resumed_seq IS NULL`),
		// Those in force (the decider bounds them), and the newest resumed.
		list: f(`SELECT ` + suspensionColumns + ` FROM (
				SELECT * FROM {s}.suspensions WHERE resumed_seq IS NULL
				UNION ALL
				(SELECT * FROM {s}.suspensions WHERE resumed_seq IS NOT NULL ORDER BY seq DESC LIMIT ` + fmt.Sprint(projections.SuspensionsResumedMax) + `)
			) x ORDER BY seq LIMIT ` + fmt.Sprint(projections.SuspensionsResumedMax+domain.SuspensionsActiveMax+1)),
	}
}

// suspensionArrays are the columns of suspension rows to write.
type suspensionArrays struct {
	id, scope, reason   []string
	seq                 []int64
	at                  []time.Time
	byRole, bySubject   []*string
	resumedSeq          []*int64
	resumedAt           []*time.Time
	resumeReason        []*string
	rByRole, rBySubject []*string
}

// add appends a row's columns; only the end's for a row already written.
func (a *suspensionArrays) add(c *projections.SuspensionChange) {
	a.id = append(a.id, c.ID)
	if c.New {
		role, subject := actorColumns(c.By)
		a.scope, a.seq, a.at, a.reason = append(a.scope, c.Scope), append(a.seq, int64(c.Seq)), append(a.at, c.At), append(a.reason, c.Reason)
		a.byRole, a.bySubject = append(a.byRole, role), append(a.bySubject, subject)
	}
	var seq *int64
	var reason *string
	if c.ResumedAt != nil {
		s := int64(c.ResumedSeq)
		seq, reason = &s, &c.ResumeReason
	}
	role, subject := actorColumns(c.ResumedBy)
	a.resumedSeq, a.resumedAt, a.resumeReason = append(a.resumedSeq, seq), append(a.resumedAt, c.ResumedAt), append(a.resumeReason, reason)
	a.rByRole, a.rBySubject = append(a.rByRole, role), append(a.rBySubject, subject)
}

// writeSuspensions queues the batch's new suspensions and ends of earlier
// ones; an end of a suspension not in force writes no row, which the
// batch's row count refuses.
func writeSuspensions(c *projections.Changes, q *suspensionStatements, queue queueFunc) {
	var ins, end suspensionArrays
	for _, s := range c.Suspensions {
		if s.New {
			ins.add(s)
		} else {
			end.add(s)
		}
	}
	if n := len(ins.id); n > 0 {
		queue("new suspensions", n, q.insert, ins.id, ins.scope, ins.seq, ins.at, ins.reason, ins.byRole, ins.bySubject,
			ins.resumedSeq, ins.resumedAt, ins.resumeReason, ins.rByRole, ins.rBySubject)
	}
	if n := len(end.id); n > 0 {
		queue("resumed suspensions", n, q.resume, end.id, end.resumedSeq, end.resumedAt, end.resumeReason, end.rByRole, end.rBySubject)
	}
}

// scanSuspension reads a row of suspensionColumns.
func scanSuspension(r pgx.CollectableRow) (projections.Suspension, error) {
	var x projections.Suspension
	var seq int64
	var resumedSeq *int64
	var byRole, bySubject, reason, rRole, rSubject *string
	err := r.Scan(&x.ID, &x.Scope, &seq, &x.At, &x.Reason, &byRole, &bySubject, &resumedSeq, &x.ResumedAt, &reason, &rRole, &rSubject)
	x.Seq, x.At, x.ResumedAt, x.By, x.ResumedBy = uint64(seq), utc(x.At), utcPtr(x.ResumedAt), actorOf(byRole, bySubject), actorOf(rRole, rSubject)
	if resumedSeq != nil {
		x.ResumedSeq, x.ResumeReason = uint64(*resumedSeq), *reason
	}
	return x, err
}

// readSuspensions reads what Store.Suspensions answers.
func readSuspensions(ctx context.Context, db querier, q *suspensionStatements) ([]projections.Suspension, error) {
	rows, err := db.Query(ctx, q.list)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, scanSuspension)
	if err != nil {
		return nil, err
	}
	if len(out) > projections.SuspensionsResumedMax+domain.SuspensionsActiveMax {
		return nil, fmt.Errorf("%w: more than %d suspensions in force", projections.ErrInvalid, domain.SuspensionsActiveMax)
	}
	if out == nil {
		out = []projections.Suspension{}
	}
	return out, nil
}

// Suspensions implements projections.Store.
func (s *Store) Suspensions(ctx context.Context) ([]projections.Suspension, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, err
	}
	out, err := readSuspensions(ctx, s.pool, q.suspensions)
	if err != nil {
		return nil, fmt.Errorf("suspensions: %w", err)
	}
	return out, nil
}
