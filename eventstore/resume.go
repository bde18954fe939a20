package eventstore

import (
	"context"
	"errors"
	"time"
)

// resumePause is how long FollowResuming waits before following again: a
// stream leader election or a reconnect to another node takes about that.
const resumePause = 250 * time.Millisecond

// callerError marks an error of the caller's fn, which FollowResuming
// returns as is instead of resuming.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }
func (e callerError) Unwrap() error { return e.err }

// FollowResuming is store.Follow that rides through the loss of the NATS
// node it reads from and through a change of the stream's leader: on a
// read error it calls onResume (for a log line), waits a moment and follows
// again from the sequence after the last one fn received, until ctx ends.
// It returns ctx.Err(), fn's error, or an error that no retry cures:
// ErrGap, ErrIntegrity, ErrUnknownType, ErrSchemaTooNew.
func FollowResuming(ctx context.Context, store Store, from uint64, fn func(RecordedEvent) error, onResume func(error)) error {
	next := max(from, 1)
	for {
		err := store.Follow(ctx, next, func(ev RecordedEvent) error {
			if err := fn(ev); err != nil {
				return callerError{err}
			}
			next = ev.Sequence + 1
			return nil
		})
		var ce callerError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &ce):
			return ce.err
		case errors.Is(err, ErrGap), errors.Is(err, ErrIntegrity), errors.Is(err, ErrUnknownType), errors.Is(err, ErrSchemaTooNew):
			return err
		}
		if onResume != nil {
			onResume(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(resumePause):
		}
	}
}
