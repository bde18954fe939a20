package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/eventstore"
)

// Bounds of the significant-event log's size when --significant-max-bytes
// is not given.
const (
	significantBytesMin = 16 << 20
	significantBytesMax = 1 << 30
)

// significantBytes is the bound of the significant-event log, and of the
// access log: --significant-max-bytes,
// or a sixteenth of the free disk under --data, between significantBytesMin
// and significantBytesMax. JetStream reserves the whole bound against three
// quarters of the free disk at the stream's creation: a fixed 1 GiB made a
// start need 1.4 GB free whatever the ledger's size. On a cluster the
// servers' disks are not this machine's: the largest bound.
func significantBytes(cfg *Config) int64 {
	if cfg.SignificantMaxBytes > 0 {
		return cfg.SignificantMaxBytes
	}
	if cfg.NATSURL != "" {
		return significantBytesMax
	}
	free, err := freeBytes(cfg.Data)
	if err != nil {
		return significantBytesMax
	}
	return min(max(free/16, significantBytesMin), significantBytesMax)
}

// freeBytes is the space left to this process on dir's file system.
func freeBytes(dir string) (int64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Bavail) * fs.Bsize, nil
}

// resumeFreeBytes is the free space under --data at which a service stopped
// by a full disk starts again: room for the stream to take writes again and
// for the significant-event log's smallest bound.
const resumeFreeBytes = 64 << 20

// spacePoll is how often a service stopped by a full disk looks at the
// free space.
const spacePoll = 250 * time.Millisecond

// diskFullReason is readiness's reason while serve waits for space.
func diskFullReason(cfg *Config) string {
	free, _ := freeBytes(cfg.Data)
	return fmt.Sprintf("the disk of the data directory %s is full (the store refused a write): the writer stopped, and starts again once %d MiB are free (%d MiB now)",
		cfg.Data, resumeFreeBytes>>20, free>>20)
}

// awaitSpace waits, answering unavailable, until the disk under --data has
// resumeFreeBytes free. It returns false when ctx ended first. The data
// directory is not held meanwhile: another serve may take it.
func awaitSpace(ctx context.Context, log *slog.Logger, cfg *Config, run *serveRun, cause error) bool {
	run.fr.handle(api.Unavailable(run.pages, func() string { return diskFullReason(cfg) }))
	log.Error("the disk is full: waiting for space, answering unavailable", "need_mib", resumeFreeBytes>>20, "err", cause)
	t := time.NewTicker(spacePoll)
	defer t.Stop()
	for {
		if free, err := freeBytes(cfg.Data); err == nil && free >= resumeFreeBytes {
			log.Info("disk space is back: starting again", "free_mib", free>>20)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// noSpaceHint names the disk when err is JetStream refusing for lack of
// space, and the space there is.
func noSpaceHint(cfg *Config, err error) error {
	if !errors.Is(err, eventstore.ErrNoSpace) || cfg.NATSURL != "" {
		return err
	}
	free, ferr := freeBytes(cfg.Data)
	if ferr != nil {
		return fmt.Errorf("not enough disk space for data directory %s: %w", cfg.Data, err)
	}
	return fmt.Errorf("not enough disk space for data directory %s (%d MiB free): %w", cfg.Data, free>>20, err)
}
