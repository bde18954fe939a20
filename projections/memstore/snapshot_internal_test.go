package memstore

import (
	"context"
	"reflect"
	"testing"

	"github.com/fdj/tresor/projections/projectionstest"
)

// TestFormat3RoundTripsEveryField compares every field of every row,
// unexported orders included, of a store restored from its snapshot with
// the store it was taken of: a field added to a row and forgotten by the
// format fails it, as long as the standard world sets it.
func TestFormat3RoundTripsEveryField(t *testing.T) {
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	s := New(rules)
	projectionstest.Project(t, s, w.Events, 7)
	buf := encode(t, s)
	r := New(rules)
	if err := r.Restore(buf.Hot(), buf, func(err error) { t.Error(err) }); err != nil {
		t.Fatal(err)
	}
	if err := r.ensure(context.Background(), allShards); err != nil || r.cold != nil {
		t.Fatalf("shards left %v: %v", r.cold, err)
	}
	if !s.idsSorted {
		s.mu.Lock()
		sortAccountIDs(s)
		s.mu.Unlock()
	}
	for name, pair := range map[string][2]any{
		"checkpoint": {s.checkpoint, r.checkpoint}, "accounts": {s.accounts, r.accounts}, "accountIDs": {s.accountIDs, r.accountIDs},
		"limits": {s.limits, r.limits}, "journal": {s.journal, r.journal}, "totals": {s.totals, r.totals},
		"emissions": {s.emissions, r.emissions}, "blocks": {s.blocks, r.blocks}, "blockIDs": {s.blockIDs, r.blockIDs},
		"plays": {s.plays, r.plays}, "history": {s.history, r.history}, "days": {s.days, r.days},
		"cashDays": {s.cashDays, r.cashDays}, "bans": {s.bans, r.bans}, "wins": {s.wins, r.wins},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("%s differs after a round trip:\n%+v\n%+v", name, pair[0], pair[1])
		}
	}
	// and the world sets every field the format writes, so that a field
	// it loses cannot pass unseen
	for name, row := range map[string]any{"play": anyPlay(s, true), "account": anyOf(s.accounts), "block": anyOf(s.blocks)} {
		if row == nil {
			t.Errorf("no %s in the world", name)
		}
	}
	if again := encode(t, r); !reflect.DeepEqual(again.Secs, buf.Secs) || len(buf.Secs) != 1+shardCount {
		t.Fatalf("the restored store encodes to other bytes (%d sections, %d)", len(again.Secs), len(buf.Secs))
	}
}

func encode(t *testing.T, s *Store) *Sections {
	t.Helper()
	f, err := s.Freeze(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var buf Sections
	if _, err := f.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func sortAccountIDs(s *Store) {
	s.idsSorted = true
	s.accountIDs = sortedKeys(s.accounts)
}

// anyPlay returns a settled play with a proof, or nil.
func anyPlay(s *Store, settled bool) any {
	for _, p := range s.plays {
		if p.Proof != nil && (p.SettledAt != nil) == settled && len(p.Throws) > 0 {
			return p
		}
	}
	return nil
}

func anyOf[V any](m map[string]V) any {
	for _, v := range m {
		return v
	}
	return nil
}
