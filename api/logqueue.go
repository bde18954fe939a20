package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// logQueueDrainMax bounds how long a stopping log stores what is queued.
const logQueueDrainMax = 5 * time.Second

// logQueue stores the entries of one of the API's logs off the requests'
// path: a request offers its entry to a bounded queue and never waits;
// one goroutine (run) encodes and stores them, and on each tick lets the
// log's owner store its own summary (how many entries were left out).
type logQueue[E any] struct {
	store  LogStore
	logger *slog.Logger
	name   string
	kind   func(E) string
	queue  chan E
	// failures logs a failing store once in a while, not once per entry.
	failures rate.Sometimes
	// recorded and failed count the entries stored and those the store
	// refused, for /metrics.
	recorded, failed atomic.Uint64
}

func newLogQueue[E any](store LogStore, logger *slog.Logger, name string, size int, kind func(E) string) *logQueue[E] {
	if logger == nil {
		logger = slog.Default()
	}
	return &logQueue[E]{store: store, logger: logger, name: name, kind: kind, queue: make(chan E, size),
		failures: rate.Sometimes{First: 1, Interval: 10 * time.Second}}
}

// offer queues e unless the queue is full; it never blocks.
func (q *logQueue[E]) offer(e E) bool {
	select {
	case q.queue <- e:
		return true
	default:
		return false
	}
}

// run stores the queued entries, and calls tick every period, until ctx
// ends; then it stores what is queued and ticks once more, bounded by
// logQueueDrainMax. An entry taken from the queue is stored whatever ctx
// does meanwhile (each store is bounded by the store's own timeout).
func (q *logQueue[E]) run(ctx context.Context, period time.Duration, tick func(context.Context)) {
	storing := context.WithoutCancel(ctx)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case e := <-q.queue:
			q.store1(storing, e)
		case <-t.C:
			tick(storing)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(storing, logQueueDrainMax)
			defer cancel()
			for {
				select {
				case e := <-q.queue:
					q.store1(dctx, e)
				default:
					tick(dctx)
					return
				}
			}
		}
	}
}

// store1 stores one entry; a failure is counted and logged (these logs
// are not the ledger: a lost entry loses no money and stops nothing).
func (q *logQueue[E]) store1(ctx context.Context, e E) {
	kind := q.kind(e)
	data, err := json.Marshal(e)
	if err == nil {
		_, err = q.store.Append(ctx, kind, data)
	}
	if err != nil {
		q.failed.Add(1)
		q.failures.Do(func() { q.logger.Error(q.name+": entries not stored", "kind", kind, "err", err) })
		return
	}
	q.recorded.Add(1)
}
