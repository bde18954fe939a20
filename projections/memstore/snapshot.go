package memstore

import (
	"bytes"
	"cmp"
	"context"
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
// Version 1 was JSON; version 2 binary, one section, restored whole;
// version 3 is version 2's rows in a hot section, restored at the start,
// and shardCount cold sections loaded when needed; version 4 adds the
// suspensions of sales to the hot section, version 5 the accounts'
// closures, version 6 the adjustments, version 7 the plays' settlement
// sequences, version 8 the erasures.
const FormatVersion = 8

// snapshotMagic begins a snapshot of format 2 or later; format 1 began
// with '{'.
const snapshotMagic = "tresor-read-models\x00"

// snapshotEnd follows the last row of each section: bytes cut at a row's
// end still fail.
const snapshotEnd = 0xe5

// ErrSnapshotFormat is returned by Restore for a snapshot it cannot use.
var ErrSnapshotFormat = errors.New("read-model snapshot")

// Frozen is a copy of the store's rows at one checkpoint, taken under the
// lock, to be encoded outside it: batches wait for the copy, which is
// quick, and not for the encoding. Rows that batches change in place
// are copied; lists they only append to (journal lines, limit changes, a
// play's throws) keep their length, so what is appended later is not seen.
type Frozen struct {
	ruleSet     string
	checkpoint  uint64
	accounts    []projections.Account
	limits      map[string][]projections.LimitChange
	journal     map[string][]projections.JournalLine
	totals      map[string][2]domain.Amount
	emissions   map[string]projections.Emission
	blocks      []projections.BlockRow
	plays       []projections.Play
	days        map[string]projections.Day
	cashDays    map[string]projections.CashDay
	bans        map[string][]projections.Ban
	suspensions []projections.Suspension
	adjustments []projections.Adjustment
	adjustDays  map[string]projections.AdjustmentDay
	erasures    []projections.Erasure
	wins        []string
}

// Freeze copies the store's rows for a snapshot, once every shard of the
// snapshot it was restored from is loaded (or ctx ends): a snapshot holds
// every row.
func (s *Store) Freeze(ctx context.Context) (*Frozen, error) {
	if err := s.ensure(ctx, allShards); err != nil {
		return nil, fmt.Errorf("freeze the read models: %w", err)
	}
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
	for _, x := range s.suspensions {
		f.suspensions = append(f.suspensions, *x)
	}
	for _, x := range s.adjustments {
		f.adjustments = append(f.adjustments, *x)
	}
	f.adjustDays = make(map[string]projections.AdjustmentDay, len(s.adjustDays))
	for k, d := range s.adjustDays {
		f.adjustDays[k] = *d
	}
	for _, x := range s.erasures {
		f.erasures = append(f.erasures, *x)
	}
	if s.wins != nil {
		f.wins = make([]string, len(s.wins))
	}
	for i, p := range s.wins {
		f.wins[i] = p.ID
	}
	return f, nil
}

// Checkpoint is the stream sequence the frozen rows hold everything up to.
func (f *Frozen) Checkpoint() uint64 { return f.checkpoint }

// SectionWriter is where Encode writes: Cut ends a section, so that each
// shard can be read alone (snapshot.PartWriter).
type SectionWriter interface {
	io.Writer
	Cut() error
}

// Encode writes the frozen rows in format 3 (docs/snapshots.md), the same
// rows always as the same bytes: the hot section (every row but settled
// plays, journal lines and wins; rows in id order, plays in stake order),
// then shardCount sections, each cut from the one before, each with its
// own strings and time base so that it decodes alone.
func (f *Frozen) Encode(w SectionWriter) (int64, error) {
	cw := &countingWriter{w: w}
	slices.SortFunc(f.plays, func(a, b projections.Play) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID)) })
	// Section 0 is the hot one, 1+k shard k; a play's place is its section
	// and its index there.
	plays := make([][]projections.Play, 1+shardCount)
	at := make(map[string][2]uint64, len(f.plays))
	for _, p := range f.plays {
		sec := 0
		if p.Status != projections.StatusInProgress {
			sec = 1 + playerShard(p.Player)
		}
		at[p.ID] = [2]uint64{uint64(sec), uint64(len(plays[sec]))}
		plays[sec] = append(plays[sec], p)
	}
	wins := make([][][2]uint64, 1+shardCount)
	for i, id := range f.wins {
		a := at[id]
		wins[a[0]] = append(wins[a[0]], [2]uint64{uint64(i), a[1]})
	}
	journals := make([]map[string][]projections.JournalLine, shardCount)
	for k := range journals {
		journals[k] = map[string][]projections.JournalLine{}
	}
	for account, lines := range f.journal {
		journals[accountShard(account)][account] = lines
	}
	e := newEncoder(cw)
	e.raw([]byte(snapshotMagic))
	e.u(FormatVersion)
	e.str(f.ruleSet)
	e.u(f.checkpoint)
	e.u(shardCount)
	slices.SortFunc(f.accounts, func(a, b projections.Account) int { return cmp.Compare(a.Player, b.Player) })
	encodeSlice(e, f.accounts, e.account)
	encodeMap(e, f.limits, func(l *[]projections.LimitChange) { encodeSlice(e, *l, e.limitChange) })
	encodeMap(e, f.totals, func(t *[2]domain.Amount) { e.amount(t[0]); e.amount(t[1]) })
	encodeMap(e, f.emissions, e.emission)
	slices.SortFunc(f.blocks, func(a, b projections.BlockRow) int { return cmp.Compare(a.ID, b.ID) })
	encodeSlice(e, f.blocks, e.block)
	encodeMap(e, f.days, e.day)
	encodeMap(e, f.cashDays, func(d *projections.CashDay) { e.str(d.Day); e.amount(d.Deposits); e.amount(d.Withdrawals) })
	encodeMap(e, f.bans, func(l *[]projections.Ban) { encodeSlice(e, *l, e.ban) })
	encodeSlice(e, f.suspensions, e.suspension)
	encodeSlice(e, f.adjustments, e.adjustment)
	encodeMap(e, f.adjustDays, func(d *projections.AdjustmentDay) {
		e.str(d.Day)
		e.str(string(d.Kind))
		e.u(uint64(d.Approved))
		e.amount(d.Credits)
		e.amount(d.Debits)
	})
	encodeSlice(e, f.erasures, e.erasure)
	e.u(uint64(len(f.wins)))
	e.b(f.wins != nil)
	e.plays(plays[0], wins[0])
	for k := range shardCount {
		if err := e.end(); err != nil {
			return cw.n, err
		}
		if err := w.Cut(); err != nil {
			return cw.n, fmt.Errorf("encode read models: %w", err)
		}
		e = newEncoder(cw)
		e.u(uint64(k))
		encodeMap(e, journals[k], func(l *[]projections.JournalLine) { encodeSlice(e, *l, e.journalLine) })
		e.plays(plays[1+k], wins[1+k])
	}
	return cw.n, e.end()
}

// plays writes a section's plays, in stake order, then its wins: each its
// place in the store's list and its index among the plays.
func (e *encoder) plays(plays []projections.Play, wins [][2]uint64) {
	proofs := map[string]*domain.UnitProof{}
	seq := uint64(0)
	encodeSlice(e, plays, func(p *projections.Play) {
		e.play(p, seq, proofs)
		seq = p.Seq
	})
	encodeSlice(e, wins, func(w *[2]uint64) { e.u(w[0]); e.u(w[1]) })
}

// end marks a section's end and flushes it.
func (e *encoder) end() error {
	_ = e.w.WriteByte(snapshotEnd)
	if err := e.w.Flush(); err != nil {
		return fmt.Errorf("encode read models: %w", err)
	}
	return nil
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

// Restore loads the hot section Frozen.Encode wrote into an empty store,
// which is then whole for every read but those of settled plays, journal
// lines and wins: those wait for their shard, which shards opens, loaded
// once by the first read or batch that needs it, or by WarmUp. The hot rows
// are decoded into a fresh store, swapped in whole once every byte has
// read back, and a runner then resumes from its checkpoint. failed is told
// of a shard that fails to load later (the store then drops its rows to
// be applied again from the stream). Restore returns an error wrapping
// ErrSnapshotFormat for another format (1 and 2 included), another rule
// set, bytes cut short or followed by more, and leaves the store empty.
func (s *Store) Restore(hot io.Reader, shards Shards, failed func(error)) error {
	fresh, wins, err := decodeHot(s.proj.Rules(), hot)
	if err == nil && shards.Len() != shardCount {
		err = fmt.Errorf("%d shards, format %d has %d", shards.Len(), FormatVersion, shardCount)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotFormat, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkpoint != 0 {
		return fmt.Errorf("%w: the store already holds the stream up to %d", ErrSnapshotFormat, s.checkpoint)
	}
	s.rows = *fresh
	s.cold = newCold(shards, failed, wins)
	return nil
}

// decodeHot decodes a snapshot's hot section into new rows, and returns
// how many wins its shards hold with it.
func decodeHot(rules *domain.RuleSet, r io.Reader) (*rows, int, error) {
	d := newDecoder(r)
	head := make([]byte, len(snapshotMagic))
	d.raw(head[:1])
	if d.err == nil && head[0] == '{' {
		return nil, 0, fmt.Errorf("format version 1 (JSON), this build reads %d", FormatVersion)
	}
	d.raw(head[1:])
	if d.err != nil || !bytes.Equal(head, []byte(snapshotMagic)) {
		return nil, 0, fmt.Errorf("not a read-model snapshot (%v)", d.err)
	}
	if v := d.u(); v != FormatVersion {
		return nil, 0, fmt.Errorf("format version %d, this build reads %d", v, FormatVersion)
	}
	if rs, want := d.str(), domain.RuleSetID(rules); rs != want {
		return nil, 0, fmt.Errorf("rule set %s, this build runs %s", rs, want)
	}
	s := newRows(rules)
	s.checkpoint = d.u()
	if n := d.u(); n != shardCount && d.err == nil {
		return nil, 0, fmt.Errorf("%d shards, format %d has %d", n, FormatVersion, shardCount)
	}
	for _, a := range decodeSlice(d, d.account) {
		s.accounts[a.Player] = &a
		s.accountIDs = append(s.accountIDs, a.Player)
	}
	s.idsSorted = true
	decodeMap(d, s.limits, func() []projections.LimitChange { return decodeSlice(d, d.limitChange) })
	decodeMap(d, s.totals, func() *[2]domain.Amount { return &[2]domain.Amount{d.amount(), d.amount()} })
	decodeMap(d, s.emissions, d.emission)
	for _, b := range decodeSlice(d, d.block) {
		s.blocks[b.ID] = &b
		s.blockIDs = append(s.blockIDs, b.ID)
		s.proj.Know(&b)
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
	for _, x := range decodeSlice(d, d.suspension) {
		s.suspensions = append(s.suspensions, &x)
	}
	for _, x := range decodeSlice(d, d.adjustment) {
		s.adjustments = append(s.adjustments, &x)
	}
	d.adjustedTotals(&s)
	decodeMap(d, s.adjustDays, func() *projections.AdjustmentDay {
		return &projections.AdjustmentDay{Day: d.str(), Kind: domain.AdjustmentKind(d.str()), Approved: int(d.u()), Credits: d.amount(), Debits: d.amount()}
	})
	for _, x := range decodeSlice(d, d.erasure) {
		s.addErasure(&x)
	}
	wins := d.count() + 1
	if d.b() {
		s.wins = make([]*projections.Play, wins)
	} else if wins > 0 {
		d.fail(fmt.Errorf("%d wins in no list", wins))
	}
	sec := d.plays(wins)
	d.end()
	if d.err != nil {
		return nil, 0, d.err
	}
	for _, p := range sec.plays {
		s.plays[p.ID] = p
	}
	s.history = sec.history
	for _, w := range sec.wins {
		s.wins[w[0]] = sec.plays[w[1]]
	}
	return &s, wins, nil
}

// shardRows are the rows of a section: plays in stake order, each
// player's history, journal lines per account, and wins (their place
// among the store's, their index among the plays).
type shardRows struct {
	plays   []*projections.Play
	history map[string][]*projections.Play
	journal map[string][]projections.JournalLine
	wins    [][2]int
}

// decodeShard decodes shard k of a snapshot whose shards hold wins wins:
// every row must be of that shard.
func decodeShard(r io.Reader, k, wins int) (*shardRows, error) {
	d := newDecoder(r)
	if got := d.u(); got != uint64(k) && d.err == nil {
		return nil, fmt.Errorf("shard %d where shard %d should be", got, k)
	}
	journal := map[string][]projections.JournalLine{}
	decodeMap(d, journal, func() []projections.JournalLine { return decodeSlice(d, d.journalLine) })
	sh := d.plays(wins)
	d.end()
	for account := range journal {
		if accountShard(account) != k {
			d.fail(fmt.Errorf("the journal of %s in shard %d", account, k))
		}
	}
	for player := range sh.history {
		if playerShard(player) != k {
			d.fail(fmt.Errorf("plays of %s in shard %d", player, k))
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	sh.journal = journal
	return sh, nil
}

// plays reads what encoder.plays wrote, of a store with wins wins.
func (d *decoder) plays(wins int) *shardRows {
	n := d.count()
	sh := &shardRows{plays: make([]*projections.Play, 0, max(min(n, 1<<20), 0)), history: map[string][]*projections.Play{}}
	proofs := map[string]*domain.UnitProof{}
	seq := uint64(0)
	for i := 0; i < n && d.err == nil; i++ {
		p := &projections.Play{}
		d.play(p, seq, proofs)
		seq = p.Seq
		sh.plays = append(sh.plays, p)
		// Plays come in stake order: each history is in order as built.
		sh.history[p.Player] = append(sh.history[p.Player], p)
	}
	sh.wins = decodeSlice(d, func(w *[2]int) {
		at, i := d.u(), d.u()
		if at >= uint64(wins) || i >= uint64(len(sh.plays)) {
			d.fail(fmt.Errorf("win %d: play %d of %d", at, i, len(sh.plays)))
			return
		}
		w[0], w[1] = int(at), int(i)
	})
	return sh
}

// end reads a section's end mark and the end of its bytes.
func (d *decoder) end() {
	if d.err != nil {
		return
	}
	if c, err := d.r.ReadByte(); err != nil {
		d.fail(err)
	} else if c != snapshotEnd {
		d.fail(fmt.Errorf("byte %#x where the end mark should be", c))
	} else if _, err := d.r.ReadByte(); !errors.Is(err, io.EOF) {
		d.fail(errors.New("bytes after the end"))
	}
}
