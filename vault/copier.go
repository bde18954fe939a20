package vault

import (
	"context"

	"github.com/fdj/tresor/eventstore"
)

// copier sends the batches of the copy on goroutines of its own, in the
// order they are handed to it, and reports each one's commit: encoding a
// batch and handing its bytes to the copy's server (synchronously, over
// the embedded server's in-process connection) then overlaps the vault's
// checks of the batch before it, instead of coming between them.
type copier struct {
	store *eventstore.NATSStore
	// in holds the batches not sent yet, sent those sent and not yet
	// known committed; the vault hands on no more than the copy's depth,
	// so that neither ever fills.
	in   chan *copyBatch
	sent chan sentBatch
}

// copyBatch is a batch of whole appends on its way to the copy; done gets
// its outcome once it is known (nil: the copy holds it).
type copyBatch struct {
	events []eventstore.RecordedEvent
	done   chan error
}

// sentBatch is a batch sent, and how to learn its outcome.
type sentBatch struct {
	b    *copyBatch
	wait func(context.Context) error
}

// startCopier starts the copier's goroutines for a copy taking depth
// batches at once; close stops them.
func startCopier(store *eventstore.NATSStore, depth int) *copier {
	c := &copier{store: store, in: make(chan *copyBatch, depth), sent: make(chan sentBatch, depth)}
	go c.send()
	go c.await()
	return c
}

// enqueue hands a batch to the copier; its done gets the outcome.
func (c *copier) enqueue(events []eventstore.RecordedEvent) *copyBatch {
	b := &copyBatch{events: events, done: make(chan error, 1)}
	c.in <- b
	return b
}

// send appends each batch to the copy without waiting for its commit.
// Once one cannot be sent, none after it is: each is fenced on where the
// one before it ends.
func (c *copier) send() {
	defer close(c.sent)
	var failed error
	for b := range c.in {
		if failed != nil {
			b.done <- failed
			continue
		}
		wait, err := c.store.ReappendAsync(b.events)
		if err != nil {
			failed = err
			b.done <- err
			continue
		}
		c.sent <- sentBatch{b: b, wait: wait}
	}
}

// await waits for each batch's commit, in order, within the copy's own
// request timeout.
func (c *copier) await() {
	for s := range c.sent {
		s.b.done <- s.wait(context.Background())
	}
}

// close stops the goroutines once the batches handed on are sent and
// their outcomes known.
func (c *copier) close() { close(c.in) }
