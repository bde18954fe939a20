package eventstore

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// CommitterConfig configures group commit for one chain. Zero fields take
// the documented defaults.
type CommitterConfig struct {
	// QueueMax bounds requests waiting to be batched (default 65 536).
	// Submit blocks, bounded by its context, while the queue is full.
	QueueMax int
	// BatchEventsMax bounds the events of one batch, seal included
	// (default BatchEventsMax, the server's default max_batch_size; at most
	// CommitBatchEventsMax). Whatever the depth, fewer than recentMax
	// events are ever unacknowledged, so that a seal names a head a
	// verifier accepts: a batch that would pass it waits.
	// Above BatchEventsMax the server's max_batch_size must allow it (the
	// embedded server's does), or every batch is refused and the committer
	// stops. One request still holds at most BatchEventsMax-1 events.
	BatchEventsMax int
	// AggregateCacheMax bounds the per-aggregate last sequences the
	// committer remembers to check expectations (default 100 000); past it
	// the cache is dropped and refilled from the server on demand.
	AggregateCacheMax int
	// LingerMax bounds how long a free sender waits for the writers it has
	// just answered to submit again (default 10ms, and never more than half
	// the last batch's commit time). A JetStream atomic batch costs
	// milliseconds, so when many writers wait on answers, sending at once
	// would split them into two groups that alternate, each paying a full
	// commit. After each acknowledgement the committer expects the events
	// it held plus the events it answered, and sends when 90% of them are
	// there or the wait is over. A lone writer never waits: its one request
	// is all that is expected.
	LingerMax time.Duration
	// LingerIdle ends that wait early once no request has come for this
	// long since the acknowledgement or the last request (default 1ms):
	// the writers that were going to submit again have done so, and a
	// lull at low load no longer costs a command the rest of LingerMax.
	LingerIdle time.Duration
	// PipelineDepth bounds the batches in flight at once (default 1, at
	// most PipelineDepthMax). 1 sends a batch only once the previous one is
	// acknowledged, fenced on the sequence that acknowledgement gave. Above
	// 1 the next batch goes while earlier ones commit, fenced on the
	// sequence the previous one will end on: if that one fails, the fence
	// fails too and nothing commits out of order. The prediction counts on
	// the chain being the only writer of its stream (Tresor's writer: one
	// chain, one stream); another chain's appends on the same stream shift
	// the sequences and stop the committer with ErrFenced, so a stream
	// shared by chains takes depth 1. A replicated stream (Replicas > 1)
	// refuses a batch fenced on a subject while the batch before it on that
	// subject is still being replicated (nats-server 2.12's batch checks),
	// so NewCommitter refuses depth > 1 on one (ErrInvalid).
	PipelineDepth int
	// SealKey signs Seal events; nil disables seals. Once the chain has
	// rotated its seal key, the committer signs with whichever of SealKey
	// and SealKeyNext the last rotation named, and refuses to start
	// (ErrSealKeyRetired) with neither.
	SealKey ed25519.PrivateKey
	// SealKeyNext is the key the chain's seals go to: NewCommitter rotates
	// to it (RotateSealKey) before it returns, unless the chain rotated to
	// it already and the operator has not yet made it SealKey. Rotating at
	// start keeps key handling out of the API: whoever can place a key
	// file on the writer's host and restart it rotates, nobody else.
	SealKeyNext ed25519.PrivateKey
	// Revocations are revocations of retired seal keys NewCommitter
	// appends (RevokeSealKey) after any rotation, unless the chain holds
	// them already: a compromise stays on the writer's configuration, and
	// every start finds it recorded.
	Revocations []Revocation
	// SealEvery seals after this many events (default 10 000).
	SealEvery int
	// SealInterval seals at least this often while events arrive
	// (default 1 minute).
	SealInterval time.Duration
	// HighWater, when set, keeps the position of each acknowledged batch
	// outside the stream, written before the batch is answered; and
	// NewCommitter checks the stream against the mark it holds, with
	// Evidence, before it starts (see startHead).
	HighWater HighWater
	// Evidence lists further positions the stream must hold: the newest
	// snapshots' manifests (snapshot.Bucket.Evidence).
	Evidence []Evidence
	// StartReadMax, when set, bounds the reads of NewCommitter's start
	// (the chain's head, the evidence, the last seal) together, below the
	// store's RequestTimeout: a caller that tries again at once (a
	// cluster node taking over) learns sooner that a read was sent into a
	// leader's election and got no answer.
	StartReadMax time.Duration
	// MaySend, when set, is asked before each batch is sent; an error stops
	// the committer with it, the batch unsent. A writer on a lease passes
	// its lease's validity, so that a process frozen past its lease (and
	// resumed) sends nothing; the chain's fencing covers the instant
	// between the check and the send.
	MaySend func() error
}

func (c *CommitterConfig) setDefaults() error {
	if c.QueueMax == 0 {
		c.QueueMax = 65536
	}
	if c.BatchEventsMax == 0 {
		c.BatchEventsMax = BatchEventsMax
	}
	if c.AggregateCacheMax == 0 {
		c.AggregateCacheMax = 100_000
	}
	if c.SealEvery == 0 {
		c.SealEvery = 10_000
	}
	if c.SealInterval == 0 {
		c.SealInterval = time.Minute
	}
	if c.LingerMax == 0 {
		c.LingerMax = 10 * time.Millisecond
	}
	if c.LingerIdle == 0 {
		c.LingerIdle = time.Millisecond
	}
	if c.PipelineDepth == 0 {
		c.PipelineDepth = 1
	}
	if c.PipelineDepth < 1 || c.PipelineDepth > PipelineDepthMax || c.QueueMax < 1 || c.BatchEventsMax < 2 || c.BatchEventsMax > CommitBatchEventsMax ||
		c.AggregateCacheMax < 1 ||
		c.SealEvery < 1 || c.SealInterval <= 0 || c.LingerMax < 0 || c.LingerIdle < 0 || (c.SealKey != nil && len(c.SealKey) != ed25519.PrivateKeySize) ||
		(c.SealKeyNext != nil && (c.SealKey == nil || len(c.SealKeyNext) != ed25519.PrivateKeySize)) {
		return fmt.Errorf("committer config %+v: %w", *c, ErrInvalid)
	}
	return nil
}

// PipelineDepthMax bounds CommitterConfig.PipelineDepth well below
// nats-server's limit of 50 atomic batches in flight per stream.
const PipelineDepthMax = 16

// AppendResult answers one submitted request.
type AppendResult struct {
	// Sequences are the stream sequences of the request's events, in order.
	Sequences []uint64
	// Err is nil on success; otherwise nothing of the request was written
	// (or, for ErrOutcomeUnknown, it is not known).
	Err error
	// Timing splits the request's time in the committer; set on success.
	Timing AppendTiming
}

// AppendTiming is where an acknowledged request spent its time in the
// committer: together, from Submit to its answer.
type AppendTiming struct {
	// Queued is from Submit to joining a batch: the committer's loop was
	// busy (hashing, encoding, answering) or the batch was full.
	Queued time.Duration
	// Held is from joining a batch to its handover to the sender: waiting
	// for the batch in flight (at depth 1, or for a full pipeline) and the
	// linger (CommitterConfig.LingerMax).
	Held time.Duration
	// Committed is from the handover to the acknowledgement: the server's
	// commit (its fsync) and the round trip.
	Committed time.Duration
}

// Committer merges concurrent append requests of one chain into atomic
// batches: group commit. Each request is an atomic unit; the committer
// keeps up to PipelineDepth batches in flight and builds the next one
// meanwhile.
//
// Ordering: requests are batched in the order Submit enqueued them, and
// batches commit in that order, each fenced on where the previous one ends,
// so if Submit(a) returned
// before Submit(b) was called, a's events precede b's in the stream. A
// request refused for its own expectations does not stop the others; any
// batch failure stops the committer and fails every later request, so a
// request never commits after an earlier one failed that way.
type Committer interface {
	// Submit enqueues req and returns at once (unless the queue is full:
	// then it waits, bounded by ctx) with a channel that receives exactly
	// one AppendResult. Result errors: *ConflictError (ErrConflict) when
	// one of req's expectations fails, nothing of req written; ErrFenced
	// when another writer moved the chain; ErrOutcomeUnknown when a batch's
	// acknowledgement was lost (and for the batches in flight behind it);
	// ErrIntegrity when a batch was acknowledged behind a refused one (the
	// chain forks there: see PipelineDepth); ErrInvalid, *SchemaError for a bad request;
	// ErrClosed after Close; ctx.Err() if ctx ends before the request is
	// enqueued.
	Submit(ctx context.Context, req AppendRequest) <-chan AppendResult
	// SubmitFunc is Submit with a callback instead of a channel: done is
	// called exactly once with the result, on the committer's goroutine
	// (or on the caller's, for a request refused before it is enqueued),
	// so it must be quick and must not block. A writer with thousands of
	// commands in flight then needs no goroutine per command to wait.
	SubmitFunc(ctx context.Context, req AppendRequest, done func(AppendResult))
	// Head is the chain head as of the last acknowledged batch.
	Head() Head
	// Stats counts the batches acknowledged so far.
	Stats() CommitterStats
	// Err is the error that stopped the committer, nil while it runs.
	Err() error
	// Close commits what was submitted, stops, and returns Err().
	Close() error
	// RotateSealKey hands the chain's seals over to next: once nothing is
	// in flight, it appends a SealKeyRotated event signed by the current
	// key and by next, and every later seal is next's. It returns the
	// event's stream sequence once acknowledged. Errors: ErrInvalid
	// without seals or for a key the chain used already, and those of
	// Submit.
	RotateSealKey(ctx context.Context, next ed25519.PrivateKey) (uint64, error)
	// RevokeSealKey appends a SealKeyRevoked event signed by the current
	// key: the retired key's seals from the given position no longer
	// count. It returns ErrInvalid for a key that is not retired in the
	// chain, a position after its retirement or a missing reason, and
	// the errors of Submit.
	RevokeSealKey(ctx context.Context, r Revocation) (uint64, error)
	// Abort stops the committer with err without sending anything more (a
	// batch already sent may still land): every request not yet sent, and
	// every later one, fails with err, and Close writes no closing seal. A
	// writer that lost its lease aborts, so that it stops appending before
	// another node takes the chain over.
	Abort(err error)
}

// CommitterStats counts what a committer has committed since it started:
// a report divides them (events per batch, commit time per batch).
type CommitterStats struct {
	// Batches counts the acknowledged batches.
	Batches uint64
	// Events counts their events, seals included.
	Events uint64
	// CommitTime sums, over those batches, the time from their handover to
	// the sender to their acknowledgement (queueing behind the batches in
	// flight included).
	CommitTime time.Duration
}

// pending is one submitted request on its way through the committer.
type pending struct {
	req   AppendRequest
	key   *keyOp // a seal-key event, built by the loop
	done  func(AppendResult)
	recs  int       // index of its first event in the batch
	at    time.Time // when it was submitted
	added time.Time // when it joined a batch
}

// batch is a built, hashed batch on its way to the sender. Once the loop
// has its acknowledgement (or failure) and has answered its members, the
// batch is no longer referenced by the sender or the waiter, and the loop
// reuses it for a later batch (loopState.free): its arrays, and its
// messages with their header maps.
type batch struct {
	recs    []RecordedEvent
	msgs    []*nats.Msg // recs encoded, built with them
	vals    []string    // the values of msgs' envelope headers
	members []*pending
	sentAt  time.Time // when the loop handed it to the sender
}

// flight is a batch the sender published, on its way to the waiter.
type flight struct {
	b       *batch
	fence   uint64
	batchID string
	reply   chan *nats.Msg // the server's answer to the commit
	subject string         // where that answer comes
	due     time.Time      // when to stop waiting for it
	err     error          // not published: this error instead
	// moved is closed when the way to the stream's leader moves after
	// the batch was published (leaderMoves).
	moved <-chan struct{}
	// settling is set for a batch published less than movedSettle after
	// the last move: its answer is awaited that long at most.
	settling bool
}

// sentState is shared by the sender and the waiter: what the waiter has
// learnt, which the sender's next fence depends on.
type sentState struct {
	mu        sync.Mutex
	ackedEnd  uint64 // stream sequence the last acknowledged batch ended on
	ackedRecs uint64 // events sent up to and including that batch
	failed    error  // the first failure: publish nothing more
	waiting   map[string]chan *nats.Msg
}

// sent is a batch after its commit attempt.
type sent struct {
	b    *batch
	seqs []uint64
	err  error
}

type committer struct {
	store *NATSStore
	chain string
	cfg   CommitterConfig

	mu      sync.RWMutex // guards closed against Submit's send
	closed  bool
	reqs    chan *pending
	toSend  chan *batch
	flights chan *flight
	acks    chan sent
	abort   chan error
	done    chan struct{} // closed when the loop has exited

	inbox   string // prefix of the subjects the server answers commits on
	replies *nats.Subscription
	sent    sentState

	// keys is the chain's seal keys as the loop knows them; only the
	// loop reads or changes them once it runs.
	keys SealKeyHistory

	stateMu sync.Mutex
	head    Head  // acknowledged head
	err     error // first fatal error
	stats   CommitterStats
}

// NewCommitter implements Store.
func (s *NATSStore) NewCommitter(ctx context.Context, chain string, cfg CommitterConfig) (Committer, error) {
	if err := ValidateChain(chain); err != nil {
		return nil, err
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("new committer for chain %s: %w", chain, err)
	}
	if s.cfg.ReadOnly {
		return nil, fmt.Errorf("new committer for chain %s: %w", chain, ErrReadOnly)
	}
	if cfg.PipelineDepth > 1 && s.cfg.Replicas > 1 {
		return nil, fmt.Errorf("new committer for chain %s: pipeline depth %d on a stream of %d replicas: %w",
			chain, cfg.PipelineDepth, s.cfg.Replicas, ErrInvalid)
	}
	rctx := ctx
	if cfg.StartReadMax > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, cfg.StartReadMax)
		defer cancel()
	}
	head, err := s.startHead(ctx, rctx, chain, &cfg)
	if err != nil {
		return nil, fmt.Errorf("new committer for chain %s: %w", chain, err)
	}
	var seal sealMark
	var keys SealKeyHistory
	if cfg.SealKey != nil {
		if seal, err = s.lastSeal(rctx, chain); err != nil {
			return nil, fmt.Errorf("new committer for chain %s: %w", chain, err)
		}
		if keys, err = s.SealKeys(rctx, chain); err != nil {
			return nil, fmt.Errorf("new committer for chain %s: %w", chain, err)
		}
		if cfg.SealKey, err = keys.pick(&cfg); err != nil {
			return nil, fmt.Errorf("new committer for chain %s: %w", chain, err)
		}
	}
	c := &committer{
		store:   s,
		chain:   chain,
		cfg:     cfg,
		reqs:    make(chan *pending, cfg.QueueMax),
		toSend:  make(chan *batch),
		flights: make(chan *flight, cfg.PipelineDepth),
		acks:    make(chan sent, 1),
		abort:   make(chan error, 1),
		done:    make(chan struct{}),
		head:    head,
		keys:    keys,
		inbox:   s.nc.NewInbox(),
		sent:    sentState{ackedEnd: head.Sequence, waiting: map[string]chan *nats.Msg{}},
	}
	// One subscription takes every commit answer; a late answer to a batch
	// the waiter gave up on finds no one waiting and is dropped.
	c.replies, err = s.nc.Subscribe(c.inbox+".*", func(m *nats.Msg) {
		c.sent.mu.Lock()
		ch, ok := c.sent.waiting[m.Subject]
		delete(c.sent.waiting, m.Subject)
		c.sent.mu.Unlock()
		if ok {
			ch <- m
		}
	})
	if err != nil {
		return nil, fmt.Errorf("new committer for chain %s: subscribe to commit answers: %w", chain, err)
	}
	go c.send()
	go c.await()
	go c.loop(head, seal)
	if err := c.startKeys(ctx, cfg, keys); err != nil {
		c.Abort(err)
		_ = c.Close()
		return nil, fmt.Errorf("new committer for chain %s: %w", chain, err)
	}
	return c, nil
}

// startKeys appends, before the committer takes a request, the rotation
// to cfg.SealKeyNext and the revocations of cfg.Revocations that the
// chain's key events (keys) do not hold yet.
func (c *committer) startKeys(ctx context.Context, cfg CommitterConfig, keys SealKeyHistory) error {
	if next := cfg.SealKeyNext; next != nil && !next.Equal(cfg.SealKey) {
		if _, err := c.RotateSealKey(ctx, next); err != nil {
			return fmt.Errorf("rotate to its next seal key: %w", err)
		}
	}
	for _, r := range cfg.Revocations {
		if keys.revoked(r) {
			continue
		}
		if _, err := c.RevokeSealKey(ctx, r); err != nil {
			return fmt.Errorf("revoke seal key %s: %w", r.KeyID, err)
		}
	}
	return nil
}

// refuse answers p with err: nothing of it was written (or, for
// ErrOutcomeUnknown, it is not known). An acknowledged request is
// answered in acked, with its sequences and timing.
func refuse(p *pending, err error) {
	p.done(AppendResult{Err: err})
}

// Submit implements Committer.
func (c *committer) Submit(ctx context.Context, req AppendRequest) <-chan AppendResult {
	result := make(chan AppendResult, 1)
	c.SubmitFunc(ctx, req, func(r AppendResult) { result <- r })
	return result
}

// SubmitFunc implements Committer.
func (c *committer) SubmitFunc(ctx context.Context, req AppendRequest, done func(AppendResult)) {
	p := &pending{req: req, done: done, at: time.Now()}
	// An append never exceeds what a reader accepts (its marker counts at
	// most BatchEventsMax-1 events after the first), whatever the batch.
	if err := c.store.validateRequest(c.chain, &req, min(c.cfg.BatchEventsMax, BatchEventsMax)-1); err != nil {
		refuse(p, err)
		return
	}
	c.enqueue(ctx, p)
}

// enqueue hands p to the loop, or refuses it on a closed committer or
// when ctx ends first.
func (c *committer) enqueue(ctx context.Context, p *pending) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		refuse(p, fmt.Errorf("submit to chain %s: %w", c.chain, ErrClosed))
		return
	}
	select {
	case c.reqs <- p:
	case <-ctx.Done():
		refuse(p, fmt.Errorf("submit to chain %s: %w", c.chain, ctx.Err()))
	}
}

// RotateSealKey implements Committer.
func (c *committer) RotateSealKey(ctx context.Context, next ed25519.PrivateKey) (uint64, error) {
	if len(next) != ed25519.PrivateKeySize {
		return 0, fmt.Errorf("rotate the seal key of chain %s: a key of %d bytes: %w", c.chain, len(next), ErrInvalid)
	}
	return c.keyEvent(ctx, &keyOp{next: next})
}

// RevokeSealKey implements Committer.
func (c *committer) RevokeSealKey(ctx context.Context, r Revocation) (uint64, error) {
	return c.keyEvent(ctx, &keyOp{revoke: r})
}

// keyEvent has the loop append op's event and waits for its outcome. The
// loop answers every request it takes, so the wait ends with the
// committer's.
func (c *committer) keyEvent(ctx context.Context, op *keyOp) (uint64, error) {
	result := make(chan AppendResult, 1)
	c.enqueue(ctx, &pending{key: op, at: time.Now(), done: func(r AppendResult) { result <- r }})
	r := <-result
	if r.Err != nil {
		return 0, r.Err
	}
	return r.Sequences[0], nil
}

// Head implements Committer.
func (c *committer) Head() Head {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.head
}

// Stats implements Committer.
func (c *committer) Stats() CommitterStats {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.stats
}

// Err implements Committer.
func (c *committer) Err() error {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.err
}

// Close implements Committer.
func (c *committer) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.reqs)
	}
	c.mu.Unlock()
	<-c.done
	return c.Err()
}

// send publishes batches in the loop's order without waiting for their
// answers (the loop bounds how many are in flight). Each is fenced on the
// sequence the previous one will end on: the end of the last acknowledged
// batch plus the events sent since. At depth 1 nothing is sent since, so
// the fence is the acknowledged sequence itself. After a failure it
// publishes nothing more and passes batches on with that failure.
func (c *committer) send() {
	var sentRecs uint64
	for b := range c.toSend {
		var refused error
		if c.cfg.MaySend != nil {
			refused = c.cfg.MaySend()
		}
		c.sent.mu.Lock()
		f := &flight{b: b, fence: c.sent.ackedEnd + sentRecs - c.sent.ackedRecs, err: c.sent.failed}
		if f.err == nil {
			f.err = refused
		}
		if f.err == nil {
			f.subject = fmt.Sprintf("%s.%d", c.inbox, sentRecs)
			f.reply = make(chan *nats.Msg, 1)
			c.sent.waiting[f.subject] = f.reply
		}
		c.sent.mu.Unlock()
		sentRecs += uint64(len(b.recs))
		if f.err == nil {
			var movedAt time.Time
			f.moved, movedAt = c.store.moves.next()
			wait := c.store.cfg.RequestTimeout
			if f.settling = time.Since(movedAt) < movedSettle; f.settling {
				wait = min(wait, movedSettle)
			}
			f.due = time.Now().Add(wait)
			f.batchID, f.err = c.store.publishBatch(c.chain, f.fence, b.recs, b.msgs, f.subject)
		}
		c.flights <- f
	}
	close(c.flights)
}

// await collects the answers of published batches in order and reports
// them to the loop. Once a batch failed, the batches in flight behind it
// fail with its error: their fences expected it to land. One of them
// acknowledged all the same means the earlier batch's outcome was unknown
// (then it did land: the later fence held) or that another writer ended
// the chain exactly where it was predicted to end, a fork reported as
// ErrIntegrity.
func (c *committer) await() {
	var failed error
	var ackedRecs uint64
	for f := range c.flights {
		seqs, err := c.outcome(f, failed != nil)
		switch {
		case failed != nil && err != nil:
			err = failed
		case failed != nil && !errors.Is(failed, ErrOutcomeUnknown):
			err = fmt.Errorf("commit to chain %s: batch at %d acknowledged after a failed one (%v): %w",
				c.chain, seqs[0], failed, ErrIntegrity)
		case err != nil && errors.Is(err, ErrConflict):
			err = fmt.Errorf("commit to chain %s: %w: %w", c.chain, ErrFenced, err)
		}
		ackedRecs += uint64(len(f.b.recs))
		c.sent.mu.Lock()
		if err == nil {
			c.sent.ackedEnd, c.sent.ackedRecs = seqs[len(seqs)-1], ackedRecs
		} else if c.sent.failed == nil {
			c.sent.failed = err
		}
		c.sent.mu.Unlock()
		if err != nil && failed == nil {
			failed = err
		}
		if err != nil {
			seqs = nil
		}
		c.acks <- sent{b: f.b, seqs: seqs, err: err}
	}
	close(c.acks)
}

// outcome waits, until the store's RequestTimeout after its publication,
// for the server's answer to a published batch and interprets it. Behind a
// failed batch, a missing answer is not looked for on the stream: the
// batch fails with the earlier one's error whatever became of it.
func (c *committer) outcome(f *flight, behindFailure bool) ([]uint64, error) {
	if f.reply == nil {
		return nil, f.err
	}
	var ack *jetstreamext.BatchAck
	err := f.err
	if err == nil {
		ack, err = c.answer(f)
	}
	c.sent.mu.Lock()
	delete(c.sent.waiting, f.subject)
	c.sent.mu.Unlock()
	if behindFailure && ack == nil {
		return nil, err
	}
	return c.store.batchOutcome(context.Background(), c.chain, f.fence, f.b.recs, ack, err)
}

// answer waits for the server's answer to a published batch, until its due
// time or movedGrace after the way to the stream's leader moved. An answer
// that nobody serves the stream's subjects (its leader stepped down, the
// next one not yet elected) is returned once the way moves, or at the due
// time: what became of the batch is then read from the new leader, where a
// read sent into the election would wait out the whole RequestTimeout.
func (c *committer) answer(f *flight) (*jetstreamext.BatchAck, error) {
	t := time.NewTimer(time.Until(f.due))
	defer t.Stop()
	moved := f.moved
	var leaderless error
	for {
		select {
		case m := <-f.reply:
			ack, err := batchReply(m, f.batchID, len(f.b.recs))
			if !errors.Is(err, nats.ErrNoResponders) || moved == nil {
				return ack, err
			}
			leaderless = err
		case <-moved:
			if leaderless != nil {
				return nil, leaderless
			}
			moved = nil
			t.Reset(min(movedGrace, time.Until(f.due)))
		case <-t.C:
			if leaderless != nil {
				return nil, leaderless
			}
			if moved == nil || f.settling {
				return nil, fmt.Errorf("batch %s: no answer as the stream's leader changed or the connection came back: %w", f.batchID, nats.ErrTimeout)
			}
			return nil, fmt.Errorf("batch %s: no answer within %s: %w", f.batchID, c.store.cfg.RequestTimeout, nats.ErrTimeout)
		}
	}
}

// loopState is owned by the loop goroutine.
type loopState struct {
	tentative  Head                 // head after every built batch
	acked      Head                 // head after every acknowledged batch
	cache      map[Aggregate]uint64 // last committed sequence per aggregate
	inFlight   map[Aggregate]int    // events built but not yet acknowledged
	cur        *batch               // batch being built
	next       *pending             // request that did not fit in cur
	sealPos    uint64               // chain position of the last seal event
	sealedAt   uint64               // chain position of the last sealed head
	sealDue    bool                 // the interval elapsed
	inFlightN  int                  // batches handed to the sender, not acknowledged
	freeAt     time.Time            // when the last acknowledgement freed the sender
	arrivedAt  time.Time            // when the last request was added to a batch
	lastCommit time.Duration        // how long the last batch took to commit
	expected   int                  // events worth waiting for before sending (see LingerMax)
	failed     error                // fatal error: answer everything with it
	free       []*batch             // acknowledged batches, for reuse (newBatch)
}

// loop batches requests, hashes them onto the chain, hands batches to the
// sender and answers requests when their batch is acknowledged.
func (c *committer) loop(head Head, seal sealMark) {
	defer close(c.done)
	st := &loopState{tentative: head, acked: head, sealedAt: seal.sealedAt, sealPos: seal.pos,
		cache: map[Aggregate]uint64{}, inFlight: map[Aggregate]int{}}
	var tick <-chan time.Time
	if c.cfg.SealKey != nil {
		t := time.NewTicker(c.cfg.SealInterval)
		defer t.Stop()
		tick = t.C
	}
	lingerT := time.NewTimer(time.Hour)
	defer lingerT.Stop()
	reqs := c.reqs
	senderOpen := true
	for {
		if c.sealNow(st, reqs == nil) {
			c.addSeal(st)
		}
		if st.next != nil && st.failed == nil {
			if c.tryAdd(st, st.next) {
				st.next = nil
			}
		}
		var toSend chan *batch
		var linger <-chan time.Time
		if st.cur != nil && len(st.cur.recs) > 0 {
			now := time.Now()
			switch d, wait := sendNow(sendState{
				events: len(st.cur.recs), expected: st.expected, inFlight: st.inFlightN,
				full: st.next != nil || len(st.cur.recs) >= c.cfg.BatchEventsMax, closing: reqs == nil, spanFull: st.spanFull(),
				wait: min(min(c.cfg.LingerMax, st.lastCommit/2)-now.Sub(st.freeAt),
					c.cfg.LingerIdle-now.Sub(later(st.freeAt, st.arrivedAt))),
			}, c.cfg.PipelineDepth); d {
			case sendBatch:
				toSend = c.toSend
			case lingerBatch:
				lingerT.Reset(wait)
				linger = lingerT.C
			}
		}
		in := reqs
		if st.next != nil { // batch full: stop reading, push back on Submit
			in = nil
		}
		if reqs == nil && st.next == nil && toSend == nil && st.inFlightN == 0 {
			if senderOpen {
				close(c.toSend)
				senderOpen = false
			}
			// Drain the sender's close.
			for range c.acks {
			}
			// Every answer is in: the subscription has nothing left to take.
			_ = c.replies.Unsubscribe()
			return
		}
		select {
		case p, ok := <-in:
			if !ok {
				reqs = nil
				continue
			}
			if st.failed != nil {
				refuse(p, st.failed)
				continue
			}
			if !c.tryAdd(st, p) {
				st.next = p
			}
		case toSend <- st.cur:
			c.handedOver(st)
		case <-linger:
		case a := <-c.acks:
			c.onAck(st, a)
		case <-tick:
			st.sealDue = true
		case err := <-c.abort:
			c.fail(st, err)
		}
	}
}

// sealNow says whether to seal now, at the start of a fresh batch. A seal
// covers the acknowledged head; it is due after SealEvery events, when the
// interval elapsed, and on Close (closing) once nothing is in flight,
// provided some acknowledged events are not covered yet (unsealed).
func (c *committer) sealNow(st *loopState, closing bool) bool {
	if st.failed != nil || c.cfg.SealKey == nil || st.cur != nil || st.next != nil || !st.unsealed() {
		return false
	}
	return st.acked.ChainSeq-st.sealedAt >= uint64(c.cfg.SealEvery) || st.sealDue || (closing && st.inFlightN == 0)
}

// onAck takes a batch's acknowledgement (or failure): a full batch goes to
// the sender, which is waiting for it, before the acknowledged requests
// are answered; then the next linger expects the events held and
// answered.
func (c *committer) onAck(st *loopState, a sent) {
	st.inFlightN--
	st.lastCommit = time.Since(a.b.sentAt)
	if a.err == nil && st.failed == nil && st.cur != nil &&
		(st.next != nil || len(st.cur.recs) >= c.cfg.BatchEventsMax) {
		c.toSend <- st.cur
		c.handedOver(st)
	}
	c.acked(st, a)
	held := 0
	if st.cur != nil {
		held = len(st.cur.recs)
	}
	st.freeAt = time.Now()
	st.expected = min((held+len(a.b.recs))*9/10, c.cfg.BatchEventsMax)
	c.release(st, a.b)
}

// sendState is what decides whether the batch being built goes now.
type sendState struct {
	events   int  // events in the batch
	expected int  // events worth waiting for (see LingerMax)
	inFlight int  // batches sent and not acknowledged
	full     bool // the batch holds BatchEventsMax, or the next request does not fit
	closing  bool // Close was called: nothing more will come
	spanFull bool // one more batch could make a seal point back too far
	// wait is how much longer the linger may last (≤ 0: over).
	wait time.Duration
}

// sendDecision is what the loop does with the batch being built.
type sendDecision int

// The decisions; the zero value is none.
const (
	holdBatch   sendDecision = iota + 1 // wait for an acknowledgement (or a request)
	sendBatch                           // hand it to the sender now
	lingerBatch                         // wait for requests, at most the wait returned
)

// sendNow decides what becomes of the batch being built, at pipeline
// depth depth: the loop's one decision, kept apart so that a table tests
// it. A full or closing batch goes as soon as the pipeline and the seals'
// span allow; a partial one goes only when nothing is in flight, once the
// writers expected have submitted or the linger is over. Sending a partial
// batch behind others would split a busy server's load into small batches,
// each paying the server's per-batch cost: it waits for an
// acknowledgement instead, gathering what arrives meanwhile.
func sendNow(s sendState, depth int) (sendDecision, time.Duration) {
	switch {
	case s.inFlight >= depth, s.spanFull:
		return holdBatch, 0
	case s.full || s.closing:
		return sendBatch, 0
	case s.inFlight > 0:
		return holdBatch, 0
	case s.events >= s.expected || s.wait <= 0:
		return sendBatch, 0
	}
	return lingerBatch, s.wait
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Abort implements Committer.
func (c *committer) Abort(err error) {
	select {
	case c.abort <- err:
	default: // an abort is already on its way
	}
}

// newBatch opens an empty batch: an acknowledged one if there is one (see
// release), else a new one.
func (c *committer) newBatch(st *loopState) *batch {
	if n := len(st.free); n > 0 {
		b := st.free[n-1]
		st.free[n-1] = nil
		st.free = st.free[:n-1]
		return b
	}
	return &batch{recs: make([]RecordedEvent, 0, c.cfg.BatchEventsMax), msgs: make([]*nats.Msg, 0, c.cfg.BatchEventsMax),
		vals: make([]string, 0, envelopeHeaders*c.cfg.BatchEventsMax)}
}

// release keeps b, acknowledged (or failed) and its members answered, for
// a later batch. Only the loop holds it by then: the sender handed it to
// the waiter, which handed it to the loop with its outcome and let go of
// it. Its events and members are dropped, so that nothing of theirs stays
// reachable; its messages stay, their header maps to be cleared and reused
// by the next encoding (encodeMsgInto). At most as many batches as can be
// in flight, plus the one being built, are kept.
func (c *committer) release(st *loopState, b *batch) {
	if len(st.free) > c.cfg.PipelineDepth {
		return
	}
	clear(b.recs)
	clear(b.vals)
	clear(b.members)
	for _, m := range b.msgs {
		m.Data, m.Reply = nil, ""
	}
	b.recs, b.vals, b.members, b.msgs = b.recs[:0], b.vals[:0], b.members[:0], b.msgs[:0]
	b.sentAt = time.Time{}
	st.free = append(st.free, b)
}

// handedOver records that the current batch went to the sender.
func (c *committer) handedOver(st *loopState) {
	st.inFlightN++
	st.cur.sentAt = time.Now()
	st.cur = nil
}

// tryAdd checks p's expectations against the committer's own state and
// appends its events to the current batch. It returns false when p does
// not fit (the batch must go first); a refused request is answered.
func (c *committer) tryAdd(st *loopState, p *pending) bool {
	if p.key != nil {
		return c.tryAddKeyEvent(st, p)
	}
	if st.cur != nil && len(st.cur.recs)+len(p.req.Events) > c.cfg.BatchEventsMax {
		return false
	}
	if err := c.checkExpectations(st, &p.req); err != nil {
		refuse(p, err)
		return true
	}
	c.add(st, p)
	return true
}

// tryAddKeyEvent starts a batch with p's seal-key event once nothing is
// built or in flight, so that the event names the head just before it;
// until then it returns false and the loop reads no new request. Seals
// after a rotation are signed with the new key from the event on.
func (c *committer) tryAddKeyEvent(st *loopState, p *pending) bool {
	if st.cur != nil || st.inFlightN > 0 {
		return false
	}
	if c.cfg.SealKey == nil {
		refuse(p, fmt.Errorf("seal key event on chain %s without seals: %w", c.chain, ErrInvalid))
		return true
	}
	if err := c.keys.check(p.key, c.cfg.SealKey); err != nil {
		refuse(p, err)
		return true
	}
	ev, err := p.key.event(c.chain, st.acked, c.cfg.SealKey)
	if err != nil {
		refuse(p, err)
		return true
	}
	p.req.Events = []Event{ev}
	c.add(st, p)
	if next := p.key.next; next != nil {
		c.keys.Retired[KeyID(c.cfg.SealKey.Public().(ed25519.PublicKey))] = st.tentative.ChainSeq
		c.keys.Current = KeyID(next.Public().(ed25519.PublicKey))
		c.cfg.SealKey = next
	}
	return true
}

// add appends p's events to the current batch.
func (c *committer) add(st *loopState, p *pending) {
	if st.cur == nil {
		st.cur = c.newBatch(st)
	}
	p.recs = len(st.cur.recs)
	c.record(st, p.req.Events)
	st.arrivedAt = time.Now()
	p.added = st.arrivedAt
	st.cur.members = append(st.cur.members, p)
	for i := range p.req.Events {
		st.inFlight[p.req.Events[i].Aggregate]++
	}
}

// record links events after the tentative head into the current batch and
// encodes them, so that the sender only has to publish.
func (c *committer) record(st *loopState, events []Event) {
	first := len(st.cur.recs)
	st.cur.recs, st.tentative = c.store.record(c.chain, st.tentative, events, c.store.cfg.Now().UTC(), st.cur.recs)
	b := st.cur
	for i := first; i < len(b.recs); i++ {
		// A reused batch has a message from an earlier batch in this slot.
		var m *nats.Msg
		if n := len(b.msgs); n < cap(b.msgs) {
			m = b.msgs[:n+1][n]
		}
		if m == nil {
			m = new(nats.Msg)
		}
		b.vals = c.store.subj.encodeMsgInto(m, b.vals, &b.recs[i])
		b.msgs = append(b.msgs, m)
	}
}

// checkExpectations checks a request against the committer's view: the
// chain's tentative head, and per aggregate the last acknowledged sequence
// (an aggregate with events still in flight fails any expectation, since
// the caller cannot have seen their sequences).
func (c *committer) checkExpectations(st *loopState, req *AppendRequest) error {
	chainSubj := c.store.subj.chain(c.chain)
	if req.ExpectChain.set {
		if st.tentative.ChainSeq != st.acked.ChainSeq || req.ExpectChain.seq != st.acked.Sequence {
			return &ConflictError{Chain: c.chain, Subject: chainSubj, Expected: req.ExpectChain.seq, Actual: st.acked.Sequence}
		}
	}
	for _, e := range req.ExpectAggregates {
		subject := c.store.subj.event(c.chain, e.Aggregate)
		if st.inFlight[e.Aggregate] > 0 {
			return &ConflictError{Chain: c.chain, Subject: subject, Expected: e.LastSeq}
		}
		last, ok := st.cache[e.Aggregate]
		if !ok {
			m, err := c.store.lastMsg(context.Background(), subject)
			if err != nil {
				return fmt.Errorf("check expectation on %s: %w", subject, err)
			}
			if m != nil {
				last = m.Sequence
			}
			c.remember(st, e.Aggregate, last)
		}
		if last != e.LastSeq {
			return &ConflictError{Chain: c.chain, Subject: subject, Expected: e.LastSeq, Actual: last}
		}
	}
	return nil
}

func (c *committer) remember(st *loopState, agg Aggregate, seq uint64) {
	if len(st.cache) >= c.cfg.AggregateCacheMax {
		clear(st.cache)
	}
	st.cache[agg] = seq
}

// unsealed reports whether acknowledged events are not yet covered by a
// seal: events after the last seal, or events that were in flight when it
// was made (it seals the head acknowledged then, so they sit between that
// head and the seal itself). Sealing a head that is a seal covers them
// through the hash chain; a seal right after the head it seals needs none.
func (st *loopState) unsealed() bool {
	if st.acked.ChainSeq < st.sealPos {
		return false // the last seal is still in flight
	}
	return st.acked.ChainSeq > st.sealPos || st.sealedAt+1 < st.sealPos
}

// spanFull reports whether sending the batch being built would leave
// recentMax events or more unacknowledged: a seal made before the next
// acknowledgement would then name a head further back than a verifier
// accepts (full batches at depth 4 and more, or big batches at depth 2),
// and the audit would refuse it. Such a batch waits for an
// acknowledgement; alone in flight it always goes (a batch is at most
// CommitBatchEventsMax, below recentMax).
func (st *loopState) spanFull() bool {
	return st.inFlightN > 0 && st.tentative.ChainSeq-st.acked.ChainSeq >= recentMax
}

// addSeal starts a new batch with a Seal of the last acknowledged head.
func (c *committer) addSeal(st *loopState) {
	ev, err := newSeal(c.chain, st.acked, c.cfg.SealKey)
	if err != nil {
		c.fail(st, err)
		return
	}
	st.cur = c.newBatch(st)
	c.record(st, []Event{ev})
	st.sealedAt = st.acked.ChainSeq
	st.sealPos = st.tentative.ChainSeq
	st.sealDue = false
}

// acked answers the members of an acknowledged (or failed) batch.
func (c *committer) acked(st *loopState, a sent) {
	for _, p := range a.b.members {
		for i := range p.req.Events {
			agg := p.req.Events[i].Aggregate
			if st.inFlight[agg]--; st.inFlight[agg] <= 0 {
				delete(st.inFlight, agg)
			}
			if a.err == nil {
				c.remember(st, agg, a.seqs[p.recs+i])
			}
		}
	}
	if a.err != nil {
		c.fail(st, a.err)
		for _, p := range a.b.members {
			refuse(p, a.err)
		}
		return
	}
	last := a.b.recs[len(a.b.recs)-1]
	st.acked = Head{Sequence: a.seqs[len(a.seqs)-1], ChainSeq: last.ChainSeq, Hash: last.Hash}
	if c.cfg.HighWater != nil {
		// Before any answer: an acknowledged batch is always covered.
		c.cfg.HighWater.Advance(st.acked)
	}
	ackedAt := a.b.sentAt.Add(st.lastCommit)
	for _, p := range a.b.members {
		p.done(AppendResult{Sequences: a.seqs[p.recs : p.recs+len(p.req.Events)],
			Timing: AppendTiming{Queued: p.added.Sub(p.at), Held: a.b.sentAt.Sub(p.added), Committed: ackedAt.Sub(a.b.sentAt)}})
	}
	c.stateMu.Lock()
	c.head = st.acked
	c.stats.Batches++
	c.stats.Events += uint64(len(a.b.recs))
	c.stats.CommitTime += st.lastCommit
	c.stateMu.Unlock()
}

// fail stops the committer: the batch being built and every later request
// get err.
func (c *committer) fail(st *loopState, err error) {
	if st.failed != nil {
		return
	}
	st.failed = err
	c.stateMu.Lock()
	c.err = err
	c.stateMu.Unlock()
	if st.cur != nil {
		for _, p := range st.cur.members {
			refuse(p, err)
		}
		st.cur = nil
	}
	if st.next != nil {
		refuse(st.next, err)
		st.next = nil
	}
}
