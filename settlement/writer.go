// Package settlement is Tresor's write side: one writer that owns the state
// it decides on (accounts, blocks, plays in progress, idempotency keys),
// rebuilds it from the stream at start, decides commands with the pure
// domain decider and group-commits their events to the log.
package settlement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/snapshot"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Record is one event as the writer hands it to the log: the fact, the time
// it was recorded and the request that caused it.
type Record struct {
	Event         domain.Event
	At            time.Time
	CorrelationID string
}

// AppendResult is the outcome of one append: the stream sequence of each
// record, or the error that stopped it.
type AppendResult struct {
	Seqs []uint64
	Err  error
	// Commit splits the append's time in the log, when it tells.
	Commit CommitTiming
}

// CommitTiming is where an append spent its time in the log: waiting to
// join a batch, in the batch until it was sent (the batch in flight, the
// linger), and in its commit (eventstore.AppendTiming).
type CommitTiming struct {
	Queued, Held, Committed time.Duration
}

// Log is what the writer needs from the event store.
type Log interface {
	// Append submits the records of one command as one atomic unit and
	// returns at once; done is called exactly once with the result, once
	// the records are durable or refused, on the log's goroutine or the
	// caller's: it must be quick and must not block. Appends commit in
	// submission order, and once one fails every later one fails too: a
	// failed append means the writer no longer knows the log's head.
	Append(ctx context.Context, recs []Record, done func(AppendResult))
	// Replay calls fn for every domain event in stream order after
	// sequence after (0: from the first), and returns the sequence of the
	// last event read (after when there is none).
	Replay(ctx context.Context, after uint64, fn func(seq uint64, at time.Time, e domain.Event) error) (uint64, error)
}

// Config configures a writer. Zero values take the defaults.
type Config struct {
	Rules *domain.RuleSet
	// Settings are the jurisdiction's settings to decide under. When they
	// differ from those in force on the stream, Open records them
	// (SettingsAdopted) before taking any command; nil leaves the stream's
	// settings in force.
	Settings *domain.Settings
	// Sealer seals new blocks' seeds and opens those of blocks still open
	// at start.
	Sealer *Sealer
	// Personal, when set, seals the personal fields of every command
	// before it is decided (domain.SealCommand), so that neither the
	// stream nor the ledger holds them in clear, and destroys a person's
	// data key once their erasure is durable: after the approval, and for
	// every erasure the ledger keeps whose key the bucket still holds,
	// when the writer opens and after each approval. Nil leaves them in
	// clear.
	Personal Personal
	// AbandonAfter is how long a play may wait for its player's next throw
	// before the system completes and settles it (default 10 minutes).
	AbandonAfter time.Duration
	// IdempotencyWindow is how long client keys are remembered (default
	// domain.IdempotencyWindowDefault; at least 24 hours).
	IdempotencyWindow time.Duration
	// SweepEvery is how often the writer completes abandoned plays and
	// closes sold-out blocks whose plays have all settled (default 250 ms).
	SweepEvery time.Duration
	// QueueMax bounds the commands waiting for the writer (default 65 536).
	QueueMax int
	// Snapshots, when set, keeps snapshots of the ledger: Open starts from
	// the newest that passes its checks and replays only the events after
	// it, and a follower ledger takes a new one, off the loop, every
	// SnapshotEvery events (default 250 000) or SnapshotInterval (default
	// 10 minutes) if anything happened, and when the writer closes.
	Snapshots        snapshot.Store
	SnapshotEvery    int
	SnapshotInterval time.Duration
	// ClosingSnapshots, when set, stores the snapshot taken as the writer
	// closes instead of Snapshots: on the embedded default, the same slot
	// unpaced (snapshot.Unpaced), since nothing waits on the server or the
	// cores then and the writer's pace would only make the stop wait; on a
	// cluster, at snapshot.DefaultPace.
	ClosingSnapshots snapshot.Store
	// SnapshotObserver, when set, is told as each snapshot goes from one
	// phase to the next, for a measurement of the latency while one is
	// taken (tresor simulate).
	SnapshotObserver SnapshotObserver
	// MayAnswer, when set, is asked before the writer gives an answer that
	// recorded nothing (a refusal, the retry of a remembered key, a throw
	// already made). Such an answer is decided on the ledger alone: no
	// append goes to the stream for a fence to refuse, so a writer that may
	// no longer be the only one (a node frozen past its lease's TTL while
	// another took over and recorded more) would answer from a ledger that
	// misses what the other recorded. An error answers ErrStopped instead
	// (503: the caller retries, and the writer in charge answers). Checked
	// after the decision, it covers it: a writer still in charge then was
	// in charge when it decided, since a lease lost is never renewed.
	MayAnswer func() error
	// Clock tells the time (default time.Now).
	Clock  func() time.Time
	Logger *slog.Logger
	// Start is a ledger already built from the stream up to a sequence (a
	// standby's, which followed the stream): Open replays only what
	// follows, and takes the ledger over. Nil replays the whole stream.
	Start *Start
}

// Start is a ledger built from the stream's first Seq sequences, by
// NewLedger and Evolve, with the decks of its open blocks attached (see
// OpenDeck) or not (Open then rebuilds them).
type Start struct {
	Ledger *domain.Ledger
	Seq    uint64
}

// NewLedger returns the empty ledger a writer of this configuration starts
// from.
func (c *Config) NewLedger() *domain.Ledger {
	l := domain.NewLedger(c.Rules)
	l.IdempotencyWindow = c.IdempotencyWindow
	return l
}

// Validate checks a configuration and fills in the defaults.
func (c *Config) Validate() error {
	if c.Rules == nil {
		return errors.New("settlement config: no rule set")
	}
	if c.Sealer == nil {
		return errors.New("settlement config: no sealer (master key)")
	}
	if c.AbandonAfter == 0 {
		c.AbandonAfter = 10 * time.Minute
	}
	if c.IdempotencyWindow == 0 {
		c.IdempotencyWindow = domain.IdempotencyWindowDefault
	}
	if c.IdempotencyWindow < 24*time.Hour {
		return fmt.Errorf("settlement config: idempotency window %s is below 24h", c.IdempotencyWindow)
	}
	if c.SweepEvery == 0 {
		c.SweepEvery = 250 * time.Millisecond
	}
	if c.QueueMax == 0 {
		c.QueueMax = 1 << 16
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 250_000
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = 10 * time.Minute
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Result is the answer to an executed command: the events recorded and
// their stream sequences, or, for the retry of a remembered client key, the
// first result.
type Result struct {
	Events []domain.Event
	Seqs   []uint64
	Replay *domain.KeyRecord
	// At is, for an answer that recorded nothing (a replay), the writer's
	// last durable sequence when it answered: what the answer was decided
	// on is at or before it. It is part of the answer because the writer
	// that gave it may be gone by the time its caller reads (a node that
	// stepped down reads its own, lagging, position instead).
	At uint64
	// Commit is where the append's time went in the log (zero for an
	// answer that recorded nothing).
	Commit CommitTiming
}

// LastSeq returns the stream sequence of the command's last event or, for
// an answer that recorded nothing, At: a reader that waits for it sees its
// own write, or what a retry was answered from.
func (r Result) LastSeq() uint64 {
	if len(r.Seqs) == 0 {
		return r.At
	}
	return r.Seqs[len(r.Seqs)-1]
}

// ErrStopped is returned once the writer has stopped: closed, or fenced off
// because an append failed (another writer, a lost server). A restart
// rebuilds the state from the stream.
var ErrStopped = errors.New("writer stopped")

// ErrNotReady is returned by a writer side that cannot take commands now:
// the service is starting, has lost its stream, or no writer of the
// cluster answers (a takeover under way). The API answers it 503
// unavailable, with its message.
var ErrNotReady = errors.New("not ready")

// request is a command waiting for the writer's loop, or a look at its
// ledger (inspect).
type request struct {
	ctx     context.Context
	cmd     domain.Command
	inspect func(*domain.Ledger)
	reply   chan reply
}

type reply struct {
	res Result
	err error
}

// prepared is a block made ready off the loop for an emission.
type prepared struct {
	emission string
	block    *domain.PreparedBlock
	err      error
}

// Writer is the single writer of a shard. Execute is safe for concurrent
// use; the loop decides one command at a time against the in-memory ledger,
// applies its events at once (so the next command sees them) and lets the
// log group-commit them while it goes on deciding.
type Writer struct {
	cfg       Config
	log       Log
	ledger    *domain.Ledger
	seeds     map[[32]byte]domain.Seed // seeds of blocks not yet closed
	reqs      chan request
	prepCh    chan prepared
	preparing map[string]bool
	done      chan struct{}
	// exited is closed once the loop has returned and every append it
	// started has answered.
	exited  chan struct{}
	appends sync.WaitGroup
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	// tail is the last append handed to the log; a command that records
	// nothing is answered once it is done (see answerAfterTail).
	tail *appendDone
	// snap follows the acknowledged appends to take snapshots (nil
	// without Config.Snapshots).
	snap *snapshotter

	mu      sync.Mutex
	stopErr error
	lastSeq uint64
}

// appendDone is an append on its way to the log: done is closed once it is
// durable, with the stream sequence of each record, or has failed, and err
// then says which.
type appendDone struct {
	done chan struct{}
	err  error
	recs []Record
	seqs []uint64
}

// Open rebuilds the ledger from the log (from the newest usable snapshot
// when there are snapshots), reopens the decks of the blocks not yet
// closed, and starts the writer's loop.
func Open(ctx context.Context, log Log, cfg Config) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := rebuild(ctx, log, cfg)
	if err != nil {
		return nil, err
	}
	w := &Writer{
		cfg: cfg, log: log, ledger: r.ledger, seeds: map[[32]byte]domain.Seed{},
		reqs: make(chan request, cfg.QueueMax), prepCh: make(chan prepared, 16),
		preparing: map[string]bool{}, done: make(chan struct{}), exited: make(chan struct{}), lastSeq: r.last,
	}
	if err := w.reopenDecks(); err != nil {
		return nil, err
	}
	reseals, err := w.reseals()
	if err != nil {
		return nil, err
	}
	if cfg.Snapshots != nil && cfg.Start == nil {
		// Before the loop, which queues its appends after the tail.
		w.startSnapshotter(r)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.wg.Add(1)
	go w.loop(loopCtx)
	if cfg.Settings != nil {
		if _, err := w.Execute(ctx, domain.AdoptSettings{Settings: *cfg.Settings}); err != nil {
			w.Close()
			return nil, fmt.Errorf("adopt settings %s: %w", cfg.Settings.Version, err)
		}
	}
	if err := w.reseal(ctx, reseals); err != nil {
		w.Close()
		return nil, err
	}
	w.finishErasuresAtOpen(ctx)
	return w, nil
}

// rebuilt is the ledger Open rebuilt: up to last, from the snapshot at
// after (0: none), replaying replayed events; the follower that takes the
// writer's snapshots, or the snapshot's bytes (followerData) and the
// events replayed after it (tail), for the follower that decodes it once
// the writer runs.
type rebuilt struct {
	ledger       *domain.Ledger
	after, last  uint64
	replayed     int
	follower     *Follower
	followerData []byte
	tail         *appendDone
}

// rebuild replays the log after the starting ledger (a standby's, a
// snapshot's or an empty one).
func rebuild(ctx context.Context, log Log, cfg Config) (*rebuilt, error) {
	r := &rebuilt{tail: &appendDone{done: closedDone}}
	r.ledger, r.after, r.follower, r.followerData = startingLedger(ctx, cfg)
	start := time.Now()
	last, err := log.Replay(ctx, r.after, func(seq uint64, at time.Time, e domain.Event) error {
		r.replayed++
		switch {
		case r.follower != nil:
			if err := r.follower.Apply(seq, at, e); err != nil {
				return err
			}
		case r.followerData != nil:
			r.tail.recs, r.tail.seqs = append(r.tail.recs, Record{Event: e, At: at}), append(r.tail.seqs, seq)
		}
		return r.ledger.Evolve(at, e)
	})
	if err != nil {
		return nil, fmt.Errorf("rebuild ledger from the stream: %w", err)
	}
	r.last = last
	cfg.Logger.Info("ledger rebuilt", "from_snapshot", r.after, "replayed", r.replayed, "seq", last,
		"replay", time.Since(start).Round(time.Millisecond))
	return r, nil
}

// reopenDecks rebuilds the deck of every block not yet closed. A start
// waits for it: a deck is rebuilt from its seed, a whole block's shuffle
// and Merkle tree, whatever the history's length.
func (w *Writer) reopenDecks() error {
	start, decks := time.Now(), 0
	for _, b := range w.ledger.Blocks {
		if b.State == domain.BlockStateClosed {
			continue
		}
		if err := w.reopenDeck(b); err != nil {
			return err
		}
		decks++
	}
	if decks > 0 {
		w.cfg.Logger.Info("decks reopened", "blocks", decks, "after", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// startSnapshotter starts the writer's snapshots from the rebuilt ledger's
// follower. A writer that takes a standby's ledger over (Config.Start)
// keeps none: its follower would need a copy of that ledger, and encoding
// one would delay the takeover; its cluster node's next follower, which
// follows the stream from a snapshot of its own, takes them instead
// (cluster.Node). The events of the tail are counted as the follower
// applies them; those the fresh follower applied already, here.
func (w *Writer) startSnapshotter(r *rebuilt) {
	w.snap = newSnapshotter(w.cfg, r.follower, r.followerData, r.after, r.replayed-len(r.tail.recs))
	if len(r.tail.recs) > 0 {
		w.snap.push(r.tail)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.snap.run(w.exited)
	}()
}

// destroyTimeout bounds the destruction of erased data keys: a bucket that
// does not answer must not keep the writer from opening, nor an approval
// from being answered.
const destroyTimeout = 10 * time.Second

// finishErasuresAtOpen destroys the data keys of the erasures the ledger
// keeps that the bucket still holds (a crash between an erasure and its
// key's destruction), and logs what it could not.
func (w *Writer) finishErasuresAtOpen(ctx context.Context) {
	if w.cfg.Personal == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, destroyTimeout)
	defer cancel()
	if err := w.finishErasures(ctx); err != nil {
		w.cfg.Logger.Error("erasures recorded whose data keys are still held: destroyed when the writer next opens or records an erasure", "err", err)
	}
}

// reseal records the seeds resealed under a new master key (reseals).
func (w *Writer) reseal(ctx context.Context, reseals []domain.ResealSeeds) error {
	for _, c := range reseals {
		if _, err := w.Execute(ctx, c); err != nil {
			return fmt.Errorf("reseal block seeds under master key %s: %w", c.MasterKeyID, err)
		}
		w.cfg.Logger.Info("block seeds resealed", "master_key_id", c.MasterKeyID, "blocks", len(c.Seeds))
	}
	return nil
}

// reseals lists, in commands of at most domain.ResealSeedsMax, the seeds
// of blocks not yet closed that only an older master key opens, sealed
// again under the Sealer's key: once they are recorded, the old key can
// be destroyed. It reads the ledger before the loop runs.
func (w *Writer) reseals() ([]domain.ResealSeeds, error) {
	var out []domain.ResealSeeds
	ids := slices.Sorted(maps.Keys(w.ledger.Blocks))
	for _, id := range ids {
		b := w.ledger.Blocks[id]
		if b.State == domain.BlockStateClosed {
			continue
		}
		sealed, moved, err := w.cfg.Sealer.Reseal(b.SealedSeed, b.Commitment.SeedHash)
		if err != nil {
			return nil, fmt.Errorf("block %s: %w", b.ID, err)
		}
		if !moved {
			continue
		}
		if len(out) == 0 || len(out[len(out)-1].Seeds) == domain.ResealSeedsMax {
			out = append(out, domain.ResealSeeds{MasterKeyID: w.cfg.Sealer.KeyID()})
		}
		last := &out[len(out)-1]
		last.Seeds = append(last.Seeds, domain.ResealedSeed{Block: b.ID, SealedSeed: sealed})
	}
	return out, nil
}

// reopenDeck unseals the seed of a block not yet closed and, unless the
// ledger it started from has it, rebuilds its deck.
func (w *Writer) reopenDeck(b *domain.Block) error {
	if w.ledger.DeckOf(b) == nil {
		deck, seed, err := OpenDeck(&w.cfg, b)
		if err != nil {
			return err
		}
		w.ledger.AttachDeck(deck)
		w.seeds[b.Commitment.SeedHash] = seed
		return nil
	}
	seed, err := w.cfg.Sealer.Unseal(b.SealedSeed, b.Commitment.SeedHash)
	if err != nil {
		return fmt.Errorf("block %s: %w", b.ID, err)
	}
	w.seeds[b.Commitment.SeedHash] = seed
	return nil
}

// OpenDeck unseals a block's seed, rebuilds its deck (about a second of
// CPU for a full block) and checks it against the commitment published
// when the block opened. A standby opens the decks of the blocks that open
// while it follows, so that taking over costs none.
func OpenDeck(cfg *Config, b *domain.Block) (*domain.Deck, domain.Seed, error) {
	seed, err := cfg.Sealer.Unseal(b.SealedSeed, b.Commitment.SeedHash)
	if err != nil {
		return nil, domain.Seed{}, fmt.Errorf("block %s: %w", b.ID, err)
	}
	table, err := cfg.Rules.Table(b.Price)
	if err != nil {
		return nil, domain.Seed{}, fmt.Errorf("block %s: %w", b.ID, err)
	}
	deck := domain.BuildDeck(table.LotCounts(), seed)
	if deck.Commitment != b.Commitment {
		return nil, domain.Seed{}, fmt.Errorf("block %s: rebuilt deck commits to root %x, BlockOpened says %x", b.ID, deck.Commitment.Root, b.Commitment.Root)
	}
	return deck, seed, nil
}

// LastSeq returns the stream sequence of the last event the writer knows
// committed.
func (w *Writer) LastSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastSeq
}

// Execute decides a command and waits until its events are durable. It
// returns a *domain.Error for a refusal (nothing recorded), ErrStopped once
// the writer has stopped, or the context's error.
func (w *Writer) Execute(ctx context.Context, cmd domain.Command) (Result, error) {
	if w.cfg.Personal == nil {
		return w.execute(ctx, cmd)
	}
	// Sealed here, in the caller's goroutine: a person's first key is
	// made in the store, never in the loop that serves every player.
	sealed, err := domain.SealCommand(cmd, w.cfg.Personal)
	if err == nil {
		err = w.erasable(ctx, cmd, sealed)
	}
	if err != nil {
		return Result{}, w.keysUnreachable(err)
	}
	res, err := w.execute(ctx, sealed)
	if err == nil {
		err = w.destroyErased(ctx, cmd, sealed, res)
	}
	return res, err
}

func (w *Writer) execute(ctx context.Context, cmd domain.Command) (Result, error) {
	if c, ok := cmd.(domain.CreateEmission); ok && c.First == nil {
		// Building a deck takes about a second: do it here, in the
		// caller's goroutine, not in the loop that serves every player.
		p, err := w.prepare(c.Price)
		if err != nil {
			return Result{}, err
		}
		c.First = p
		cmd = c
	}
	ctx, span := tracer.Start(ctx, "writer.execute")
	defer span.End()
	// Naming the command costs a formatting: only for a span kept.
	if span.IsRecording() {
		span.SetAttributes(commandAttr(cmd))
	}
	res, err := w.submit(ctx, request{ctx: ctx, cmd: cmd, reply: make(chan reply, 1)})
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return res, err
}

// keysUnreachable answers a command whose personal fields could not be
// sealed: a refusal as it is, anything else (the data keys' bucket
// between two leaders, a timeout) as not ready, since nothing is recorded
// and the same command, sent again, goes through once the bucket answers.
func (w *Writer) keysUnreachable(err error) error {
	if _, refused := errors.AsType[*domain.Error](err); refused {
		return err
	}
	w.cfg.Logger.Warn("a command's personal fields could not be sealed: answered not ready", "err", err)
	return fmt.Errorf("%w: the data keys cannot be reached: %w", ErrNotReady, err)
}

// Personal seals personal fields and destroys data keys: the keyring
// (personal.Keyring) the writer shares with the readers of its process.
type Personal interface {
	domain.PersonalSealer
	// Erasable records whose a data key is, so that Destroy finds the
	// entry naming it as the person's from the key's id alone.
	Erasable(ctx context.Context, keyID string, o domain.Owner) error
	// Destroy destroys a data key and the entry naming it as o's (or as
	// the person's Erasable recorded); a key gone already is no error.
	Destroy(ctx context.Context, keyID string, o domain.Owner) error
	// Holds reports whether the store still holds a data key.
	Holds(ctx context.Context, keyID string) (bool, error)
}

// erasable prepares the data key of a proposed erasure for its
// destruction by its id alone: the approval names only the key, and a
// staff subject never reaches the stream.
func (w *Writer) erasable(ctx context.Context, orig, sealed domain.Command) error {
	c, ok := sealed.(domain.ErasePersonalData)
	if !ok || c.KeyID == "" {
		return nil
	}
	o := orig.(domain.ErasePersonalData)
	return w.cfg.Personal.Erasable(ctx, c.KeyID, domain.Owner{Player: o.Player, Subject: o.Subject})
}

// destroyErased destroys data keys once the erasures naming them are
// durable: after an approval, every key of an erasure the ledger keeps
// that the bucket still holds (this one's, and any an earlier failure
// left); after a proposal for a player erased already, which records
// nothing, the key the proposal named (a data keys bucket restored from
// before the erasure holds it again). The key goes after the event, so
// that a key is never destroyed without the stream saying whose and why.
func (w *Writer) destroyErased(ctx context.Context, orig, sealed domain.Command, res Result) error {
	// The erasure is recorded whatever the caller does now.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyTimeout)
	defer cancel()
	switch c := sealed.(type) {
	case domain.ApproveErasure:
		// Not ready rather than failed: the approval, asked again, is
		// answered as recorded and finishes the destruction.
		if err := w.finishErasures(ctx); err != nil {
			return fmt.Errorf("%w: erasure recorded, but its data key is not destroyed yet: approve it again to finish (the writer also does when it next opens or records an erasure): %w", ErrNotReady, err)
		}
	case domain.ErasePersonalData:
		if c.KeyID == "" || len(res.Events) > 0 || res.Replay != nil {
			return nil
		}
		o := orig.(domain.ErasePersonalData)
		if err := w.cfg.Personal.Destroy(ctx, c.KeyID, domain.Owner{Player: o.Player, Subject: o.Subject}); err != nil {
			return fmt.Errorf("the data key %s of an erased player is not destroyed: %w", c.KeyID, err)
		}
	}
	return nil
}

// finishErasures destroys the data keys of the erasures the ledger keeps
// (approved within the idempotency window) that the bucket still holds.
// It takes the ledger's list between two commands and waits until every
// event applied by then is durable: an erasure still committing may yet
// fail, and its key must outlive it then.
func (w *Writer) finishErasures(ctx context.Context) error {
	var keys []domain.ErasedKey
	var tail *appendDone
	if err := w.Inspect(ctx, func(l *domain.Ledger) { keys, tail = l.ErasedKeys(), w.tail }); err != nil {
		return err
	}
	select {
	case <-tailDone(tail):
	case <-ctx.Done():
		return ctx.Err()
	}
	if tail != nil && tail.err != nil {
		return tail.err
	}
	var errs []error
	for _, k := range keys {
		held, err := w.cfg.Personal.Holds(ctx, k.KeyID)
		if err == nil && held {
			if err = w.cfg.Personal.Destroy(ctx, k.KeyID, domain.Owner{Player: k.Player}); err == nil {
				w.cfg.Logger.Info("data key of an erasure destroyed", "key_id", k.KeyID)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("data key %s: %w", k.KeyID, err))
		}
	}
	return errors.Join(errs...)
}

// tracer makes the writer's spans: a command's wait for the loop, its
// decision and its commit, so that a slow answer shows where it waited.
// It does nothing unless serve was given an OTLP endpoint.
var tracer = otel.Tracer("github.com/fdj/tresor/settlement")

// commandAttr names a command's type for a span: never its fields, which
// name players and amounts.
func commandAttr(cmd domain.Command) attribute.KeyValue {
	return attribute.String("tresor.command", strings.TrimPrefix(fmt.Sprintf("%T", cmd), "domain."))
}

// Inspect runs fn on the writer's loop with its ledger, between two
// commands: fn sees a consistent state and must neither keep nor change it.
// The state includes events still committing.
func (w *Writer) Inspect(ctx context.Context, fn func(*domain.Ledger)) error {
	_, err := w.submit(ctx, request{ctx: ctx, inspect: fn, reply: make(chan reply, 1)})
	return err
}

// submit queues a request for the loop and waits for its reply.
func (w *Writer) submit(ctx context.Context, r request) (Result, error) {
	select {
	case w.reqs <- r:
	case <-w.done:
		return Result{}, w.Err()
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	select {
	case rep := <-r.reply:
		return rep.res, rep.err
	case <-w.exited:
		// The loop has stopped and every append it started has answered:
		// a reply is there now or never.
		select {
		case rep := <-r.reply:
			return rep.res, rep.err
		default:
			return Result{}, w.Err()
		}
	case <-ctx.Done():
		// The command may still commit; the caller retries with its
		// idempotency key to learn the outcome.
		return Result{}, ctx.Err()
	}
}

// prepare makes a block ready to open at a price: a fresh seed from the
// system's CSPRNG, its deck and commitment, and the seed sealed.
func (w *Writer) prepare(price domain.Amount) (*domain.PreparedBlock, error) {
	table, err := w.cfg.Rules.Table(price)
	if err != nil {
		return nil, &domain.Error{Code: domain.CodeInvalidStake, Message: err.Error()}
	}
	seed, err := domain.GenerateSeed()
	if err != nil {
		return nil, err
	}
	sealed, err := w.cfg.Sealer.Seal(seed)
	if err != nil {
		return nil, err
	}
	return &domain.PreparedBlock{Seed: seed, SealedSeed: sealed, Deck: domain.BuildDeck(table.LotCounts(), seed)}, nil
}

// Close stops the loop after the commands already queued and waits for
// their appends to finish.
func (w *Writer) Close() error {
	w.fail(ErrStopped)
	w.cancel()
	w.wg.Wait()
	return nil
}

// Done is closed once the writer has stopped for good: closed, or failed on
// an append. A service that cannot write any more should exit and let its
// supervisor restart it: the restart rebuilds the state from the stream.
func (w *Writer) Done() <-chan struct{} { return w.done }

// Err returns why the writer stopped (wrapping ErrStopped), nil while it
// runs.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopErr
}

// fail stops the writer for good with err.
func (w *Writer) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopErr == nil {
		if !errors.Is(err, ErrStopped) {
			err = fmt.Errorf("%w: %w", ErrStopped, err)
		}
		w.stopErr = err
		close(w.done)
	}
}

func (w *Writer) loop(ctx context.Context) {
	defer w.wg.Done()
	sweep := time.NewTicker(w.cfg.SweepEvery)
	defer sweep.Stop()
	w.prepareNext()
	for {
		select {
		case r := <-w.reqs:
			if r.inspect != nil {
				r.inspect(w.ledger)
				r.reply <- reply{}
				continue
			}
			w.handle(r.ctx, r.cmd, r.reply)
		case p := <-w.prepCh:
			delete(w.preparing, p.emission)
			if p.err != nil {
				w.cfg.Logger.Error("prepare next block", "emission", p.emission, "err", p.err)
				continue
			}
			w.seeds[p.block.Deck.Commitment.SeedHash] = p.block.Seed
			w.ledger.Prepare(p.emission, p.block)
		case <-sweep.C:
			w.sweep()
		case <-ctx.Done():
			w.drain()
			w.appends.Wait()
			w.drain()
			close(w.exited)
			return
		}
	}
}

// drain answers the commands still queued once the writer stops.
func (w *Writer) drain() {
	for {
		select {
		case r := <-w.reqs:
			r.reply <- reply{err: w.Err()}
		default:
			return
		}
	}
}

// handle decides one command, applies its events to the ledger and hands
// them to the log; the reply goes out when they are durable.
func (w *Writer) handle(ctx context.Context, cmd domain.Command, out chan<- reply) {
	if err := w.Err(); err != nil {
		out <- reply{err: err}
		return
	}
	if c, ok := cmd.(domain.CreateEmission); ok && c.First != nil {
		// Its seed is needed to close the block: keep it with the others.
		w.seeds[c.First.Deck.Commitment.SeedHash] = c.First.Seed
	}
	if c, ok := cmd.(domain.CloseBlock); ok {
		b := w.ledger.Blocks[c.Block]
		if b != nil {
			c.Seed = w.seeds[b.Commitment.SeedHash]
		}
		cmd = c
	}
	_, decide := tracer.Start(ctx, "writer.decide")
	now := w.now()
	d, err := domain.Decide(w.ledger, now, cmd)
	if err != nil || d.Replay != nil || len(d.Events) == 0 {
		decide.End()
		w.answerAfterTail(out, reply{res: Result{Replay: d.Replay}, err: err})
		return
	}
	recs := make([]Record, len(d.Events))
	for i, e := range d.Events {
		if err := w.ledger.Evolve(now, e); err != nil {
			// The decider produced an event the ledger cannot apply: a
			// bug. Stop before anything inconsistent is written.
			w.fail(fmt.Errorf("apply %s: %w", e.EventType(), err))
			out <- reply{err: w.Err()}
			return
		}
		recs[i] = Record{Event: e, At: now}
		if c, ok := e.(*domain.BlockClosed); ok {
			delete(w.seeds, c.Seed.Hash())
		}
	}
	// The ledger already holds these events: the append must go through
	// whatever happens to the request, so it does not take the request's
	// context (a caller that gives up learns the outcome by retrying).
	tail := &appendDone{done: make(chan struct{}), recs: recs}
	w.tail = tail
	if w.snap != nil {
		w.snap.push(tail)
	}
	decide.End()
	_, commit := tracer.Start(ctx, "writer.commit", trace.WithAttributes(attribute.Int("tresor.events", len(recs))))
	w.appends.Add(1)
	// The answer is sent from the log's callback: out is buffered, so
	// nothing there blocks, and no goroutine waits per command.
	w.log.Append(context.WithoutCancel(ctx), recs, func(r AppendResult) {
		defer w.appends.Done()
		defer close(tail.done)
		defer commit.End()
		if r.Err != nil {
			commit.SetStatus(codes.Error, r.Err.Error())
			w.fail(fmt.Errorf("append %s: %w", d.Events[0].EventType(), r.Err))
			tail.err = w.Err()
			out <- reply{err: tail.err}
			return
		}
		tail.seqs = r.Seqs
		commit.SetAttributes(attribute.Int64("tresor.seq.first", int64(r.Seqs[0])), attribute.Int64("tresor.seq.last", int64(r.Seqs[len(r.Seqs)-1])))
		w.mu.Lock()
		if s := r.Seqs[len(r.Seqs)-1]; s > w.lastSeq {
			w.lastSeq = s
		}
		w.mu.Unlock()
		out <- reply{res: Result{Events: d.Events, Seqs: r.Seqs, Commit: r.Commit}}
	})
	w.prepareNext()
}

// answerAfterTail sends the answer of a command that recorded nothing (a
// refusal, the retry of a remembered key, a throw already made) once every
// append handed to the log before it is durable. Such an answer was decided
// on the ledger, which applies events before they are durable: a retry must
// not report a deposit, a play or a throw that is still committing (and
// might never commit), nor a refusal that only a committing event explains.
// Appends commit in order and a failed one fails every later one, so the
// last append's outcome is all that needs waiting for; if it failed, the
// answer is the writer's stop, never the answer decided on lost events.
func (w *Writer) answerAfterTail(out chan<- reply, r reply) {
	tail := w.tail
	select {
	case <-tailDone(tail):
		out <- w.afterTail(tail, r)
		return
	default:
	}
	w.appends.Add(1)
	go func() {
		defer w.appends.Done()
		<-tail.done
		out <- w.afterTail(tail, r)
	}()
}

// afterTail is the answer r once tail is done: the tail's failure, the
// writer's stop if it may no longer answer (Config.MayAnswer), or r at the
// position it was decided on (the tail's callback raised lastSeq before it
// closed done).
func (w *Writer) afterTail(tail *appendDone, r reply) reply {
	if tail != nil && tail.err != nil {
		return reply{err: tail.err}
	}
	if w.cfg.MayAnswer != nil {
		if err := w.cfg.MayAnswer(); err != nil {
			return reply{err: fmt.Errorf("%w: %w", ErrStopped, err)}
		}
	}
	r.res.At = w.LastSeq()
	return r
}

// closedDone is a closed channel: the tail of a writer that has appended
// nothing yet.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func tailDone(t *appendDone) <-chan struct{} {
	if t == nil {
		return closedDone
	}
	return t.done
}

// now returns the writer's clock, never earlier than the last event: the
// ledger's rolling windows need time to run forward.
func (w *Writer) now() time.Time {
	now := w.cfg.Clock().UTC()
	if now.Before(w.ledger.Now) {
		return w.ledger.Now
	}
	return now
}

// prepareNext starts preparing, off the loop, the next block of every
// emission that has one left and none ready, so that it opens in the same
// batch as the sale that exhausts the block before it.
func (w *Writer) prepareNext() {
	for _, id := range w.ledger.NextToPrepare() {
		if w.preparing[id] {
			continue
		}
		w.preparing[id] = true
		price := w.ledger.Emissions[id].Price
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			p, err := w.prepare(price)
			select {
			case w.prepCh <- prepared{emission: id, block: p, err: err}:
			case <-w.done:
			}
		}()
	}
}

// sweep completes the plays abandoned for longer than AbandonAfter and
// closes the sold-out blocks whose plays have all settled, revealing their
// seeds.
func (w *Writer) sweep() {
	now := w.now()
	for id, p := range w.ledger.Plays {
		if now.Sub(p.LastActivity) >= w.cfg.AbandonAfter {
			w.system(domain.CompletePlay{Play: id})
		}
	}
	for id, b := range w.ledger.Blocks {
		if b.State == domain.BlockStateExhausted && b.InPlay == 0 {
			w.system(domain.CloseBlock{Block: id})
		}
	}
}

// system executes a command of the writer's own and logs its failure: no
// caller waits for it, and a silent failure would leave a play unsettled or
// a seed unrevealed.
func (w *Writer) system(cmd domain.Command) {
	out := make(chan reply, 1)
	w.handle(context.Background(), cmd, out)
	w.appends.Add(1)
	go func() {
		defer w.appends.Done()
		if r := <-out; r.err != nil {
			w.cfg.Logger.Error("system command failed", "command", fmt.Sprintf("%T", cmd), "err", r.err)
		}
	}()
}
