package projectionstest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fdj/tresor/projections"
)

// Log is an in-memory stream that implements projections.Source: Read
// delivers what it holds, then follows appends until its context ends. It
// stands in for the event store in the read side's tests and benchmarks;
// it is a stream, not a mock: nothing checks how it is called.
type Log struct {
	mu      sync.Mutex
	events  []projections.Envelope
	changed chan struct{}
	// failAfter, when positive, makes each Read fail after delivering that
	// many records: a projection killed mid-stream.
	failAfter int
}

// ErrInjected is the failure a Log configured with FailAfter returns.
var ErrInjected = errors.New("injected read failure")

// NewLog returns a log holding events (sequences from 1, contiguous).
func NewLog(events []projections.Envelope) *Log {
	return &Log{events: append([]projections.Envelope(nil), events...), changed: make(chan struct{})}
}

// FailAfter makes every later Read fail with ErrInjected after n records.
func (l *Log) FailAfter(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failAfter = n
}

// WholeAppends returns the longest prefix of events[:n] that ends with the
// end of an append: where a test may cut a stream short, since a real
// stream never ends inside an append (a Runner would wait for its rest).
// n is at most len(events).
func WholeAppends(events []projections.Envelope, n int) []projections.Envelope {
	for n > 0 && events[n-1].AppendRemaining > 0 {
		n--
	}
	return events[:n]
}

// Append adds records at the tail and wakes the readers.
func (l *Log) Append(events ...projections.Envelope) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, events...)
	close(l.changed)
	l.changed = make(chan struct{})
}

// Head implements projections.Source.
func (l *Log) Head(context.Context) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.events)), nil
}

// Read implements projections.Source.
func (l *Log) Read(ctx context.Context, from uint64, fn func(projections.Envelope) error) error {
	if from == 0 {
		from = 1
	}
	delivered := 0
	for next := from; ; {
		l.mu.Lock()
		events, changed, failAfter := l.events, l.changed, l.failAfter
		l.mu.Unlock()
		for ; next <= uint64(len(events)); next++ {
			if failAfter > 0 && delivered == failAfter {
				return fmt.Errorf("read at %d: %w", next, ErrInjected)
			}
			if err := fn(events[next-1]); err != nil {
				return err
			}
			delivered++
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
