package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// Limits of a feed's retries, so that none goes on without bound.
const (
	// refusedMax is how many times one message is refused before it is
	// poison.
	refusedMax = 3
	// backoffMin and backoffMax bound the wait between two attempts.
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Config configures a feed. Zero fields take the documented defaults.
type Config struct {
	// Name names the feed and its checkpoint, so that several feeds run
	// side by side. Required.
	Name string
	// Kinds are the message kinds published (default both).
	Kinds Kinds
	// From, when not 0, starts at this stream sequence instead of after
	// the checkpoint: a replay for a consumer that lost data.
	From uint64
	// UntilCaughtUp publishes up to the stream's last sequence at start,
	// then returns; otherwise the feed follows the stream until ctx ends.
	UntilCaughtUp bool
	// BatchMax bounds the messages of one publish (default 500): the
	// window a target confirms at once before the checkpoint moves.
	BatchMax int
	// QueueMax bounds the events read ahead of the publisher (default
	// 4096): past it the reader waits, which is the back-pressure on the
	// stream when the target is slow.
	QueueMax int
	// OutageMax is how long the target may stay unreachable before the
	// feed gives up (default 5m); a restarted feed resumes from its
	// checkpoint.
	OutageMax time.Duration
	// PublishTimeout bounds one publish, confirmation included (default
	// 30s).
	PublishTimeout time.Duration
	// Metrics, when not nil, receives position, head, lag, messages and
	// errors.
	Metrics *Metrics
	// Progress, when not nil, receives a status line every ProgressEvery
	// (default 10s) and a summary at the end.
	Progress      io.Writer
	ProgressEvery time.Duration
}

func (c *Config) setDefaults() error {
	if c.Name == "" {
		return errors.New("feed: empty name")
	}
	if c.Kinds == (Kinds{}) {
		c.Kinds = AllKinds
	}
	if c.BatchMax == 0 {
		c.BatchMax = 500
	}
	if c.QueueMax == 0 {
		c.QueueMax = 4096
	}
	if c.OutageMax == 0 {
		c.OutageMax = 5 * time.Minute
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 30 * time.Second
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 10 * time.Second
	}
	if c.BatchMax < 1 || c.BatchMax > 10_000 || c.QueueMax < 1 || c.QueueMax > 1_000_000 ||
		c.OutageMax < 0 || c.PublishTimeout < 0 || c.ProgressEvery < 0 {
		return fmt.Errorf("feed: batch %d (1 to 10000), queue %d (1 to 1000000) or a negative duration", c.BatchMax, c.QueueMax)
	}
	return nil
}

// Summary is what a feed did.
type Summary struct {
	// From is the first sequence read; To the checkpoint at the end.
	From, To uint64
	// Messages and Events count what was published and read.
	Messages, Events uint64
	// Errors counts failed publish attempts (each retried or fatal).
	Errors  uint64
	Elapsed time.Duration
}

// String is the one-line summary the command prints.
func (s Summary) String() string {
	rate := float64(s.Messages) / max(s.Elapsed.Seconds(), 1e-3) // float-ok: a rate
	return fmt.Sprintf("published %d messages for %d events (sequences %d to %d) in %s, %.0f msgs/s, %d errors; checkpoint %d",
		s.Messages, s.Events, s.From, s.To, s.Elapsed.Round(time.Millisecond), rate, s.Errors, s.To)
}

// item is one event read, with its message (nil when it gives none).
type item struct {
	seq       uint64
	remaining int // events of the same append after this one
	msg       *Message
}

// batch is what one publish covers: the messages of the events up to
// sequence to, which always ends an append.
type batch struct {
	msgs   []Message
	to     uint64
	events int
}

// feed is one run.
type feed struct {
	cfg    Config
	store  eventstore.Store
	target Target
	start  time.Time
	// position and head are read by the progress reporter.
	position, head, readSeq atomic.Uint64
	messages, errs          atomic.Uint64
}

// Run publishes the stream's money movements and settled plays to target
// from its checkpoint (or cfg.From), in stream order, until ctx ends or,
// with UntilCaughtUp, up to the stream's last sequence at start. It
// returns what it did and nil when ctx ended or it caught up; a
// *PoisonError for a message the target refuses for good; an error
// wrapping ErrFenced when another feed holds the name; or the read, decode
// or connection error (after OutageMax), everything before it checkpointed.
func Run(ctx context.Context, store eventstore.Store, target Target, cfg Config) (Summary, error) {
	if err := cfg.setDefaults(); err != nil {
		return Summary{}, err
	}
	f := &feed{cfg: cfg, store: store, target: target, start: time.Now()}
	checkpoint, err := target.Checkpoint(ctx)
	if err != nil {
		return Summary{}, fmt.Errorf("feed %s: read the checkpoint: %w", cfg.Name, err)
	}
	from := checkpoint + 1
	if cfg.From != 0 {
		from = cfg.From
	}
	f.position.Store(from - 1)
	sum := Summary{From: from, To: from - 1}
	last, err := store.LastSequence(ctx)
	if err != nil {
		return sum, fmt.Errorf("feed %s: %w", cfg.Name, err)
	}
	f.head.Store(last)
	if cfg.UntilCaughtUp && last < from {
		f.summarize(&sum)
		return sum, nil
	}

	rctx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	items := make(chan item, cfg.QueueMax)
	readErr := make(chan error, 1)
	go func() {
		defer close(items)
		readErr <- f.read(rctx, from, last, items)
	}()
	stopReport := f.report(rctx)
	defer stopReport()

	err = f.publishAll(ctx, items)
	stopRead()
	for range items { // let the reader see its context end
	}
	if rerr := <-readErr; err == nil && rerr != nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	stopReport()
	f.summarize(&sum)
	if err != nil {
		return sum, fmt.Errorf("feed %s: %w", cfg.Name, err)
	}
	return sum, nil
}

// summarize fills in what the run did and prints it.
func (f *feed) summarize(sum *Summary) {
	sum.To, sum.Messages, sum.Errors = f.position.Load(), f.messages.Load(), f.errs.Load()
	sum.Events, sum.Elapsed = sum.To-(sum.From-1), time.Since(f.start)
	if f.cfg.Progress != nil {
		fmt.Fprintf(f.cfg.Progress, "feed %s: %s\n", f.cfg.Name, *sum)
	}
}

// errCaughtUp stops the read of an UntilCaughtUp feed at its last event.
var errCaughtUp = errors.New("caught up")

// The read runs on two goroutines, so that reading the stream and checking
// and building what it read take two cores: the reader hands the events
// as stored, in chunks of up to chunkMax, through a channel of chunksMax
// chunks, to the builder, which checks each hash, builds the messages in
// stream order and hands them on to the publisher.
const (
	chunkMax  = 128
	chunksMax = 4
)

// read reads the stream from from into items, every event's hash checked:
// up to last with UntilCaughtUp, following the tail otherwise. Full
// channels block it: the stream is read no faster than the target
// confirms. The first error of either goroutine stops both.
func (f *feed) read(ctx context.Context, from, last uint64, items chan<- item) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	chunks := make(chan []eventstore.RecordedEvent, chunksMax)
	built := make(chan error, 1)
	go func() {
		err := f.build(ctx, chunks, items)
		if err != nil {
			stop()
		}
		built <- err
	}()
	chunk := make([]eventstore.RecordedEvent, 0, chunkMax)
	err := f.store.FollowStored(ctx, from, func(r eventstore.RecordedEvent) error {
		chunk = append(chunk, r)
		end := f.cfg.UntilCaughtUp && r.Sequence >= last
		// A chunk is handed on when full, at the end, and at the end of
		// an append at the head (where the next event may be long to
		// come); behind the head, the next events are already there.
		if len(chunk) == chunkMax || end || r.AppendRemaining == 0 && r.Sequence >= f.head.Load() {
			select {
			case chunks <- chunk:
			case <-ctx.Done():
				return ctx.Err()
			}
			chunk = make([]eventstore.RecordedEvent, 0, chunkMax)
		}
		if end {
			return errCaughtUp
		}
		return nil
	})
	close(chunks)
	if berr := <-built; berr != nil {
		return berr
	}
	if errors.Is(err, errCaughtUp) {
		return nil
	}
	return err
}

// build checks the hash of every event of chunks and turns them, in
// order, into items, until chunks is closed or ctx ends. An event that
// fails its hash check or does not decode is an error naming it: a feed
// never skips what it cannot read.
func (f *feed) build(ctx context.Context, chunks <-chan []eventstore.RecordedEvent, items chan<- item) error {
	b := newBuilder(f.cfg.Kinds, f.store)
	for chunk := range chunks {
		for i := range chunk {
			r := &chunk[i]
			if err := eventstore.CheckHash(r); err != nil {
				return fmt.Errorf("read %s: %w", r.ID, err)
			}
			m, err := b.build(ctx, *r)
			if err != nil {
				return fmt.Errorf("event %d (%s %s): %w", r.Sequence, r.Type, r.ID, err)
			}
			f.readSeq.Store(r.Sequence)
			select {
			case items <- item{seq: r.Sequence, remaining: r.AppendRemaining, msg: m}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// publishAll takes batches from items and publishes them until items is
// closed (the reader is done) or ctx ends.
func (f *feed) publishAll(ctx context.Context, items <-chan item) error {
	for {
		b, ok := f.collect(ctx, items)
		if b.events > 0 {
			if err := f.publish(ctx, b); err != nil {
				return err
			}
		}
		if !ok {
			return nil
		}
	}
}

// collect takes what has arrived, up to BatchMax messages or 16 events a
// message, waiting only for the first event and for the rest of an append
// begun: a batch always ends an append (an append holds at most 1 000
// events, the event store's limit), so a target's transaction never holds
// part of a command. ok is false once items is closed or ctx ended; a
// batch cut short by ctx is dropped, to be read again by the next run.
func (f *feed) collect(ctx context.Context, items <-chan item) (b batch, ok bool) {
	eventsMax := 16 * f.cfg.BatchMax
	var last item
	for {
		var it item
		switch {
		case b.events == 0 || last.remaining > 0:
			select {
			case it, ok = <-items:
			case <-ctx.Done():
				return batch{}, false
			}
		case len(b.msgs) >= f.cfg.BatchMax || b.events >= eventsMax:
			return b, true
		default:
			select {
			case it, ok = <-items:
			default:
				return b, true
			}
		}
		if !ok {
			return b, false
		}
		last = it
		b.events++
		b.to = it.seq
		if it.msg != nil {
			b.msgs = append(b.msgs, *it.msg)
		}
	}
}

// publish publishes a batch, retrying while the target is unreachable (up
// to OutageMax) and, when it refuses the batch, one message at a time to
// find the one it refuses for good.
func (f *feed) publish(ctx context.Context, b batch) error {
	// A publish under way is finished even when ctx ends, within
	// PublishTimeout: stopping then leaves nothing half done.
	pctx := context.WithoutCancel(ctx)
	var outage time.Time
	refused := 0
	wait := backoffMin
	for {
		tctx, cancel := context.WithTimeout(pctx, f.cfg.PublishTimeout)
		started := time.Now()
		err := f.target.Publish(tctx, b.msgs, b.to)
		cancel()
		if err == nil {
			f.done(b, time.Since(started))
			return nil
		}
		f.errs.Add(1)
		switch {
		case errors.Is(err, ErrFenced):
			return err
		case errors.Is(err, ErrRefused):
			f.cfg.Metrics.failed(f.cfg.Name, "refused")
			if len(b.msgs) > 1 {
				return f.publishEach(ctx, b)
			}
			if refused++; refused >= refusedMax {
				m := b.msgs[0]
				return &PoisonError{Seq: m.Seq, EventID: m.EventID, EventType: m.EventType, Kind: m.Kind, UUID: m.UUID, Err: err}
			}
		default:
			f.cfg.Metrics.failed(f.cfg.Name, "unreachable")
			if outage.IsZero() {
				outage = started
			}
			if time.Since(outage) >= f.cfg.OutageMax {
				return fmt.Errorf("target unreachable for %s, checkpoint %d: %w", f.cfg.OutageMax, f.position.Load(), err)
			}
		}
		if ctx.Err() != nil {
			return nil // stopping: the checkpoint says where to resume
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
		wait = min(2*wait, backoffMax)
	}
}

// publishEach publishes a refused batch one message at a time, each
// checkpointed at its own event: those before a poison message are
// published, and the poison one is named.
func (f *feed) publishEach(ctx context.Context, b batch) error {
	for i, m := range b.msgs {
		to := m.Seq
		if i == len(b.msgs)-1 {
			to = b.to
		}
		if err := f.publish(ctx, batch{msgs: []Message{m}, to: to, events: 1}); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

// done records a confirmed batch.
func (f *feed) done(b batch, took time.Duration) {
	f.position.Store(b.to)
	f.messages.Add(uint64(len(b.msgs)))
	f.cfg.Metrics.published(f.cfg.Name, b, took)
	f.cfg.Metrics.at(f.cfg.Name, b.to, max(f.head.Load(), f.readSeq.Load()))
}

// report polls the stream's head every second for the metrics and prints
// a status line every ProgressEvery; the returned function stops it.
func (f *feed) report(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(min(time.Second, f.cfg.ProgressEvery))
		defer tick.Stop()
		next := time.Now().Add(f.cfg.ProgressEvery)
		var lastMsgs uint64
		lastAt := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if head, err := f.store.LastSequence(ctx); err == nil {
					f.head.Store(head)
				}
				pos, head := f.position.Load(), max(f.head.Load(), f.readSeq.Load())
				f.cfg.Metrics.at(f.cfg.Name, pos, head)
				if f.cfg.Progress == nil || now.Before(next) {
					continue
				}
				next = now.Add(f.cfg.ProgressEvery)
				msgs := f.messages.Load()
				rate := float64(msgs-lastMsgs) / max(now.Sub(lastAt).Seconds(), 1e-3) // float-ok: a rate
				lastMsgs, lastAt = msgs, now
				fmt.Fprintf(f.cfg.Progress, "feed %s: position %d, head %d, lag %d events, %d messages (%.0f msgs/s), %d errors\n",
					f.cfg.Name, pos, head, head-min(head, pos), msgs, rate, f.errs.Load())
			}
		}
	}()
	return func() { cancel(); <-done }
}
