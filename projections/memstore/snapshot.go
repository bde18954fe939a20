package memstore

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// FormatVersion is the version of the snapshot format (docs/snapshots.md):
// a change to the read models' rows takes a new one, and Restore refuses
// every other, so that the store is rebuilt from the stream instead.
// Version 1 was JSON (about 3 KB a play); version 2 is binary.
const FormatVersion = 2

// snapshotMagic begins a snapshot of format 2 or later; format 1 began
// with '{'.
const snapshotMagic = "tresor-read-models\x00"

// snapshotEnd follows the last row: bytes cut at a row's end still fail.
const snapshotEnd = 0xe5

// ErrSnapshotFormat is returned by Restore for a snapshot it cannot use.
var ErrSnapshotFormat = errors.New("read-model snapshot")

// Frozen is a copy of the store's rows at one checkpoint, taken under the
// lock in a few milliseconds per 100 000 plays, to be encoded outside it:
// batches do not wait for the encoding. Rows that batches change in place
// are copied; lists they only append to (journal lines, limit changes, a
// play's throws) keep their length, so what is appended later is not seen.
type Frozen struct {
	ruleSet    string
	checkpoint uint64
	accounts   []projections.Account
	limits     map[string][]projections.LimitChange
	journal    map[string][]projections.JournalLine
	totals     map[string][2]domain.Amount
	emissions  map[string]projections.Emission
	blocks     []projections.BlockRow
	plays      []projections.Play
	days       map[string]projections.Day
	cashDays   map[string]projections.CashDay
	bans       map[string][]projections.Ban
	wins       []string
}

// Freeze copies the store's rows for a snapshot.
func (s *Store) Freeze() *Frozen {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f := &Frozen{ruleSet: domain.RuleSetID(s.proj.Rules()), checkpoint: s.checkpoint,
		accounts: make([]projections.Account, 0, len(s.accounts)), limits: maps.Clone(s.limits), journal: maps.Clone(s.journal),
		totals: make(map[string][2]domain.Amount, len(s.totals)), emissions: maps.Clone(s.emissions),
		blocks: make([]projections.BlockRow, 0, len(s.blocks)), plays: make([]projections.Play, 0, len(s.plays)),
		days: make(map[string]projections.Day, len(s.days)), cashDays: make(map[string]projections.CashDay, len(s.cashDays)),
		bans: make(map[string][]projections.Ban, len(s.bans))}
	for _, a := range s.accounts {
		f.accounts = append(f.accounts, *a)
	}
	for k, t := range s.totals {
		f.totals[k] = *t
	}
	for _, b := range s.blocks {
		f.blocks = append(f.blocks, *b)
	}
	for _, p := range s.plays {
		f.plays = append(f.plays, *p)
	}
	for k, d := range s.days {
		f.days[k] = *d
	}
	for k, d := range s.cashDays {
		f.cashDays[k] = *d
	}
	for k, bs := range s.bans {
		f.bans[k] = make([]projections.Ban, len(bs))
		for i, b := range bs {
			f.bans[k][i] = *b
		}
	}
	if s.wins != nil {
		f.wins = make([]string, len(s.wins))
	}
	for i, p := range s.wins {
		f.wins[i] = p.ID
	}
	return f
}

// Checkpoint is the stream sequence the frozen rows hold everything up to.
func (f *Frozen) Checkpoint() uint64 { return f.checkpoint }

// WriteTo writes the frozen rows in format 2 (docs/snapshots.md), the same
// rows always as the same bytes: rows in id order, plays in stake order.
func (f *Frozen) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	e := newEncoder(cw)
	e.raw([]byte(snapshotMagic))
	e.u(FormatVersion)
	e.str(f.ruleSet)
	e.u(f.checkpoint)
	slices.SortFunc(f.accounts, func(a, b projections.Account) int { return cmp.Compare(a.Player, b.Player) })
	encodeSlice(e, f.accounts, e.account)
	encodeMap(e, f.limits, func(l *[]projections.LimitChange) { encodeSlice(e, *l, e.limitChange) })
	encodeMap(e, f.journal, func(l *[]projections.JournalLine) { encodeSlice(e, *l, e.journalLine) })
	encodeMap(e, f.totals, func(t *[2]domain.Amount) { e.amount(t[0]); e.amount(t[1]) })
	encodeMap(e, f.emissions, e.emission)
	slices.SortFunc(f.blocks, func(a, b projections.BlockRow) int { return cmp.Compare(a.ID, b.ID) })
	encodeSlice(e, f.blocks, e.block)
	slices.SortFunc(f.plays, func(a, b projections.Play) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) })
	index := make(map[string]int, len(f.plays))
	proofs := map[string]*domain.UnitProof{}
	seq := uint64(0)
	encodeSlice(e, f.plays, func(p *projections.Play) {
		index[p.ID] = len(index)
		e.play(p, seq, proofs)
		seq = p.Seq
	})
	encodeMap(e, f.days, e.day)
	encodeMap(e, f.cashDays, func(d *projections.CashDay) { e.str(d.Day); e.amount(d.Deposits); e.amount(d.Withdrawals) })
	encodeMap(e, f.bans, func(l *[]projections.Ban) { encodeSlice(e, *l, e.ban) })
	encodeSlice(e, f.wins, func(id *string) { e.u(uint64(index[*id])) })
	_ = e.w.WriteByte(snapshotEnd)
	if err := e.w.Flush(); err != nil {
		return cw.n, fmt.Errorf("encode read models: %w", err)
	}
	return cw.n, nil
}

// countingWriter counts what it passes on.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Restore loads what Frozen.WriteTo wrote into an empty store: rows are
// decoded into a fresh store, swapped in whole once every byte has read
// back, and a runner then resumes from its checkpoint. It returns an error
// wrapping ErrSnapshotFormat for another format (format 1's JSON
// included), another rule set, bytes cut short or followed by more, and
// leaves the store empty.
func (s *Store) Restore(r io.Reader) error {
	fresh, err := decodeStore(s.proj.Rules(), r)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotFormat, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkpoint != 0 {
		return fmt.Errorf("%w: the store already holds the stream up to %d", ErrSnapshotFormat, s.checkpoint)
	}
	s.proj = fresh.proj
	s.checkpoint = fresh.checkpoint
	s.accounts, s.accountIDs, s.idsSorted = fresh.accounts, fresh.accountIDs, fresh.idsSorted
	s.limits, s.journal, s.totals, s.emissions = fresh.limits, fresh.journal, fresh.totals, fresh.emissions
	s.blocks, s.blockIDs, s.plays, s.history = fresh.blocks, fresh.blockIDs, fresh.plays, fresh.history
	s.days, s.cashDays, s.bans, s.wins = fresh.days, fresh.cashDays, fresh.bans, fresh.wins
	return nil
}

// decodeStore decodes a snapshot into a new store.
func decodeStore(rules *domain.RuleSet, r io.Reader) (*Store, error) {
	d := newDecoder(r)
	head := make([]byte, len(snapshotMagic))
	d.raw(head[:1])
	if d.err == nil && head[0] == '{' {
		return nil, fmt.Errorf("format version 1 (JSON), this build reads %d", FormatVersion)
	}
	d.raw(head[1:])
	if d.err != nil || !bytes.Equal(head, []byte(snapshotMagic)) {
		return nil, fmt.Errorf("not a read-model snapshot (%v)", d.err)
	}
	if v := d.u(); v != FormatVersion {
		return nil, fmt.Errorf("format version %d, this build reads %d", v, FormatVersion)
	}
	if rs, want := d.str(), domain.RuleSetID(rules); rs != want {
		return nil, fmt.Errorf("rule set %s, this build runs %s", rs, want)
	}
	s := New(rules)
	s.checkpoint = d.u()
	for _, a := range decodeSlice(d, d.account) {
		s.accounts[a.Player] = &a
		s.accountIDs = append(s.accountIDs, a.Player)
	}
	s.idsSorted = true
	decodeMap(d, s.limits, func() []projections.LimitChange { return decodeSlice(d, d.limitChange) })
	decodeMap(d, s.journal, func() []projections.JournalLine { return decodeSlice(d, d.journalLine) })
	decodeMap(d, s.totals, func() *[2]domain.Amount { return &[2]domain.Amount{d.amount(), d.amount()} })
	decodeMap(d, s.emissions, d.emission)
	for _, b := range decodeSlice(d, d.block) {
		s.blocks[b.ID] = &b
		s.blockIDs = append(s.blockIDs, b.ID)
		s.proj.Know(&b)
	}
	n := d.count()
	plays := make([]*projections.Play, 0, max(min(n, 1<<20), 0))
	proofs := map[string]*domain.UnitProof{}
	seq := uint64(0)
	for i := 0; i < n && d.err == nil; i++ {
		p := &projections.Play{}
		d.play(p, seq, proofs)
		seq = p.Seq
		plays = append(plays, p)
		s.plays[p.ID] = p
		// Plays come in stake order: each history is in order as built.
		s.history[p.Player] = append(s.history[p.Player], p)
	}
	decodeMap(d, s.days, d.day)
	decodeMap(d, s.cashDays, func() *projections.CashDay {
		return &projections.CashDay{Day: d.str(), Deposits: d.amount(), Withdrawals: d.amount()}
	})
	decodeMap(d, s.bans, func() []*projections.Ban {
		var out []*projections.Ban
		for _, b := range decodeSlice(d, d.ban) {
			out = append(out, &b)
		}
		return out
	})
	s.wins = decodeSlice(d, func(w **projections.Play) {
		if i := d.u(); i < uint64(len(plays)) {
			*w = plays[i]
		} else {
			d.fail(fmt.Errorf("winning play %d of %d", i, len(plays)))
		}
	})
	if d.err == nil {
		if c, err := d.r.ReadByte(); err != nil {
			d.fail(err)
		} else if c != snapshotEnd {
			d.fail(fmt.Errorf("byte %#x where the end mark should be", c))
		} else if _, err := d.r.ReadByte(); !errors.Is(err, io.EOF) {
			d.fail(errors.New("bytes after the end"))
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}
