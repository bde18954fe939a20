package memstore

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// shardCount is how many shards the cold rows of format 3 are split into
// (docs/snapshots.md): a read of one player loads about 1/64 of the
// settled history.
const shardCount = 64

// What a read needs besides the rows that are always in memory: one shard
// (its index), none, or every shard.
const (
	noShard   = -1
	allShards = -2
)

// errRebuilding answers reads while the rows dropped after a shard that
// failed to load are applied again from the stream: 503, never a part.
var errRebuilding = fmt.Errorf("%w: the read models are being rebuilt from the stream (a snapshot shard failed to load)", projections.ErrNotReached)

// Shards opens the shards of a snapshot of format 3, each alone and
// authenticated (snapshot.Sections).
type Shards interface {
	Len() int
	Open(ctx context.Context, i int) (io.ReadCloser, error)
}

// cold is what Restore left in the snapshot: the shards of settled plays,
// journal lines and wins, loaded on the first read or batch that needs
// one, or by WarmUp.
type cold struct {
	src    Shards
	failed func(error)
	// wins is how many wins the snapshot holds: the store's first wins,
	// filled in as their shards load.
	wins   int
	shards [shardCount]shardLoad
	// loaded and left are under Store.mu.
	loaded [shardCount]bool
	left   int
}

// shardLoad loads one shard once, whoever asks first; the others wait
// for done.
type shardLoad struct {
	once sync.Once
	done chan struct{}
	err  error
}

func newCold(src Shards, failed func(error), wins int) *cold {
	c := &cold{src: src, failed: failed, wins: wins, left: shardCount}
	for k := range c.shards {
		c.shards[k].done = make(chan struct{})
	}
	return c
}

// accountShard is the shard of an account's journal: FNV-1a of its name,
// part of format 3.
func accountShard(account string) int {
	h := uint32(2166136261)
	for i := 0; i < len(account); i++ {
		h ^= uint32(account[i])
		h *= 16777619
	}
	return int(h % shardCount)
}

// playerShard is the shard of a player's settled plays: its account's,
// so that a statement and a history load one shard.
func playerShard(player string) int { return accountShard(domain.PlayerAccount(player)) }

// needed returns a shard not loaded that a batch's changes write to, or
// -1: plays (a play settled before the snapshot is there, and check must
// see it) and journal lines.
func (c *cold) needed(ch *projections.Changes) int {
	if c == nil {
		return -1
	}
	for _, p := range ch.Plays {
		if k := playerShard(p.Player); !c.loaded[k] {
			return k
		}
	}
	for _, l := range ch.Journal {
		if k := accountShard(l.Account); !c.loaded[k] {
			return k
		}
	}
	return -1
}

// rlock waits for what a read needs (see noShard), then read-locks the
// store, unless its rows are being rebuilt.
func (s *Store) rlock(ctx context.Context, shard int) error {
	if err := s.ensure(ctx, shard); err != nil {
		return err
	}
	s.mu.RLock()
	if s.checkpoint < s.rebuildTo {
		s.mu.RUnlock()
		return errRebuilding
	}
	return nil
}

// ensure waits until shard (or every shard) is loaded, starting its load
// if none has, or ctx ends.
func (s *Store) ensure(ctx context.Context, shard int) error {
	switch shard {
	case noShard:
		return nil
	case allShards:
		for k := range shardCount {
			if err := s.ensure(ctx, k); err != nil {
				return err
			}
		}
		return nil
	}
	s.mu.RLock()
	c := s.cold
	s.mu.RUnlock()
	if c == nil {
		return nil
	}
	l := &c.shards[shard]
	// The load is the store's, not the read's that started it: a read
	// that gives up does not fail the others waiting.
	l.once.Do(func() { go s.load(c, shard) })
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return fmt.Errorf("wait for snapshot shard %d: %w", shard, ctx.Err())
	}
}

// Rebuilding reports whether the store dropped its rows after a shard
// failed to load and has not applied the stream up to where it was yet:
// readiness says so.
func (s *Store) Rebuilding() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.checkpoint < s.rebuildTo
}

// Dropped implements projections.Dropper: the rows dropped after a shard
// failed to load are applied again at once, not at the next event.
func (s *Store) Dropped() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dropped
}

// drop makes the next Apply return ErrSwitched and tells the Runner to
// call it; under s.mu.
func (s *Store) drop() {
	if !s.switched {
		s.switched = true
		close(s.dropped)
	}
}

// WarmUp loads the shards nothing has asked for yet, so that the store
// holds every row again (Freeze waits for it). It returns once every shard
// is loaded (at once for a store not restored from format 3), with the
// error of a shard refused, or ctx's: serve logs when the read models are
// whole in memory again, which nothing else shows.
func (s *Store) WarmUp(ctx context.Context) error { return s.ensure(ctx, allShards) }

// load reads and decodes shard k outside the lock, then merges it under
// it. A shard that fails (missing, altered after the start, not decoding)
// drops every row: the store is applied again from the stream, and reads
// answer errRebuilding meanwhile.
func (s *Store) load(c *cold, k int) {
	l := &c.shards[k]
	defer close(l.done)
	sh, err := c.read(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.cold == c {
		err = s.checkWins(c, sh)
	}
	switch {
	case s.cold != c:
		l.err = errRebuilding
	case err != nil:
		l.err = fmt.Errorf("%w (shard %d: %w)", errRebuilding, k, err)
		c.failed(l.err)
		s.rebuildTo = max(s.rebuildTo, s.checkpoint)
		s.rows = newRows(s.proj.Rules())
		s.cold = nil
		s.drop()
	default:
		s.merge(sh)
		c.loaded[k] = true
		if c.left--; c.left == 0 {
			s.cold = nil
		}
	}
}

// shardAttempts is how many times a shard is read before it fails, the
// first pause shardRetry, doubled after each: a blip of the object store
// (a NATS node restarting) must not cost a rebuild; a shard refused or
// not decoding fails again and is dropped after 3 s.
const (
	shardAttempts = 3
	shardRetry    = time.Second
)

func (c *cold) read(k int) (*shardRows, error) {
	var err error
	for attempt, wait := 1, shardRetry; ; attempt, wait = attempt+1, 2*wait {
		var sh *shardRows
		if sh, err = c.readOnce(k); err == nil || attempt == shardAttempts {
			return sh, err
		}
		time.Sleep(wait)
	}
}

func (c *cold) readOnce(k int) (*shardRows, error) {
	r, err := c.src.Open(context.Background(), k)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return decodeShard(r, k, c.wins)
}

// checkWins refuses a shard that would put a win where another is, or, as
// the last shard, leave a place empty: a read of the wins must never find
// a hole.
func (s *Store) checkWins(c *cold, sh *shardRows) error {
	for _, w := range sh.wins {
		if s.wins[w[0]] != nil {
			return fmt.Errorf("win %d twice", w[0])
		}
	}
	if c.left > 1 {
		return nil
	}
	empty := 0
	for _, p := range s.wins[:c.wins] {
		if p == nil {
			empty++
		}
	}
	if empty != len(sh.wins) {
		return fmt.Errorf("%d of %d wins in no shard", empty-len(sh.wins), c.wins)
	}
	return nil
}

// merge adds a shard's rows under the rows of the batches applied since
// the restore, which never wrote to a shard before it was loaded: its
// plays before theirs in each history (merged by sequence with the plays
// in progress the snapshot kept in memory), its journal lines first.
func (s *Store) merge(sh *shardRows) {
	for _, p := range sh.plays {
		s.plays[p.ID] = p
	}
	for player, plays := range sh.history {
		h := append(plays, s.history[player]...)
		slices.SortFunc(h, func(a, b *projections.Play) int { return cmp.Compare(a.Seq, b.Seq) })
		s.history[player] = h
	}
	for account, lines := range sh.journal {
		s.journal[account] = append(lines, s.journal[account]...)
	}
	for _, w := range sh.wins {
		s.wins[w[0]] = sh.plays[w[1]]
	}
}
