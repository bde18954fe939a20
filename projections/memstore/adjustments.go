package memstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// adjustment returns an adjustment by id, or nil.
func (s *Store) adjustment(id string) *projections.Adjustment {
	if s.adjustIdx == nil {
		s.adjustIdx = map[string]*projections.Adjustment{}
		for _, x := range s.adjustments {
			s.adjustIdx[x.ID] = x
		}
	}
	return s.adjustIdx[id]
}

// checkAdjustments refuses a batch that proposes an adjustment twice or
// decides one that is not pending.
func (s *Store) checkAdjustments(c *projections.Changes) error {
	for _, x := range c.Adjustments {
		old := s.adjustment(x.ID)
		if x.New && old != nil {
			return fmt.Errorf("%w: adjustment %s proposed twice", projections.ErrInvalid, x.ID)
		}
		if !x.New && (old == nil || old.DecidedAt != nil) {
			return fmt.Errorf("%w: adjustment %s decided but not pending", projections.ErrInvalid, x.ID)
		}
	}
	return nil
}

// writeAdjustments writes the batch's adjustments and decisions.
func (s *Store) writeAdjustments(c *projections.Changes) {
	for _, x := range c.Adjustments {
		if !x.New {
			x.ApplyTo(s.adjustment(x.ID))
			continue
		}
		row := x.Adjustment
		s.adjustment(row.ID) // builds the index before the row joins it
		s.adjustments = append(s.adjustments, &row)
		s.adjustIdx[row.ID] = &row
	}
}

// Adjustments implements projections.Store.
func (s *Store) Adjustments(ctx context.Context, q projections.AdjustmentQuery) ([]projections.Adjustment, error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return nil, fmt.Errorf("adjustments: %w", err)
	}
	defer s.mu.RUnlock()
	return projections.ListAdjustments(s.adjustments, q), nil
}

// adjustment writes an adjustment in a snapshot: as its JSON, since they
// are few and made by hand.
func (e *encoder) adjustment(x *projections.Adjustment) { e.json("adjustment "+x.ID, x) }

func (d *decoder) adjustment(x *projections.Adjustment) { d.json("adjustment", x) }

// json writes a row as its JSON (what names it in a panic).
func (e *encoder) json(what string, x any) {
	b, err := json.Marshal(x)
	if err != nil {
		// The rows written so are plain values: they always encode.
		panic(fmt.Sprintf("encode %s: %v", what, err))
	}
	e.str(string(b))
}

// json reads a row written by encoder.json.
func (d *decoder) json(what string, x any) {
	s := d.str()
	if d.err == nil {
		if err := json.Unmarshal([]byte(s), x); err != nil {
			d.fail(fmt.Errorf("%s: %w", what, err))
		}
	}
}

// adjustedTotals sets each account's totals of approved adjustments from
// the adjustments decoded: a snapshot holds every adjustment, so the
// totals take no bytes of their own, and a snapshot written before the
// accounts had them restores them as a replay would.
func (d *decoder) adjustedTotals(s *rows) {
	for _, x := range s.adjustments {
		if x.State != domain.AdjustmentStateApproved {
			continue
		}
		a := s.accounts[x.Player]
		switch {
		case a == nil:
			d.fail(fmt.Errorf("adjustment %s approved on %s, who has no account", x.ID, x.Player))
			return
		case x.Direction == domain.Credit:
			a.AdjustedCredits += x.Amount
		default:
			a.AdjustedDebits += x.Amount
		}
	}
}
