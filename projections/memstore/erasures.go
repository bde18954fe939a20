package memstore

import (
	"context"
	"fmt"

	"github.com/fdj/tresor/projections"
)

// checkErasures refuses a batch that proposes an erasure twice or decides
// one that is not pending.
func (s *Store) checkErasures(c *projections.Changes) error {
	for _, x := range c.Erasures {
		old := s.erasureIdx[x.ID]
		if x.New && old != nil {
			return fmt.Errorf("%w: erasure %s proposed twice", projections.ErrInvalid, x.ID)
		}
		if !x.New && (old == nil || old.DecidedAt != nil) {
			return fmt.Errorf("%w: erasure %s decided but not pending", projections.ErrInvalid, x.ID)
		}
	}
	return nil
}

// writeErasures writes the batch's erasures and decisions.
func (s *Store) writeErasures(c *projections.Changes) {
	for _, x := range c.Erasures {
		if !x.New {
			x.ApplyTo(s.erasureIdx[x.ID])
			continue
		}
		row := x.Erasure
		s.addErasure(&row)
	}
}

// addErasure adds a row, the newest, to the erasures and their index.
func (s *rows) addErasure(x *projections.Erasure) {
	s.erasures = append(s.erasures, x)
	s.erasureIdx[x.ID] = x
}

// Erasures implements projections.Store.
func (s *Store) Erasures(ctx context.Context, q projections.ErasureQuery) ([]projections.Erasure, error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return nil, fmt.Errorf("erasures: %w", err)
	}
	defer s.mu.RUnlock()
	return projections.ListErasures(s.erasures, q), nil
}

// erasure writes an erasure in a snapshot: as its JSON, since they are
// few and made by hand.
func (e *encoder) erasure(x *projections.Erasure) { e.json("erasure "+x.ID, x) }

func (d *decoder) erasure(x *projections.Erasure) { d.json("erasure", x) }
