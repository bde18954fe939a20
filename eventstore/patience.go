package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// finalError is an error on which OpenPatiently gives up at once: the
// server answered, and trying again cannot change the answer.
type finalError struct{ error }

func (e finalError) Unwrap() error { return e.error }

// Bounds of OpenPatiently.
const (
	// openPatience bounds the whole wait for a stream or a bucket.
	openPatience = 30 * time.Second
	// openAttempt bounds one try: a request that reached a server in the
	// middle of an election is answered by nobody, and the try after the
	// election waits for it to time out. The stream's leader comes some
	// seconds after the quorum: a short try sees it soon after, where a
	// long one can spend the end of openPatience waiting on a request sent
	// before the election, and a cluster that got its quorum back late in
	// the wait is then given up on.
	openAttempt = 2 * time.Second
)

// OpenPatiently calls open, each call bounded by openAttempt, until it
// succeeds, returns a finalError, ctx ends or openPatience has passed, and
// returns the last call's error. A cluster just started, or restarted,
// elects the leaders of its assets one after another: the meta leader,
// then each stream's and each bucket's, seconds apart, and a bucket's
// stream may answer well after the event stream does. Without it, every
// node started on a restarting cluster exited on "context deadline
// exceeded" within its first request timeout (2 s), and again at each
// restart by its supervisor until the elections were over.
//
// Failed tries are logged on log (nil: none) as warnings naming what is
// opened, the first and then at most one every openAttempt (a try that
// fails at once is tried again 100 ms later, and a line for each would
// flood the log); without them a node waiting for its cluster showed
// nothing until openPatience ran out, then only the last error.
func OpenPatiently[T any](ctx context.Context, log *slog.Logger, what string, open func(context.Context) (T, error)) (T, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, openPatience)
	defer cancel()
	var logged time.Time
	for try := 1; ; try++ {
		attempt, done := context.WithTimeout(ctx, openAttempt)
		v, err := open(attempt)
		done()
		if isNoSpace(err) {
			return v, fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		if fe := (finalError{}); errors.As(err, &fe) {
			return v, fe.error
		}
		if err == nil {
			return v, nil
		}
		if log != nil && ctx.Err() == nil && time.Since(logged) >= openAttempt {
			logged = time.Now()
			log.Warn("not open yet: trying again", "open", what, "try", try, "after", time.Since(start).Round(time.Millisecond), "for_up_to", openPatience, "err", err)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("%w (tried for %s: is the NATS server up, and enough of its cluster's nodes: a quorum, or as many as --replicas to create a stream?)", err, time.Since(start).Round(time.Second))
			}
			return v, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// isNoSpace reports JetStream's refusals for lack of storage: a server
// answers them at once and would answer them again, so a start waiting for
// a quorum must not mistake them for a cluster still electing.
func isNoSpace(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == errCodeInsufficientResources || apiErr.ErrorCode == errCodeStorageResourcesExceeded
}

// nats-server's JSInsufficientResourcesErr and JSStorageResourcesExceededErr,
// which nats.go does not name.
const (
	errCodeInsufficientResources    = 10023
	errCodeStorageResourcesExceeded = 10047
)
