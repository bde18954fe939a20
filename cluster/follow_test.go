package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// stuckStore is a stream whose read ignores its cancellation for a while,
// as nats.go's consumer re-creation after a stream leader change did (about
// 10 s).
type stuckStore struct {
	eventstore.Store
	release chan struct{}
	// reading is closed when the read has begun.
	reading chan struct{}
}

func (s stuckStore) Follow(ctx context.Context, _ uint64, _ func(eventstore.RecordedEvent) error) error {
	close(s.reading)
	<-s.release
	return ctx.Err()
}

// TestTakeDoesNotWaitForTheRead: a takeover gets the standby's ledger at
// once, even while the standby's read is stuck and ignores its
// cancellation.
func TestTakeDoesNotWaitForTheRead(t *testing.T) {
	cfg := writerConfig(t)
	store := stuckStore{release: make(chan struct{}), reading: make(chan struct{})}
	stuck := 3 * time.Second
	time.AfterFunc(stuck, func() { close(store.release) })
	f := startFollower(&cfg, store, slog.Default(), func() bool { return false })
	<-store.reading
	start := time.Now()
	st := f.take()
	if took := time.Since(start); took >= stuck/2 {
		t.Fatalf("take waited %s for a stuck read", took)
	}
	if st == nil || st.Ledger == nil || st.Seq != 0 {
		t.Fatalf("take: %+v, want the ledger at sequence 0", st)
	}
	f.stop()
}
