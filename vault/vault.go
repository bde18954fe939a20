package vault

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/eventstore"
)

// Defaults and limits of the vault's loop.
const (
	// TickDefault is how often the vault probes the source, looks for a
	// fork at its last position and finishes a round of checks.
	TickDefault = time.Second
	// SealOverdueDefault is how long events may wait for a seal: the
	// writer seals at least every minute while events arrive.
	SealOverdueDefault = 5 * time.Minute
	// UnreachableAfterDefault is how long the source may fail the probes
	// before the alarm: a NATS reconnect takes less.
	UnreachableAfterDefault = 3 * time.Second
	// BatchEventsDefault is the most events of a batch of the copy on a
	// server of stock limits: nats-server's default max_batch_size.
	BatchEventsDefault = eventstore.BatchEventsMax
	// heldBatchesMax bounds the events the vault holds unsent, in batches,
	// while a comparison with the source that must come first fails: it
	// stops reading the source past them.
	heldBatchesMax = 4
	// roundEventsMax bounds the events checked between two saved states.
	roundEventsMax = 100_000
	// probeTimeout bounds each request of a probe to the source.
	probeTimeout = 5 * time.Second
	// saveEvery is how often the auditor's state is saved: encoding it
	// costs as much as checking thousands of events, and a round ends
	// every second and at every seal.
	saveEvery = 5 * time.Second
)

// Config configures a Vault.
type Config struct {
	// Source is the operator's stream, opened read-only. When nil, Run
	// opens it with OpenSource, trying again every tick while it does not
	// answer (the alarm source_unreachable meanwhile): a vault started
	// during the operator's outage waits for it rather than exit.
	Source     *eventstore.NATSStore
	OpenSource func(context.Context) (*eventstore.NATSStore, error)
	// Copy is the vault's own stream, opened to write (Tresor's stream
	// configuration: no delete, no purge).
	Copy *eventstore.NATSStore
	// SyncCopy, when set, puts on disk every event the copy's server has
	// stored: that server then need not sync each write, and the copy is
	// written as plain messages (eventstore.NATSStore.ReappendPlainAsync),
	// which it stores once where it stages an atomic batch and stores it
	// again. A batch counts as in the copy once SyncCopy returned after
	// its server stored it (on the copier's goroutine, beside the checks),
	// and an append a crash cut short at the copy's end is completed from
	// the source at the next start. When nil, the copy is written in
	// atomic batches, which its server syncs.
	SyncCopy func() error
	// StateFile is where the auditor's state is saved after each round of
	// checks; PositionFile where the vault's own position (its last
	// verified seal) is. Both are the regulator's, in the vault's data
	// directory.
	StateFile, PositionFile string
	// Audit configures the auditor (rules, the operator's seal key).
	Audit audit.Config
	// Tick, SealOverdue and UnreachableAfter: the defaults above when 0.
	Tick, SealOverdue, UnreachableAfter time.Duration
	// BatchEventsMax (BatchEventsDefault when 0) is the most events of one
	// batch of the copy: its server's max_batch_size, which refuses a larger
	// batch whole. It is at least eventstore.BatchEventsMax, the most one
	// append holds, and at most eventstore.CommitBatchEventsMax. CopyDepth
	// (1 when 0) is how many batches may be committing at once.
	BatchEventsMax, CopyDepth int
	// Logger gets the alarms and the vault's progress (slog.Default when
	// nil).
	Logger *slog.Logger
	// Metrics, when set, gets the status at every tick.
	Metrics *Metrics
	// CosignKey, when set, signs the head of every seal verified (a
	// Cosignature), appended to CosignFile.
	CosignKey  ed25519.PrivateKey
	CosignFile string
}

// Vault follows the operator's stream into its copy and verifies it.
type Vault struct {
	cfg Config
	log *slog.Logger

	a *audit.Auditor
	// copyLast is the copy's last sequence; verified the last one a round
	// of checks finished; round counts the events checked since.
	copyLast, verified uint64
	round              int
	lastRound          time.Time
	// heads are the chains' last events in the copy, which the next
	// event of each must link to.
	heads map[string]eventstore.Head
	// pending are the events received and not yet handed to the copier.
	pending []eventstore.RecordedEvent
	// copier sends the batches to the copy; inFlight are those handed to
	// it and not yet known committed, oldest first: copyLast counts them,
	// verified never does.
	copier   *copier
	inFlight []*copyBatch
	// torn are the events of an append cut short at the copy's end (a
	// crash between its plain messages), not verified: the source is
	// followed from the first of them, and the append completed.
	torn []eventstore.RecordedEvent
	// seals are the seals checked in this round; lastSeal the last one
	// verified.
	seals    []sealSeen
	lastSeal uint64
	// unsealedSince is when the vault received unsealedSeq, the first
	// event after the last seal (zero: none); overdueLogged is set once
	// its alarm is logged.
	unsealedSince time.Time
	unsealedSeq   uint64
	overdueLogged bool
	report        *audit.Report
	reported      map[audit.Violation]bool

	sourceSeq        uint64
	sourceUp         bool
	unreachable      bool
	unreachableSince time.Time
	// seen are the source's last sequences as they became known, with
	// when, oldest first, back to the first the vault has not verified:
	// the age of the oldest unverified event is the age of the first.
	seen []seenAt
	// halted says why the vault stopped copying ("" while it copies): a
	// fork, a gap or an unreadable event of the source.
	halted string
	gaps   []audit.Violation
	// shortAt is the first sequence the copy holds and the source no
	// longer does, 0 while the source reaches the copy's end.
	shortAt uint64
	forks   []Fork

	cosigner *cosigner
	// saver writes the state and position of a round, savedAt is when
	// the last was handed to it (zero: the next round's is saved).
	saver   *saver
	savedAt time.Time

	mu        sync.Mutex
	published *Status
}

// New returns a vault; Run runs it.
func New(cfg Config) (*Vault, error) {
	if (cfg.Source == nil && cfg.OpenSource == nil) || cfg.Copy == nil || cfg.StateFile == "" || cfg.PositionFile == "" {
		return nil, errors.New("vault: a source (or how to open it), a copy, a state file and a position file are required")
	}
	if cfg.Tick == 0 {
		cfg.Tick = TickDefault
	}
	if cfg.SealOverdue == 0 {
		cfg.SealOverdue = SealOverdueDefault
	}
	if cfg.UnreachableAfter == 0 {
		cfg.UnreachableAfter = UnreachableAfterDefault
	}
	if cfg.BatchEventsMax == 0 {
		cfg.BatchEventsMax = BatchEventsDefault
	}
	cfg.CopyDepth = max(cfg.CopyDepth, 1)
	if cfg.Tick < 0 || cfg.SealOverdue < 0 || cfg.UnreachableAfter < 0 {
		return nil, fmt.Errorf("vault: negative tick %s, seal overdue %s or unreachable after %s", cfg.Tick, cfg.SealOverdue, cfg.UnreachableAfter)
	}
	if cfg.BatchEventsMax < eventstore.BatchEventsMax || cfg.BatchEventsMax > eventstore.CommitBatchEventsMax {
		return nil, fmt.Errorf("vault: %d events a batch, want %d..%d", cfg.BatchEventsMax, eventstore.BatchEventsMax, eventstore.CommitBatchEventsMax)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	now := time.Now()
	v := &Vault{cfg: cfg, log: log, heads: map[string]eventstore.Head{}, reported: map[audit.Violation]bool{},
		lastRound: now, published: &Status{}}
	if cfg.CosignKey != nil {
		if cfg.CosignFile == "" || len(cfg.CosignKey) != ed25519.PrivateKeySize {
			return nil, errors.New("vault: a cosignature key of Ed25519 and a file to write cosignatures to are required together")
		}
		var err error
		if v.cosigner, err = openCosigner(cfg.CosignKey, cfg.CosignFile); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Run resumes the vault from its copy and saved state, then follows the
// source until ctx ends, and saves its state. It returns an error when
// the copy cannot be written or contradicts the saved state: an alarm
// about the source never stops it.
func (v *Vault) Run(ctx context.Context) (err error) {
	v.saver = startSaver(v.cfg.StateFile, v.cfg.PositionFile)
	defer func() { err = errors.Join(err, v.saver.close()) }()
	v.copier = startCopier(v.cfg.Copy, v.cfg.CopyDepth, v.cfg.SyncCopy)
	defer v.copier.close()
	if err := v.resume(ctx); err != nil {
		return err
	}
	if !v.openSource(ctx) {
		return v.stop()
	}
	v.compareAtStart(ctx)
	v.probe(ctx)
	v.publish()
	// The source is read up to two batches ahead of the copy.
	events := make(chan eventstore.RecordedEvent, 2*v.cfg.BatchEventsMax)
	followed := make(chan error, 1)
	fctx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	if v.halted == "" {
		from := v.copyLast + 1 - len64(v.torn)
		go func() { followed <- v.follow(fctx, from, events) }()
	}
	tick := time.NewTicker(v.cfg.Tick)
	defer tick.Stop()
	for {
		// Events held back by a comparison that failed are not joined by
		// more past a bound: the tick tries again.
		in := events
		if v.holding() {
			in = nil
		}
		select {
		case <-ctx.Done():
			return v.stop()
		case ev := <-in:
			if err := v.receive(ctx, ev, events); err != nil {
				return err
			}
		case err := <-followed:
			v.followStopped(err)
		case <-tick.C:
			if err := v.tick(ctx); err != nil {
				return err
			}
		}
		if v.halted != "" {
			stopFollowing()
		}
	}
}

// follow reads the source from sequence from on (the copy's end, or the
// first event of an append cut short there), riding through lost
// connections, and hands each event on.
func (v *Vault) follow(ctx context.Context, from uint64, out chan<- eventstore.RecordedEvent) error {
	return eventstore.FollowResuming(ctx, v.cfg.Source, from, func(ev eventstore.RecordedEvent) error {
		select {
		case out <- ev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, func(err error) { v.log.Debug("vault: following the source again", "err", err) })
}

// followStopped records why following the source ended: a gap or an event
// it cannot read, which halts the copy; a stop asked for says nothing.
func (v *Vault) followStopped(err error) {
	if err == nil || errors.Is(err, context.Canceled) || v.halted != "" {
		return
	}
	seq := v.copyLast - len64(v.torn) + len64(v.pending) + 1
	code := audit.CodeMalformedEvent
	if errors.Is(err, eventstore.ErrGap) {
		code = audit.CodeSequenceGap
	}
	viol := audit.Violation{Sequence: seq, Code: code, Subject: "source stream", Expected: fmt.Sprintf("the event at sequence %d", seq), Found: err.Error()}
	v.gaps = append(v.gaps, viol)
	v.halted = string(code)
	v.log.Error("vault: alarm: the source cannot be copied past this position; copying stopped", "sequence", seq, "code", code, "err", err)
	v.publish()
}

// receive takes an event of the source and those queued behind it, and
// appends them to the copy once they end an append and the queue is
// empty, or before an append that would not fit in their batch.
func (v *Vault) receive(ctx context.Context, ev eventstore.RecordedEvent, queue <-chan eventstore.RecordedEvent) error {
	for {
		if err := v.take(ctx, ev); err != nil {
			return err
		}
		if v.holding() {
			return nil
		}
		select {
		case ev = <-queue:
			continue
		default:
		}
		if n := len(v.pending); n > 0 && v.pending[n-1].AppendRemaining == 0 {
			return v.flush(ctx)
		}
		return nil
	}
}

// take adds an event of the source to the pending ones, once those are
// sent when the append it begins would make their batch larger than the
// copy's server takes.
func (v *Vault) take(ctx context.Context, ev eventstore.RecordedEvent) error {
	if n := len(v.pending); n > 0 && v.pending[n-1].AppendRemaining == 0 && n+ev.AppendRemaining+1 > v.cfg.BatchEventsMax {
		if err := v.flush(ctx); err != nil {
			return err
		}
	}
	if v.halted != "" {
		return nil
	}
	v.pending = append(v.pending, ev)
	v.sawSource(ev.Sequence)
	if v.cfg.Metrics != nil {
		v.cfg.Metrics.sourceRead.Inc()
	}
	return nil
}

// holding reports whether the vault holds as many events unsent as it
// may: a comparison with the source that must come before them failed.
func (v *Vault) holding() bool {
	return len(v.pending) >= heldBatchesMax*v.cfg.BatchEventsMax
}

// seenAt is a sequence of the source and when the vault learned of it.
type seenAt struct {
	seq uint64
	at  time.Time
}

// seenMax bounds the sequences remembered for the lag: past it, every
// other one is dropped, which coarsens the figure, never loses its start.
const seenMax = 4096

// sawSource records that the source holds sequence seq now.
func (v *Vault) sawSource(seq uint64) {
	if seq <= v.sourceSeq && v.sourceSeq != 0 {
		return
	}
	v.sourceSeq = seq
	if len(v.seen) == seenMax {
		for i := 1; i < len(v.seen)/2; i++ {
			v.seen[i] = v.seen[2*i]
		}
		v.seen = v.seen[:len(v.seen)/2]
	}
	v.seen = append(v.seen, seenAt{seq: seq, at: time.Now()})
}

// lag returns how long ago the vault learned of the oldest event it has
// not verified yet, 0 when it has verified all it knows of.
func (v *Vault) lag(now time.Time) time.Duration {
	i := 0
	for i < len(v.seen) && v.seen[i].seq <= v.verified {
		i++
	}
	v.seen = v.seen[i:]
	if len(v.seen) == 0 {
		return 0
	}
	return now.Sub(v.seen[0].at)
}

// len64 is len as a sequence count.
func len64[T any](s []T) uint64 { return uint64(len(s)) }

// isNotExist is errors.Is(err, fs.ErrNotExist).
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
