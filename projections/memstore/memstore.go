// Package memstore is the in-memory projections.Store of Tresor's embedded
// default (tresor serve without a database): the read models live in maps,
// rebuilt from the stream at every start. A batch is applied under one lock,
// so readers see it whole or not at all, exactly as a transaction.
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// Store is the in-memory store. Its zero value is not usable: call New.
type Store struct {
	mu sync.RWMutex
	rows
	wake chan struct{}
	// cold holds the shards of a snapshot of format 3 not loaded yet, nil
	// once every row is in memory (shards.go).
	cold *cold
	// rebuildTo is the checkpoint the store held when a shard failed to
	// load and its rows were dropped: reads answer ErrNotReached until the
	// stream is applied again up to there. switched makes the next Apply
	// return ErrSwitched, so that the Runner applies from the start;
	// dropped is closed while switched is set, so that the Runner asks at
	// once (projections.Dropper).
	rebuildTo uint64
	switched  bool
	dropped   chan struct{}
}

// rows are the read models, replaced whole by Restore and by a rebuild.
type rows struct {
	proj       *projections.Projector
	checkpoint uint64
	accounts   map[string]*projections.Account
	// accountIDs lists the accounts in id order once sorted; new accounts
	// are appended and sorted by the next listing (listings are rare,
	// batches many: a rebuild with a million players must not sort a
	// million ids per batch).
	accountIDs []string
	idsSorted  bool
	limits     map[string][]projections.LimitChange
	journal    map[string][]projections.JournalLine
	totals     map[string]*[2]domain.Amount // credits, debits
	emissions  map[string]projections.Emission
	blocks     map[string]*projections.BlockRow
	blockIDs   []string // sorted
	plays      map[string]*projections.Play
	history    map[string][]*projections.Play // per player, oldest first
	days       map[string]*projections.Day    // per day and emission (Day.RowKey)
	cashDays   map[string]*projections.CashDay
	// bans holds each player's bans, oldest first.
	bans map[string][]*projections.Ban
	// suspensions holds every suspension of sales, oldest first.
	suspensions []*projections.Suspension
	// adjustments holds every adjustment, oldest first; adjustIdx indexes
	// them by id (built on first use).
	adjustments []*projections.Adjustment
	adjustIdx   map[string]*projections.Adjustment
	adjustDays  map[string]*projections.AdjustmentDay
	// erasures holds every erasure proposed, oldest first; erasureIdx
	// indexes them by id.
	erasures   []*projections.Erasure
	erasureIdx map[string]*projections.Erasure
	// wins lists the winning plays in the order they settled, which is
	// the order of their settlement times.
	wins []*projections.Play
}

// New returns an empty store for a stream written under rules.
func New(rules *domain.RuleSet) *Store {
	return &Store{rows: newRows(rules), wake: make(chan struct{}), dropped: make(chan struct{})}
}

func newRows(rules *domain.RuleSet) rows {
	return rows{
		proj:       projections.NewProjector(rules),
		accounts:   map[string]*projections.Account{},
		limits:     map[string][]projections.LimitChange{},
		journal:    map[string][]projections.JournalLine{},
		totals:     map[string]*[2]domain.Amount{},
		emissions:  map[string]projections.Emission{},
		blocks:     map[string]*projections.BlockRow{},
		plays:      map[string]*projections.Play{},
		history:    map[string][]*projections.Play{},
		days:       map[string]*projections.Day{},
		cashDays:   map[string]*projections.CashDay{},
		adjustDays: map[string]*projections.AdjustmentDay{},
		bans:       map[string][]*projections.Ban{},
		erasureIdx: map[string]*projections.Erasure{},
	}
}

var (
	_ projections.Store   = (*Store)(nil)
	_ projections.Dropper = (*Store)(nil)
)

// Apply implements projections.Store. A batch that touches a shard not
// loaded yet waits for it, outside the lock, then folds again: rows are
// only ever written on top of their shard's, so that no merge has to order
// them.
func (s *Store) Apply(ctx context.Context, batch []projections.Envelope) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("apply batch: %w", err)
		}
		shard, err := s.apply(batch)
		if shard < 0 {
			return err
		}
		// A shard that fails drops the rows: the next round says so
		// (ErrSwitched).
		_ = s.ensure(ctx, shard)
	}
}

// apply applies batch, or returns a shard it needs that is not loaded.
func (s *Store) apply(batch []projections.Envelope) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.switched {
		s.switched = false
		s.dropped = make(chan struct{})
		return -1, fmt.Errorf("apply batch: the rows were dropped for a rebuild: %w", projections.ErrSwitched)
	}
	c, err := s.proj.Fold(s.checkpoint, batch)
	if err != nil {
		return -1, fmt.Errorf("apply batch after %d: %w", s.checkpoint, err)
	}
	if c.To == s.checkpoint {
		return -1, nil
	}
	if shard := s.cold.needed(c); shard >= 0 {
		return shard, nil
	}
	if err := s.check(c); err != nil {
		return -1, fmt.Errorf("apply %d to %d: %w", c.From, c.To, err)
	}
	s.write(c)
	s.proj.Commit(c)
	s.checkpoint = c.To
	close(s.wake)
	s.wake = make(chan struct{})
	return -1, nil
}

// check refuses changes to rows that do not exist, before anything is
// written, so that a refused batch leaves the store as it was.
func (s *Store) check(c *projections.Changes) error {
	for _, a := range c.Accounts {
		if a.Opened == nil && s.accounts[a.Player] == nil {
			return fmt.Errorf("%w: unknown account %q", projections.ErrInvalid, a.Player)
		}
		if a.Opened != nil && s.accounts[a.Player] != nil {
			return fmt.Errorf("%w: account %q opened twice", projections.ErrInvalid, a.Player)
		}
	}
	for _, b := range c.Blocks {
		if b.Opened == nil && s.blocks[b.ID] == nil {
			return fmt.Errorf("%w: unknown block %q", projections.ErrInvalid, b.ID)
		}
		if b.Opened != nil && s.blocks[b.ID] != nil {
			return fmt.Errorf("%w: block %q opened twice", projections.ErrInvalid, b.ID)
		}
	}
	for _, p := range c.Plays {
		old := s.plays[p.ID]
		if p.New == nil && (old == nil || old.Player != p.Player) {
			return fmt.Errorf("%w: unknown play %q of player %q", projections.ErrInvalid, p.ID, p.Player)
		}
		if p.New != nil && old != nil {
			return fmt.Errorf("%w: play %q staked twice", projections.ErrInvalid, p.ID)
		}
	}
	for _, b := range c.Bans {
		old := s.ban(b.Player, b.Ban.Ban)
		if b.New && old != nil {
			return fmt.Errorf("%w: ban %s of %q recorded twice", projections.ErrInvalid, b.Ban.Ban, b.Player)
		}
		if !b.New && (old == nil || old.LiftedAt != nil) {
			return fmt.Errorf("%w: ban %s of %q lifted but not in force", projections.ErrInvalid, b.Ban.Ban, b.Player)
		}
	}
	for _, c := range c.Suspensions {
		old := s.suspension(c.ID)
		if c.New && old != nil {
			return fmt.Errorf("%w: suspension %s recorded twice", projections.ErrInvalid, c.ID)
		}
		if !c.New && (old == nil || old.ResumedAt != nil) {
			return fmt.Errorf("%w: suspension %s resumed but not in force", projections.ErrInvalid, c.ID)
		}
	}
	if err := s.checkAdjustments(c); err != nil {
		return err
	}
	return s.checkErasures(c)
}

// suspension returns a suspension of sales by id, or nil: they are a few
// a year.
func (s *Store) suspension(id string) *projections.Suspension {
	for _, x := range s.suspensions {
		if x.ID == id {
			return x
		}
	}
	return nil
}

// ban returns a player's ban by id, or nil.
func (s *Store) ban(player, id string) *projections.Ban {
	for _, b := range s.bans[player] {
		if b.Ban == id {
			return b
		}
	}
	return nil
}

func (s *Store) write(c *projections.Changes) {
	for _, a := range c.Accounts {
		row := s.accounts[a.Player]
		if row == nil {
			row = &projections.Account{Player: a.Player}
			s.accounts[a.Player] = row
			s.accountIDs = append(s.accountIDs, a.Player)
			s.idsSorted = false
		}
		a.ApplyTo(row)
	}
	for _, l := range c.LimitChanges {
		s.limits[l.Player] = append(s.limits[l.Player], l)
	}
	for _, l := range c.Journal {
		s.journal[l.Account] = append(s.journal[l.Account], l)
		t := s.totals[l.Account]
		if t == nil {
			t = &[2]domain.Amount{}
			s.totals[l.Account] = t
		}
		if l.Side == projections.Credit {
			t[0] += l.Amount
		} else {
			t[1] += l.Amount
		}
	}
	for _, e := range c.Emissions {
		s.emissions[e.ID] = e
	}
	newBlocks := false
	for _, b := range c.Blocks {
		row := s.blocks[b.ID]
		if row == nil {
			opened := *b.Opened
			row = &opened
			s.blocks[b.ID] = row
			newBlocks = true
		}
		b.ApplyTo(row)
	}
	if newBlocks {
		s.blockIDs = sortedKeys(s.blocks)
	}
	for _, p := range c.Plays {
		row := s.plays[p.ID]
		if p.New != nil {
			copied := *p.New
			row = &copied
			s.plays[p.ID] = row
			s.history[row.Player] = append(s.history[row.Player], row)
		} else {
			p.ApplyTo(row)
		}
		if (p.Prize != nil || p.New != nil) && row.Prize != nil && *row.Prize > 0 {
			s.wins = append(s.wins, row)
		}
	}
	projections.AddByDay(s.days, c.Days)
	projections.AddByDay(s.cashDays, c.CashDays)
	projections.AddByDay(s.adjustDays, c.AdjustmentDays)
	for _, b := range c.Bans {
		if b.New {
			row := b.Ban
			s.bans[b.Player] = append(s.bans[b.Player], &row)
			continue
		}
		b.ApplyTo(s.ban(b.Player, b.Ban.Ban))
	}
	for _, c := range c.Suspensions {
		if c.New {
			row := c.Suspension
			s.suspensions = append(s.suspensions, &row)
			continue
		}
		c.ApplyTo(s.suspension(c.ID))
	}
	s.writeAdjustments(c)
	s.writeErasures(c)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Checkpoint implements projections.Store.
func (s *Store) Checkpoint(context.Context) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.checkpoint, nil
}

// WaitFor implements projections.Store.
func (s *Store) WaitFor(ctx context.Context, seq uint64) error {
	return projections.WaitPoll(ctx, seq, s.Checkpoint, func() <-chan struct{} {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.wake
	})
}

// Account implements projections.Store.
func (s *Store) Account(ctx context.Context, player string) (projections.Account, error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return projections.Account{}, fmt.Errorf("account %q: %w", player, err)
	}
	defer s.mu.RUnlock()
	a := s.accounts[player]
	if a == nil {
		return projections.Account{}, fmt.Errorf("account %q: %w", player, projections.ErrNotFound)
	}
	return s.account(a), nil
}

func (s *Store) account(a *projections.Account) projections.Account {
	out := *a
	out.SetLimits(s.limits[a.Player])
	for _, b := range s.bans[a.Player] {
		if b.LiftedAt == nil {
			out.Bans = append(out.Bans, *b)
		}
	}
	return out
}

// Accounts implements projections.Store.
func (s *Store) Accounts(_ context.Context, after string, limit int) ([]projections.Account, error) {
	limit, err := projections.ClampLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list accounts: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkpoint < s.rebuildTo {
		return nil, fmt.Errorf("list accounts: %w", errRebuilding)
	}
	if !s.idsSorted {
		slices.Sort(s.accountIDs)
		s.idsSorted = true
	}
	i := sort.SearchStrings(s.accountIDs, after)
	if i < len(s.accountIDs) && s.accountIDs[i] == after {
		i++
	}
	out := []projections.Account{}
	for ; i < len(s.accountIDs) && len(out) < limit; i++ {
		out = append(out, s.account(s.accounts[s.accountIDs[i]]))
	}
	return out, nil
}

// Journal implements projections.Store.
func (s *Store) Journal(ctx context.Context, account string, after projections.JournalCursor, limit int) ([]projections.JournalLine, error) {
	limit, err := projections.ClampLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", account, err)
	}
	if err := s.rlock(ctx, accountShard(account)); err != nil {
		return nil, fmt.Errorf("journal of %s: %w", account, err)
	}
	defer s.mu.RUnlock()
	lines := s.journal[account]
	i, _ := slices.BinarySearchFunc(lines, after, func(l projections.JournalLine, c projections.JournalCursor) int {
		if n := cmp.Compare(l.Seq, c.Seq); n != 0 {
			return n
		}
		return cmp.Compare(l.Line, c.Line)
	})
	if i < len(lines) && lines[i].Cursor() == after {
		i++
	}
	end := min(i+limit, len(lines))
	out := make([]projections.JournalLine, end-i)
	copy(out, lines[i:end])
	return out, nil
}

// AccountTotals implements projections.Store.
func (s *Store) AccountTotals(ctx context.Context, account string) (credits, debits domain.Amount, err error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return 0, 0, fmt.Errorf("totals of %s: %w", account, err)
	}
	defer s.mu.RUnlock()
	if t := s.totals[account]; t != nil {
		return t[0], t[1], nil
	}
	return 0, 0, nil
}

// Block implements projections.Store.
func (s *Store) Block(ctx context.Context, id string) (projections.BlockReport, error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return projections.BlockReport{}, fmt.Errorf("block %q: %w", id, err)
	}
	defer s.mu.RUnlock()
	b := s.blocks[id]
	if b == nil {
		return projections.BlockReport{}, fmt.Errorf("block %q: %w", id, projections.ErrNotFound)
	}
	return b.Report(), nil
}

// Blocks implements projections.Store.
func (s *Store) Blocks(ctx context.Context, after string, limit int) ([]projections.BlockReport, error) {
	limit, err := projections.ClampLimit(limit)
	if err != nil {
		return nil, fmt.Errorf("list blocks: %w", err)
	}
	if err := s.rlock(ctx, noShard); err != nil {
		return nil, fmt.Errorf("list blocks: %w", err)
	}
	defer s.mu.RUnlock()
	i := sort.SearchStrings(s.blockIDs, after)
	if i < len(s.blockIDs) && s.blockIDs[i] == after {
		i++
	}
	out := []projections.BlockReport{}
	for ; i < len(s.blockIDs) && len(out) < limit; i++ {
		out = append(out, s.blocks[s.blockIDs[i]].Report())
	}
	return out, nil
}

// History implements projections.Store.
func (s *Store) History(ctx context.Context, player, before string, limit int) (projections.HistoryPage, error) {
	limit, err := projections.ClampLimit(limit)
	if err != nil {
		return projections.HistoryPage{}, fmt.Errorf("history of %s: %w", player, err)
	}
	cursor, err := projections.ParseHistoryCursor(before)
	if err != nil {
		return projections.HistoryPage{}, fmt.Errorf("history of %s: %w", player, err)
	}
	if err := s.rlock(ctx, playerShard(player)); err != nil {
		return projections.HistoryPage{}, fmt.Errorf("history of %s: %w", player, err)
	}
	defer s.mu.RUnlock()
	plays := s.history[player]
	end := len(plays)
	if cursor > 0 {
		end, _ = slices.BinarySearchFunc(plays, cursor, func(p *projections.Play, seq uint64) int { return cmp.Compare(p.Seq, seq) })
	}
	page := projections.HistoryPage{Plays: []projections.Play{}}
	for i := end - 1; i >= 0 && len(page.Plays) < limit; i-- {
		page.Plays = append(page.Plays, copyPlay(plays[i]))
	}
	if n := len(page.Plays); n == limit && end-n > 0 {
		page.Next = projections.HistoryCursor(page.Plays[n-1].Seq)
	}
	return page, nil
}

// LastPlay implements projections.Store.
func (s *Store) LastPlay(ctx context.Context, player string) (projections.Play, error) {
	if err := s.rlock(ctx, playerShard(player)); err != nil {
		return projections.Play{}, fmt.Errorf("last play of %q: %w", player, err)
	}
	defer s.mu.RUnlock()
	plays := s.history[player]
	if len(plays) == 0 {
		return projections.Play{}, fmt.Errorf("last play of %q: %w", player, projections.ErrNotFound)
	}
	return copyPlay(plays[len(plays)-1]), nil
}

// Play implements projections.Store.
func (s *Store) Play(ctx context.Context, player, id string) (projections.Play, error) {
	if err := s.rlock(ctx, playerShard(player)); err != nil {
		return projections.Play{}, fmt.Errorf("play %q of %q: %w", id, player, err)
	}
	defer s.mu.RUnlock()
	p, ok := s.plays[id]
	if !ok || p.Player != player {
		return projections.Play{}, fmt.Errorf("play %q of %q: %w", id, player, projections.ErrNotFound)
	}
	return copyPlay(p), nil
}

func copyPlay(p *projections.Play) projections.Play {
	out := *p
	out.Throws = slices.Clone(p.Throws)
	return out
}

// Reconciliation implements projections.Store.
func (s *Store) Reconciliation(ctx context.Context, scope projections.Scope, emission string) ([]projections.Reconciliation, error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return nil, fmt.Errorf("reconciliation: %w", err)
	}
	defer s.mu.RUnlock()
	out := []projections.Reconciliation{}
	switch scope {
	case projections.ScopeBlock:
		for _, id := range s.blockIDs {
			if b := s.blocks[id]; emission == "" || b.Emission == emission {
				out = append(out, projections.Reconcile(scope, id, b.Counters, b.TableMismatch()))
			}
		}
	case projections.ScopeEmission:
		for _, id := range sortedKeys(s.emissions) {
			if emission != "" && id != emission {
				continue
			}
			var c projections.Counters
			var mismatch domain.Amount
			for _, bid := range s.blockIDs {
				if b := s.blocks[bid]; b.Emission == id {
					c.Add(b.Counters)
					mismatch += b.TableMismatch()
				}
			}
			out = append(out, projections.Reconcile(scope, id, c, mismatch))
		}
	case projections.ScopeDay:
		for _, d := range s.daysOf(emission) {
			out = append(out, projections.Reconcile(scope, d.Day, d.Counters, 0))
		}
	default:
		return nil, fmt.Errorf("reconciliation: %w: scope %q", projections.ErrInvalid, scope)
	}
	return out, nil
}

// daysOf returns the day rows of an emission's blocks, or every emission's
// ("") added up per day, in day order.
func (s *Store) daysOf(emission string) []projections.Day {
	var days []projections.Day
	for _, k := range sortedKeys(s.days) {
		if d := s.days[k]; emission == "" || d.Emission == emission {
			days = append(days, *d)
		}
	}
	return projections.SumDays(days)
}

// Statement implements projections.Store. A player's journal lines are in
// stream order, which is the order of their times: the period's ends are
// two binary searches.
func (s *Store) Statement(ctx context.Context, q projections.StatementQuery) (projections.Statement, error) {
	from, to, limit, err := q.Bounds()
	if err != nil {
		return projections.Statement{}, fmt.Errorf("statement of %s: %w", q.Player, err)
	}
	if err := s.rlock(ctx, playerShard(q.Player)); err != nil {
		return projections.Statement{}, fmt.Errorf("statement of %s: %w", q.Player, err)
	}
	defer s.mu.RUnlock()
	if s.accounts[q.Player] == nil {
		return projections.Statement{}, fmt.Errorf("statement of %q: %w", q.Player, projections.ErrNotFound)
	}
	lines := s.journal[domain.PlayerAccount(q.Player)]
	before := func(t time.Time) int {
		return sort.Search(len(lines), func(i int) bool { return !lines[i].At.Before(t) })
	}
	balance := func(i int) domain.Amount {
		if i == 0 || lines[i-1].BalanceAfter == nil {
			return 0
		}
		return *lines[i-1].BalanceAfter
	}
	i, j := before(from), before(to)
	out := projections.Statement{Player: q.Player, Opening: balance(i), Closing: balance(j), Movements: []projections.Movement{}, Seq: s.checkpoint}
	i = max(i, sort.Search(len(lines), func(k int) bool { return lines[k].Seq > q.After }))
	for ; i < j && len(out.Movements) < limit; i++ {
		out.Movements = append(out.Movements, projections.MovementOf(lines[i]))
	}
	if i < j {
		out.Next = out.Movements[len(out.Movements)-1].Seq
	}
	return out, nil
}

// Bans implements projections.Store.
func (s *Store) Bans(ctx context.Context, player string) ([]projections.Ban, error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return nil, fmt.Errorf("bans of %s: %w", player, err)
	}
	defer s.mu.RUnlock()
	out := []projections.Ban{}
	for _, b := range s.bans[player] {
		if len(out) == projections.BansMax {
			break
		}
		out = append(out, *b)
	}
	return out, nil
}

// Suspensions implements projections.Store.
func (s *Store) Suspensions(ctx context.Context) ([]projections.Suspension, error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return nil, fmt.Errorf("suspensions: %w", err)
	}
	defer s.mu.RUnlock()
	return projections.ListSuspensions(s.suspensions), nil
}

// ReportData implements projections.Store.
func (s *Store) ReportData(ctx context.Context) (projections.ReportData, error) {
	if err := s.rlock(ctx, noShard); err != nil {
		return projections.ReportData{}, fmt.Errorf("report data: %w", err)
	}
	defer s.mu.RUnlock()
	d := projections.ReportData{Seq: s.checkpoint, Suspensions: projections.ListSuspensions(s.suspensions)}
	for _, id := range s.blockIDs {
		d.Blocks = append(d.Blocks, *s.blocks[id])
	}
	for _, id := range sortedKeys(s.emissions) {
		d.Emissions = append(d.Emissions, s.emissions[id])
	}
	d.Days = s.daysOf("")
	for _, day := range sortedKeys(s.cashDays) {
		d.CashDays = append(d.CashDays, *s.cashDays[day])
	}
	for _, k := range sortedKeys(s.adjustDays) {
		d.AdjustmentDays = append(d.AdjustmentDays, *s.adjustDays[k])
	}
	return d, nil
}

// LargeWins implements projections.Store.
func (s *Store) LargeWins(ctx context.Context, q projections.LargeWinsQuery) ([]projections.Win, uint64, bool, error) {
	if err := q.Check(); err != nil {
		return nil, 0, false, fmt.Errorf("large wins: %w", err)
	}
	from, to := q.From.UTC().Truncate(projections.Precision), q.To.UTC().Truncate(projections.Precision)
	if err := s.rlock(ctx, allShards); err != nil {
		return nil, 0, false, fmt.Errorf("large wins: %w", err)
	}
	defer s.mu.RUnlock()
	out := []projections.Win{}
	i := sort.Search(len(s.wins), func(i int) bool { return !s.wins[i].SettledAt.Before(from) })
	for ; i < len(s.wins) && s.wins[i].SettledAt.Before(to); i++ {
		p := s.wins[i]
		if *p.Prize < q.Threshold {
			continue
		}
		if len(out) == q.Limit {
			return out, s.checkpoint, true, nil
		}
		out = append(out, projections.Win{Play: p.ID, Player: p.Player, Block: p.Block, Unit: p.Unit, Tier: *p.Tier, Prize: *p.Prize,
			At: *p.SettledAt, BySystem: p.Status == projections.StatusCompletedBySystem})
	}
	return out, s.checkpoint, false, nil
}

// Close implements projections.Store; the memory is left to the collector.
func (s *Store) Close() error { return nil }
