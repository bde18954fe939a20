package vault

import (
	"context"
	"fmt"

	"github.com/fdj/tresor/eventstore"
)

// copier sends the batches of the copy on goroutines of its own, in the
// order they are handed to it, and reports each one's commit: encoding a
// batch and handing its bytes to the copy's server (synchronously, over
// the embedded server's in-process connection) then overlaps the vault's
// checks of the batch before it, instead of coming between them.
type copier struct {
	// reappend sends a batch to the copy: an atomic batch, or plain
	// messages when the vault syncs the copy itself (Config.SyncCopy).
	reappend func([]eventstore.RecordedEvent) (func(context.Context) error, error)
	// sync, when set, puts what the copy's server stored on disk.
	sync func() error
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
// batches at once; with sync (Config.SyncCopy) they go as plain messages,
// each batch synced once stored. close stops them.
func startCopier(store *eventstore.NATSStore, depth int, sync func() error) *copier {
	reappend := store.ReappendAsync
	if sync != nil {
		reappend = store.ReappendPlainAsync
	}
	c := &copier{reappend: reappend, sync: sync, in: make(chan *copyBatch, depth), sent: make(chan sentBatch, depth)}
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
		wait, err := c.reappend(b.events)
		if err != nil {
			failed = err
			b.done <- err
			continue
		}
		c.sent <- sentBatch{b: b, wait: wait}
	}
}

// await waits for each batch's commit, in order, within the copy's own
// request timeout, and syncs it when the copy's server does not.
func (c *copier) await() {
	for s := range c.sent {
		err := s.wait(context.Background())
		if err == nil && c.sync != nil {
			if err = c.sync(); err != nil {
				err = fmt.Errorf("sync the copy: %w", err)
			}
		}
		s.b.done <- err
	}
}

// close stops the goroutines once the batches handed on are sent and
// their outcomes known.
func (c *copier) close() { close(c.in) }
