package feed

import (
	"context"
	"errors"
	"fmt"
)

// Target is where a feed publishes: a broker or a database, reached
// through a watermill publisher, which also keeps the feed's checkpoint
// (docs/feed.md says why there).
//
// A target connects lazily and reconnects after any error: the feed only
// calls Checkpoint and Publish again.
type Target interface {
	// Checkpoint returns the stream sequence up to which the feed's
	// messages are confirmed (0 when the feed never published). It
	// returns ErrFenced when another feed holds the same name, or the
	// connection error.
	Checkpoint(ctx context.Context) (uint64, error)
	// Publish publishes msgs in order, then moves the checkpoint to the
	// stream sequence to; it returns only once the target has confirmed
	// the messages and, but for the checkpoint itself on RabbitMQ (whose
	// confirm the next Publish or Close awaits), the checkpoint. It returns an error wrapping ErrRefused when the target was
	// reached and refused the messages, ErrFenced when another feed moved
	// the checkpoint or holds the name, or any other error when the target
	// could not be reached (which the feed retries).
	Publish(ctx context.Context, msgs []Message, to uint64) error
	// Close awaits what Publish left unconfirmed (bounded), then releases
	// the connection; it returns the error of that wait.
	Close() error
}

// Errors of targets.
var (
	// ErrRefused marks a publish that the target received and refused:
	// retried a few times, it makes the feed stop on a PoisonError.
	ErrRefused = errors.New("refused by the target")
	// ErrFenced marks another feed of the same name: the feed stops.
	ErrFenced = errors.New("another feed holds this name")
)

// PoisonError is a message that the target refused for good: the feed
// stops on it rather than skip it. Everything before it is published and
// checkpointed.
type PoisonError struct {
	Seq       uint64
	EventID   string
	EventType string
	Kind      Kind
	UUID      string
	Err       error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("event %d (%s %s, %s message %s) refused by the target %d times, the feed stops before it: %v",
		e.Seq, e.EventType, e.EventID, e.Kind, e.UUID, refusedMax, e.Err)
}

func (e *PoisonError) Unwrap() error { return e.Err }
