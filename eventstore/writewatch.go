package eventstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

// writeWatch is the embedded server's logger: it passes every line on (to
// the server's own logger, when it logs) and notes the first write its
// store refused. nats-server reports a store's write error only there: it
// does not answer the publish, and in a single server it does not disable
// JetStream either, so the log line is the one signal that comes at once.
type writeWatch struct {
	next   server.Logger // nil: the server does not log
	once   sync.Once
	failed chan struct{}
	mu     sync.Mutex
	first  error
}

func newWriteWatch(next server.Logger) *writeWatch {
	return &writeWatch{next: next, failed: make(chan struct{})}
}

// err is the first refused write, nil before it.
func (w *writeWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// note records line when it says that the store refused a write: the
// file store's "critical write error", or the stream's failure to store
// for lack of space.
func (w *writeWatch) note(line string) {
	lower := strings.ToLower(line)
	full := strings.Contains(lower, "no space left")
	if !full && !strings.Contains(lower, "critical write error") {
		return
	}
	w.once.Do(func() {
		err := errors.New(line)
		if full {
			err = fmt.Errorf("%w: the disk of the data directory is full (%s)", ErrNoSpace, line)
		}
		w.mu.Lock()
		w.first = err
		w.mu.Unlock()
		close(w.failed)
	})
}

func (w *writeWatch) Noticef(format string, v ...any) {
	if w.next != nil {
		w.next.Noticef(format, v...)
	}
}

func (w *writeWatch) Warnf(format string, v ...any) {
	w.note(fmt.Sprintf(format, v...))
	if w.next != nil {
		w.next.Warnf(format, v...)
	}
}

func (w *writeWatch) Fatalf(format string, v ...any) {
	if w.next != nil {
		w.next.Fatalf(format, v...)
	}
}

func (w *writeWatch) Errorf(format string, v ...any) {
	w.note(fmt.Sprintf(format, v...))
	if w.next != nil {
		w.next.Errorf(format, v...)
	}
}

func (w *writeWatch) Debugf(format string, v ...any) {
	if w.next != nil {
		w.next.Debugf(format, v...)
	}
}

func (w *writeWatch) Tracef(format string, v ...any) {
	if w.next != nil {
		w.next.Tracef(format, v...)
	}
}
