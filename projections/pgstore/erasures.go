package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/jackc/pgx/v5"
)

// erasureStatements are the SQL of the erasures.
type erasureStatements struct {
	insert, decide, list string
}

func newErasureStatements(f func(string) string) *erasureStatements {
	pending := `'` + string(domain.ProposalPending) + `'`
	return &erasureStatements{
		insert: f(`INSERT INTO {s}.erasures (id, n, state, doc)
			SELECT u.id, u.n, u.state, u.doc::jsonb FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[]) AS u(id, n, state, doc)`),
		// A decision merges its fields into the row of a pending one; any
		// other writes no row, which the batch's row count refuses.
		decide: f(`UPDATE {s}.erasures x SET state = u.state, doc = x.doc || u.patch::jsonb
			FROM unnest($1::text[], $2::text[], $3::text[]) AS u(id, state, patch) WHERE x.id = u.id AND x.state = ` + pending),
		list: f(`SELECT doc FROM {s}.erasures WHERE ($1 = '' OR id = $1) AND (NOT $2::bool OR state = ` + pending + `)
			ORDER BY n DESC LIMIT ` + fmt.Sprint(projections.ErasuresMax)),
	}
}

// writeErasures queues the batch's new erasures and decisions of earlier
// ones.
func writeErasures(c *projections.Changes, q *erasureStatements, queue queueFunc) error {
	var ins, dec struct {
		id, state, doc []string
		n              []int64
	}
	for _, x := range c.Erasures {
		var b []byte
		var err error
		if x.New {
			b, err = json.Marshal(x.Erasure)
			ins.id, ins.n, ins.state, ins.doc = append(ins.id, x.ID), append(ins.n, int64(domain.ErasureNumber(x.ID))), append(ins.state, string(x.State)), append(ins.doc, string(b))
		} else {
			b, err = x.DecisionJSON()
			dec.id, dec.state, dec.doc = append(dec.id, x.ID), append(dec.state, string(x.State)), append(dec.doc, string(b))
		}
		if err != nil {
			return fmt.Errorf("erasure %s: %w", x.ID, err)
		}
	}
	if n := len(ins.id); n > 0 {
		queue("new erasures", n, q.insert, ins.id, ins.n, ins.state, ins.doc)
	}
	if n := len(dec.id); n > 0 {
		queue("decided erasures", n, q.decide, dec.id, dec.state, dec.doc)
	}
	return nil
}

// Erasures implements projections.Store.
func (s *Store) Erasures(ctx context.Context, eq projections.ErasureQuery) ([]projections.Erasure, error) {
	q, err := s.refresh(ctx, false)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q.erasures.list, eq.ID, eq.Pending)
	if err != nil {
		return nil, fmt.Errorf("erasures: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (projections.Erasure, error) {
		var doc []byte
		var x projections.Erasure
		if err := r.Scan(&doc); err != nil {
			return x, err
		}
		return x, json.Unmarshal(doc, &x)
	})
	if err != nil {
		return nil, fmt.Errorf("erasures: %w", err)
	}
	slices.Reverse(out)
	if out == nil {
		out = []projections.Erasure{}
	}
	return out, nil
}
