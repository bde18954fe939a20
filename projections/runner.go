package projections

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// switchesMax bounds how many times in a row, without applying a batch in
// between, a Runner follows its store to a rebuilt copy before giving up:
// one switch per rebuild is the norm.
const switchesMax = 3

// Runner keeps a Store up to date with a Source: it reads from the store's
// checkpoint, gathers what the source has delivered into batches, and
// applies them in order. A batch holds whole appends only: the events one
// command committed together become visible together, and the checkpoint
// only ever sits at the end of an append. Reading and applying overlap
// through a bounded queue, so a batch fills while the previous one commits,
// and an idle stream flushes each append at once.
type Runner struct {
	src      Source
	store    Store
	batchMax int
	progress func(applied uint64)
	applied  atomic.Uint64
	// sealed is the sequence of the last Seal of the hash chain this
	// Runner applied.
	sealed atomic.Uint64
}

// RunnerOption configures a Runner.
type RunnerOption func(*Runner)

// WithBatchMax sets how many records a batch gathers before it only
// completes its last append (1 to BatchMax; BatchMax by default).
func WithBatchMax(n int) RunnerOption {
	return func(r *Runner) {
		if n >= 1 && n <= BatchMax {
			r.batchMax = n
		}
	}
}

// WithProgress calls fn with the checkpoint after each applied batch, from
// the Runner's goroutine: rebuilds show progress with it.
func WithProgress(fn func(applied uint64)) RunnerOption {
	return func(r *Runner) { r.progress = fn }
}

// NewRunner returns a runner that feeds store from src.
func NewRunner(src Source, store Store, opts ...RunnerOption) *Runner {
	r := &Runner{src: src, store: store, batchMax: BatchMax}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Run applies the stream to the store from its checkpoint and follows the
// tail until ctx ends (it returns ctx.Err()) or reading or applying fails
// (it returns that error; a restarted Runner resumes from the checkpoint,
// which covers exactly the batches applied).
func (r *Runner) Run(ctx context.Context) error { return r.run(ctx, 0) }

// RunTo applies the stream until the checkpoint reaches target, then returns
// nil. The checkpoint may end past target: at the end of the append target
// belongs to, which the stream's head always is.
func (r *Runner) RunTo(ctx context.Context, target uint64) error { return r.run(ctx, target) }

// Applied returns the last sequence the Runner applied (the store's
// checkpoint once Run has started).
func (r *Runner) Applied() uint64 { return r.applied.Load() }

// LastSeal returns the sequence of the last Seal (a record without a
// domain event) this Runner applied, 0 before the first: where the chain
// was last signed, as far as this process has read.
func (r *Runner) LastSeal() uint64 { return r.sealed.Load() }

// Lag is how far a projection is behind the stream.
type Lag struct {
	Applied uint64 `json:"applied"`
	Head    uint64 `json:"head"`
}

// Events returns how many events the projection has yet to apply.
func (l Lag) Events() uint64 {
	if l.Head <= l.Applied {
		return 0
	}
	return l.Head - l.Applied
}

// Lag reads the stream's head and returns it with the last applied
// sequence, for metrics.
func (r *Runner) Lag(ctx context.Context) (Lag, error) {
	head, err := r.src.Head(ctx)
	if err != nil {
		return Lag{}, fmt.Errorf("projection lag: %w", err)
	}
	return Lag{Applied: r.applied.Load(), Head: head}, nil
}

func (r *Runner) run(ctx context.Context, target uint64) error {
	for switches := 0; ; {
		cp, err := r.store.Checkpoint(ctx)
		if err != nil {
			return fmt.Errorf("projection runner: %w", err)
		}
		r.applied.Store(cp)
		if target > 0 && cp >= target {
			return nil
		}
		err = r.runFrom(ctx, cp, target)
		if !errors.Is(err, ErrSwitched) {
			return err
		}
		// A switch after progress is a new rebuild; only switches in a
		// row without a batch applied count towards the bound.
		if r.applied.Load() > cp {
			switches = 0
		}
		if switches++; switches > switchesMax {
			return err
		}
	}
}

// errReached stops the reader once the target is applied.
var errReached = errors.New("target reached")

func (r *Runner) runFrom(ctx context.Context, cp, target uint64) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	queue := make(chan Envelope, 2*r.batchMax)
	readErr := make(chan error, 1)
	go func() {
		defer close(queue)
		readErr <- r.src.Read(rctx, cp+1, func(env Envelope) error {
			select {
			case queue <- env:
				return nil
			case <-rctx.Done():
				return context.Cause(rctx)
			}
		})
	}()
	stop := func(err error) error {
		cancel(err)
		for range queue {
			// Drain so that the reader, blocked on a full queue, sees the
			// cancellation and ends.
		}
		return err
	}
	// A batch is at most batchMax records plus the rest of the append its
	// last one belongs to: fewer than batchMax+AppendMax, since
	// continuesAppend refuses an append longer than AppendMax.
	b := &batcher{queue: queue, max: r.batchMax, batch: make([]Envelope, 0, r.batchMax+AppendMax-1)}
	dropped := r.dropped()
	for {
		// Wait for a record, take what else is queued up to batchMax, and
		// while the last record taken does not end its append, wait for
		// the rest of it: a batch never ends inside an append.
		b.batch = b.batch[:0]
		for len(b.batch) == 0 || b.batch[len(b.batch)-1].AppendRemaining > 0 {
			env, ok, err := r.next(ctx, queue, dropped)
			if err != nil {
				return stop(err)
			}
			if !ok {
				return r.readEnded(ctx, readErr)
			}
			if err := b.take(env); err != nil {
				return stop(err)
			}
			if err := b.fill(); err != nil {
				return stop(err)
			}
		}
		if err := r.apply(ctx, b.batch); err != nil {
			return stop(err)
		}
		if target > 0 && r.applied.Load() >= target {
			stop(errReached)
			return nil
		}
	}
}

// batcher gathers the records the reader queued into batches of whole
// appends.
type batcher struct {
	queue <-chan Envelope
	max   int
	batch []Envelope
	// last is the last record taken, whose append the next continues.
	last Envelope
}

// take adds env to the batch, refusing a record that does not continue
// the append of the one before.
func (b *batcher) take(env Envelope) error {
	if err := continuesAppend(b.last, env); err != nil {
		return fmt.Errorf("projection runner: %w", err)
	}
	b.last = env
	b.batch = append(b.batch, env)
	return nil
}

// fill takes what is queued already, up to the batch's bound, without
// waiting.
func (b *batcher) fill() error {
	for len(b.batch) < b.max {
		select {
		case env, ok := <-b.queue:
			if !ok {
				return nil
			}
			if err := b.take(env); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// apply applies a batch to the store and advances the positions applied
// and sealed.
func (r *Runner) apply(ctx context.Context, batch []Envelope) error {
	if err := r.store.Apply(ctx, batch); err != nil {
		return fmt.Errorf("projection runner: apply %d to %d: %w", batch[0].Seq, batch[len(batch)-1].Seq, err)
	}
	for _, env := range batch {
		if env.Seal && env.Seq > r.sealed.Load() {
			r.sealed.Store(env.Seq)
		}
	}
	if end := batch[len(batch)-1].Seq; end > r.applied.Load() {
		r.applied.Store(end)
	}
	if r.progress != nil {
		r.progress(r.applied.Load())
	}
	return nil
}

// dropped returns the store's Dropped channel, or nil (never ready) for a
// store that drops its rows only when told to.
func (r *Runner) dropped() <-chan struct{} {
	if d, ok := r.store.(Dropper); ok {
		return d.Dropped()
	}
	return nil
}

// next waits for the next record read; ok is false once the reader has
// ended. A store that drops its rows meanwhile is asked with no records,
// so that its ErrSwitched comes now rather than with the next record,
// which an idle stream may not bring for minutes.
func (r *Runner) next(ctx context.Context, queue <-chan Envelope, dropped <-chan struct{}) (env Envelope, ok bool, err error) {
	select {
	case env, ok = <-queue:
		return env, ok, nil
	case <-dropped:
	}
	if err := r.store.Apply(ctx, nil); err != nil {
		return Envelope{}, false, fmt.Errorf("projection runner: rows dropped: %w", err)
	}
	env, ok = <-queue
	return env, ok, nil
}

// readEnded is the Runner's error once the reader has stopped: ctx's, or
// the reader's.
func (r *Runner) readEnded(ctx context.Context, readErr <-chan error) error {
	err := <-readErr
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		err = errors.New("source ended without error")
	}
	return fmt.Errorf("projection runner: read from %d: %w", r.applied.Load()+1, err)
}

// continuesAppend checks env against the record before it, prev (the zero
// Envelope for the first record read, which may continue an append begun
// before the checkpoint of a store written before appends were marked): an
// append holds at most AppendMax records, and a record that prev said
// belongs to prev's append says one fewer follow it. A stream that breaks
// either rule is ErrInvalid, never applied in part.
func continuesAppend(prev, env Envelope) error {
	switch {
	case env.AppendRemaining < 0 || env.AppendRemaining >= AppendMax:
		return errorsf(ErrInvalid, "sequence %d says %d records of its append follow it, an append holds 1 to %d",
			env.Seq, env.AppendRemaining, AppendMax)
	case prev.AppendRemaining > 0 && (env.Seq != prev.Seq+1 || env.AppendRemaining != prev.AppendRemaining-1):
		return errorsf(ErrInvalid, "sequence %d (%d more of its append to follow) after sequence %d (%d more to follow): the append is broken",
			env.Seq, env.AppendRemaining, prev.Seq, prev.AppendRemaining)
	}
	return nil
}

// WaitPoll waits until get reports a value of at least seq, polling with a
// backoff from 1 ms to 50 ms, at most WaitMax or until ctx ends. wake, when
// not nil, returns a channel closed at the next local apply, so that a
// store that applies in-process answers without polling delay. Both stores
// build WaitFor on it.
func WaitPoll(ctx context.Context, seq uint64, get func(context.Context) (uint64, error), wake func() <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, WaitMax)
	defer cancel()
	delay := time.Millisecond
	for {
		var ch <-chan struct{}
		if wake != nil {
			ch = wake()
		}
		got, err := get(ctx)
		if err == nil && got >= seq {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("wait for sequence %d: %w", seq, err)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w: wanted %d, at %d: %v", ErrNotReached, seq, got, ctx.Err())
		case <-ch:
		case <-timer.C:
		}
		timer.Stop()
		delay = min(2*delay, 50*time.Millisecond)
	}
}
