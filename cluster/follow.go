package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
)

// follower keeps a ledger current by applying the stream's events as they
// land, through Ledger.Evolve as the writer's replay does, and opens the
// deck of every block that opens: a standby that takes over then replays
// only the events past its position and builds no deck.
type follower struct {
	cfg    *settlement.Config
	store  eventstore.Store
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	ledger *domain.Ledger
	seq    uint64 // last stream sequence applied
	err    error  // why it stopped following, nil while it runs
	// taken is set when the ledger was handed over: apply then leaves it
	// alone, however long the read takes to notice its cancellation.
	taken bool
}

// errTaken ends the reading of a follower whose ledger was handed over.
var errTaken = errors.New("standby: the ledger was handed to the writer")

// startFollower follows the stream from its first event.
func startFollower(cfg *settlement.Config, store eventstore.Store, log *slog.Logger) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cfg: cfg, store: store, log: log, cancel: cancel, done: make(chan struct{}), ledger: cfg.NewLedger()}
	go func() {
		defer close(f.done)
		err := eventstore.FollowResuming(ctx, store, 1, f.apply, func(err error) {
			log.Warn("standby: following the stream again after an error", "err", err)
		})
		if ctx.Err() == nil {
			log.Error("standby: stopped following the stream; a takeover will replay it all", "err", err)
			f.mu.Lock()
			f.err = err
			f.mu.Unlock()
		}
	}()
	return f
}

// apply applies one stream record.
func (f *follower) apply(r eventstore.RecordedEvent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.taken {
		return errTaken
	}
	f.seq = r.Sequence
	if r.Type == eventstore.SealType {
		return nil
	}
	e, err := domain.DecodeEvent(r.Type, r.Payload)
	if err != nil {
		return fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
	}
	if err := f.ledger.Evolve(r.RecordedAt, e); err != nil {
		return fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
	}
	if o, ok := e.(*domain.BlockOpened); ok {
		b := f.ledger.Blocks[o.Block]
		deck, _, err := settlement.OpenDeck(f.cfg, b)
		if err != nil {
			return err
		}
		f.ledger.AttachDeck(deck)
	}
	return nil
}

// position returns the last sequence applied.
func (f *follower) position() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq
}

// take stops the follower and hands its ledger over (nil when it stopped on
// an error: the taker then replays the whole stream). It does not wait for
// the read to end: a consumer being re-created after a stream leader
// change can ignore its cancellation for seconds, and a takeover must not
// wait for it; the reading goroutine ends on its own and applies nothing
// more. The follower must not be used afterwards.
func (f *follower) take() *settlement.Start {
	f.cancel()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taken = true
	if f.err != nil {
		return nil
	}
	return &settlement.Start{Ledger: f.ledger, Seq: f.seq}
}

// stop stops following, for good.
func (f *follower) stop() {
	f.cancel()
	<-f.done
}
