package eventstore

import (
	"bufio"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// exportChunkLines and exportChunkBytes bound one chunk of lines that
// ReadExportHashed hands to a core: enough to keep the cores' hand-offs
// rare, small enough that a few chunks per core stay a few megabytes.
const (
	exportChunkLines = 1024
	exportChunkBytes = 1 << 20
)

// exportChunk is a run of an export's lines, parsed and hashed by one
// core, then handed to the reader's fn in file order. Its lines are
// never written again once read: the events parsed from them share their
// memory (their strings are cut from one copy of the chunk as a string,
// their payloads from its bytes) rather than each field copied.
type exportChunk struct {
	// first is the line number of the chunk's first line.
	first int
	// data holds the lines, ends where each ends.
	data []byte
	ends []int
	// events and hashes are the lines parsed and their events' hashes
	// computed; err is the first malformed line's, which ends the chunk.
	events []RecordedEvent
	hashes []Hash
	err    error
	done   chan struct{}
}

// parse parses and hashes the chunk's lines, up to the first malformed
// one.
func (c *exportChunk) parse() {
	defer close(c.done)
	text := string(c.data)
	start := 0
	for i, end := range c.ends {
		ev, h, err := parseHashedLine(c.data[start:end], text[start:end])
		if err != nil {
			c.err = fmt.Errorf("export line %d: %w", c.first+i, err)
			return
		}
		c.events = append(c.events, ev)
		c.hashes = append(c.hashes, h)
		start = end
	}
}

// parseHashedLine parses a line, whose bytes and text stay unchanged
// while its event is used, and computes its event's hash. A payload laid
// out as ExportWriter writes it is taken without its JSON check when the
// hash matches: it is then the payload the chain recorded, byte for byte,
// whatever it holds, and validating every payload's JSON is the costliest
// part of reading a line. A line whose hash does not match, or that is
// refused, is read again as ReadExport reads it, so that a malformed line
// is refused, and named, as there.
func parseHashedLine(line []byte, text string) (RecordedEvent, Hash, error) {
	l, ok := lineScanner{b: line, text: text, shared: true, ok: true}.scan(false)
	if !ok {
		ev, err := parseExportLine(line)
		if err != nil {
			return RecordedEvent{}, Hash{}, err
		}
		return ev, ComputeHash(&ev), nil
	}
	ev, err := l.event()
	var h Hash
	if err == nil {
		h = ComputeHash(&ev)
	}
	if err != nil || h != ev.Hash {
		if _, full := parseExportLine(line); full != nil {
			return RecordedEvent{}, Hash{}, full
		}
	}
	return ev, h, err
}

// ReadExportHashed is ReadExport for a reader that checks every hash: the
// lines are parsed and their events' hashes computed (ComputeHash) on
// every core, a chunk of lines at a time, and fn is called with each
// event and its computed hash in file order, on the caller's goroutine. A
// malformed line is an error naming its line number, as ReadExport's
// (a verbatim payload's JSON is checked only when its hash does not
// match: parseHashedLine); fn's error stops the read and is returned as
// is. An event's strings and payload share the memory of its chunk of
// lines, a megabyte or so: fn copies what it keeps for long
// (strings.Clone) rather than keep the chunk alive.
func ReadExportHashed(r io.Reader, fn func(RecordedEvent, Hash) error) error {
	workers := runtime.GOMAXPROCS(0)
	order := make(chan *exportChunk, 2*workers)
	work := make(chan *exportChunk, 2*workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c := range work {
				c.parse()
			}
		})
	}
	var readErr error
	go func() {
		defer close(work)
		defer close(order)
		readErr = splitExport(r, func(c *exportChunk) bool {
			select {
			case order <- c:
			case <-stop:
				return false
			}
			work <- c
			return true
		})
	}()
	err := deliverChunks(order, fn)
	close(stop)
	for range order { // let the splitter end, its chunks unparsed
	}
	wg.Wait()
	if err == nil {
		err = readErr
	}
	return err
}

// deliverChunks calls fn for each event of the chunks in order, as each
// chunk's parse is done, until a malformed line or fn's error.
func deliverChunks(order <-chan *exportChunk, fn func(RecordedEvent, Hash) error) error {
	for c := range order {
		<-c.done
		for i := range c.events {
			if err := fn(c.events[i], c.hashes[i]); err != nil {
				return err
			}
		}
		if c.err != nil {
			return c.err
		}
	}
	return nil
}

// splitExport reads r's lines into chunks and hands each to send, until
// the end of r, a read error (naming its line) or send's false.
func splitExport(r io.Reader, send func(*exportChunk) bool) error {
	br := bufio.NewReaderSize(r, 256<<10)
	c := newExportChunk(1)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			if len(c.ends) > 0 && !send(c) {
				return nil
			}
			return fmt.Errorf("read export line %d: %w", n, err)
		}
		c.data = append(c.data, line...)
		c.ends = append(c.ends, len(c.data))
		if len(c.ends) == exportChunkLines || len(c.data) >= exportChunkBytes {
			if !send(c) {
				return nil
			}
			c = newExportChunk(n + 1)
		}
	}
	if len(c.ends) > 0 {
		send(c)
	}
	return nil
}

// newExportChunk is an empty chunk whose first line is line first. A
// chunk is never reused: the events parsed from it keep its memory.
func newExportChunk(first int) *exportChunk {
	return &exportChunk{first: first, data: make([]byte, 0, exportChunkBytes+4096), ends: make([]int, 0, exportChunkLines),
		events: make([]RecordedEvent, 0, exportChunkLines), hashes: make([]Hash, 0, exportChunkLines), done: make(chan struct{})}
}
