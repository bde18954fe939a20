package snapshot

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Store keeps the snapshots of one kind of state: what the writer and a
// standby save to and load from. *Slot is the one on the stream.
type Store interface {
	// Load returns the newest snapshot that passes its checks against the
	// stream and the stream sequence it was taken at, with why each newer
	// one was skipped, or an error naming why none can be used
	// (ErrNotFound when there is none).
	Load(ctx context.Context) (seq uint64, data []byte, skipped []error, err error)
	// Save stores a snapshot of the state after the event at seq, and
	// prunes the oldest beyond the ones kept. data is the caller's again
	// once Save returns (the writer encodes the next snapshot into the
	// same buffer).
	Save(ctx context.Context, seq uint64, data []byte) error
}

var _ Store = (*Slot)(nil)

// Due says whether a snapshot is due after since events applied since the
// last one, taken at taken: every `every` events, or every interval if
// anything happened.
func Due(every int, interval time.Duration, since int, taken time.Time) bool {
	return since >= every || (since > 0 && time.Since(taken) >= interval)
}

// SaveMax bounds one snapshot's store by Save.
const SaveMax = time.Minute

// Save stores data, a snapshot after the event at seq, encoded in
// encoded, bounded by SaveMax, unless ctx ends first (abandoned); the
// outcome is logged (a failure only costs the next start a longer replay)
// and returned.
func Save(ctx context.Context, store Store, log *slog.Logger, seq uint64, data []byte, encoded time.Duration) bool {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, SaveMax)
	defer cancel()
	if err := store.Save(ctx, seq, data); err != nil {
		if errors.Is(err, context.Canceled) {
			log.Info("snapshot store abandoned", "seq", seq, "after", time.Since(start).Round(time.Millisecond))
		} else {
			log.Warn("snapshot not stored", "seq", seq, "err", err)
		}
		return false
	}
	log.Info("snapshot taken", "seq", seq, "bytes", len(data), "encode", encoded.Round(time.Millisecond),
		"total", (encoded + time.Since(start)).Round(time.Millisecond))
	return true
}
