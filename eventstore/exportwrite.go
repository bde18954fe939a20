package eventstore

import (
	"fmt"
	"io"
	"runtime"
	"sync"
)

// exportEncodeEvents is how many events one core encodes at a time for a
// ParallelExportWriter.
const exportEncodeEvents = 1024

// ParallelExportWriter writes the lines of an ExportWriter, byte for
// byte, with the encoding spread over every core: events are queued in
// chunks, each chunk encoded by one core, and one goroutine writes the
// encoded chunks to the underlying writer in order. A backup reads the
// stream on one goroutine; the lines, the file's hash and its write would
// otherwise wait on it.
type ParallelExportWriter struct {
	enc   ExportWriter
	cur   *encodeChunk
	order chan *encodeChunk
	work  chan *encodeChunk
	free  chan *encodeChunk
	// failed is closed once an encode or a write failed, err what
	// failed; written is closed when the writing goroutine ends.
	failOnce sync.Once
	failed   chan struct{}
	err      error
	written  chan struct{}
	workers  sync.WaitGroup
	closed   bool
}

// encodeChunk is a run of events and their lines, once encoded.
type encodeChunk struct {
	events []RecordedEvent
	lines  []byte
	err    error
	done   chan struct{}
}

// NewParallelExportWriter writes lines to w, subjects under prefix; call
// Close at the end.
func NewParallelExportWriter(w io.Writer, prefix string) *ParallelExportWriter {
	n := runtime.GOMAXPROCS(0)
	x := &ParallelExportWriter{enc: ExportWriter{prefix: prefix}, order: make(chan *encodeChunk, 2*n), work: make(chan *encodeChunk, 2*n),
		free: make(chan *encodeChunk, 4*n+1), failed: make(chan struct{}), written: make(chan struct{})}
	for range n {
		x.workers.Go(x.encode)
	}
	go x.write(w)
	return x
}

// fail records the first error; the writer refuses more events after it.
func (x *ParallelExportWriter) fail(err error) {
	x.failOnce.Do(func() {
		x.err = err
		close(x.failed)
	})
}

// encode encodes the chunks handed to this core.
func (x *ParallelExportWriter) encode() {
	for c := range x.work {
		for i := range c.events {
			if c.lines, c.err = x.enc.appendLine(c.lines, c.events[i]); c.err != nil {
				break
			}
		}
		close(c.done)
	}
}

// write writes the chunks' lines in order, until the first error.
func (x *ParallelExportWriter) write(w io.Writer) {
	defer close(x.written)
	for c := range x.order {
		<-c.done
		err := c.err
		if err == nil {
			if _, err = w.Write(c.lines); err != nil {
				err = fmt.Errorf("export sequences %d to %d: %w", c.events[0].Sequence, c.events[len(c.events)-1].Sequence, err)
			}
		}
		if err != nil {
			x.fail(err)
			continue // the chunks queued are dropped
		}
		clear(c.events)
		*c = encodeChunk{events: c.events[:0], lines: c.lines[:0]}
		select {
		case x.free <- c:
		default:
		}
	}
}

// Write queues r's line. It returns the first error of an encode or a
// write queued before (ExportWriter.Write's), after which the lines
// written are incomplete.
func (x *ParallelExportWriter) Write(r RecordedEvent) error {
	if x.cur == nil {
		select {
		case <-x.failed:
			return x.err
		case x.cur = <-x.free:
		default:
			x.cur = &encodeChunk{events: make([]RecordedEvent, 0, exportEncodeEvents)}
		}
		x.cur.done = make(chan struct{})
	}
	x.cur.events = append(x.cur.events, r)
	if len(x.cur.events) == exportEncodeEvents {
		x.dispatch()
	}
	return nil
}

// dispatch hands the chunk being filled to the cores and to the
// writing goroutine.
func (x *ParallelExportWriter) dispatch() {
	c := x.cur
	x.cur = nil
	x.order <- c
	x.work <- c
}

// Close writes every line queued and returns the first error met; the
// writer takes no more events.
func (x *ParallelExportWriter) Close() error {
	if x.closed {
		return x.err
	}
	x.closed = true
	if x.cur != nil && len(x.cur.events) > 0 {
		x.dispatch()
	}
	close(x.order)
	close(x.work)
	x.workers.Wait()
	<-x.written
	return x.err
}
