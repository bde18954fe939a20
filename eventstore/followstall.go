package eventstore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// followStallMax is how long a follow waits for its consumer to deliver
// while the stream holds events past the last delivered, before it gives
// the consumer up (ErrDisconnected: the caller follows again from its last
// sequence, on a fresh consumer). After a stream leader change, nats.go
// re-creates an ordered consumer on a background context, bounded by 10 s
// (and as long again to delete the old one), inside Next: neither the
// read's wait nor its context ends that sooner.
const followStallMax = 3 * time.Second

// followUnstalled runs consume for a follow in its own goroutine, so that
// it can give up on a stalled consumer (followStallMax) and return at once
// when ctx ends. A consume given up on calls fn no more (fn runs under a
// lock the give-up takes) and ends when nats.go lets it.
func (s *NATSStore) followUnstalled(ctx context.Context, spec readSpec, fn func(RecordedEvent) error) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	givenUp := false
	next := max(spec.from, 1)
	progress := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.consume(cctx, spec, func(ev RecordedEvent) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if givenUp {
				return true, nil
			}
			if err := fn(ev); err != nil {
				return true, err
			}
			next = ev.Sequence + 1
			select {
			case progress <- struct{}{}:
			default:
			}
			return false, nil
		})
	}()
	giveUp := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		givenUp = true
		return next
	}
	timer := time.NewTimer(followStallMax)
	defer timer.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			giveUp()
			return ctx.Err()
		case <-progress:
			timer.Reset(followStallMax)
		case <-timer.C:
			timer.Reset(followStallMax)
			mu.Lock()
			at := next
			mu.Unlock()
			// An idle tail is no stall; a head that cannot be read
			// leaves the decision to consume's own checks.
			last, err := s.LastSequence(ctx)
			if err != nil || last < at {
				continue
			}
			giveUp()
			return fmt.Errorf("follow %s: nothing delivered for %s at sequence %d while the stream ends at %d: %w",
				s.cfg.Stream, followStallMax, at, last, ErrDisconnected)
		}
	}
}
