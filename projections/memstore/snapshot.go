package memstore

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// FormatVersion is the version of Encode's format (docs/snapshots.md): a
// change to the read models' rows takes a new one, and Restore refuses
// every other, so that the store is rebuilt from the stream instead.
const FormatVersion = 1

// ErrSnapshotFormat is returned by Restore for a snapshot it cannot use.
var ErrSnapshotFormat = errors.New("read-model snapshot")

// state is the encoded store: every row, and the checkpoint they hold the
// stream up to. Histories and the other orders that are derived from the
// rows are rebuilt on Restore; the wins keep their settlement order by id.
type state struct {
	Format     int
	RuleSet    string
	Checkpoint uint64
	Accounts   map[string]*projections.Account
	Limits     map[string][]projections.LimitChange
	Journal    map[string][]projections.JournalLine
	Totals     map[string]*[2]domain.Amount
	Emissions  map[string]projections.Emission
	Blocks     map[string]*projections.BlockRow
	Plays      map[string]*projections.Play
	Days       map[string]*projections.Day
	CashDays   map[string]*projections.CashDay
	Bans       map[string][]*projections.Ban
	Wins       []string
}

// Encode returns the store's whole state and its checkpoint. Batches wait
// while it encodes (readers do not).
func (s *Store) Encode() (uint64, []byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := state{Format: FormatVersion, RuleSet: domain.RuleSetID(s.proj.Rules()), Checkpoint: s.checkpoint,
		Accounts: s.accounts, Limits: s.limits, Journal: s.journal, Totals: s.totals, Emissions: s.emissions,
		Blocks: s.blocks, Plays: s.plays, Days: s.days, CashDays: s.cashDays, Bans: s.bans, Wins: make([]string, len(s.wins))}
	for i, p := range s.wins {
		st.Wins[i] = p.ID
	}
	b, err := json.Marshal(&st)
	if err != nil {
		return 0, nil, fmt.Errorf("encode read models: %w", err)
	}
	return s.checkpoint, b, nil
}

// Restore loads what Encode wrote into an empty store: a runner then
// resumes from its checkpoint. It returns an error wrapping
// ErrSnapshotFormat for another format, another rule set or bytes that do
// not decode, and leaves the store empty.
func (s *Store) Restore(b []byte) error {
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotFormat, err)
	}
	if st.Format != FormatVersion {
		return fmt.Errorf("%w: format version %d, this build reads %d", ErrSnapshotFormat, st.Format, FormatVersion)
	}
	if want := domain.RuleSetID(s.proj.Rules()); st.RuleSet != want {
		return fmt.Errorf("%w: rule set %s, this build runs %s", ErrSnapshotFormat, st.RuleSet, want)
	}
	wins := make([]*projections.Play, len(st.Wins))
	for i, id := range st.Wins {
		if wins[i] = st.Plays[id]; wins[i] == nil {
			return fmt.Errorf("%w: winning play %s not among the plays", ErrSnapshotFormat, id)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkpoint != 0 {
		return fmt.Errorf("%w: the store already holds the stream up to %d", ErrSnapshotFormat, s.checkpoint)
	}
	// An empty map decodes as nil: every map is kept non-nil.
	s.checkpoint = st.Checkpoint
	s.accounts, s.limits, s.journal, s.totals = orEmpty(st.Accounts), orEmpty(st.Limits), orEmpty(st.Journal), orEmpty(st.Totals)
	s.emissions, s.blocks, s.plays = orEmpty(st.Emissions), orEmpty(st.Blocks), orEmpty(st.Plays)
	s.days, s.cashDays, s.bans = orEmpty(st.Days), orEmpty(st.CashDays), orEmpty(st.Bans)
	s.accountIDs, s.idsSorted = sortedKeys(s.accounts), true
	s.blockIDs = sortedKeys(s.blocks)
	for _, id := range s.blockIDs {
		s.proj.Know(s.blocks[id])
	}
	for _, p := range s.plays {
		s.history[p.Player] = append(s.history[p.Player], p)
	}
	for _, h := range s.history {
		slices.SortFunc(h, func(a, b *projections.Play) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	s.wins = wins
	return nil
}

func orEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
