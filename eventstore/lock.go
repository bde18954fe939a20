package eventstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nuid"
)

// lockFileName is the lock file in an embedded server's data directory.
// Its content describes the holder; it is never removed, because removing
// a locked file lets a third process lock a new file of the same name
// while the holder still runs.
const lockFileName = "tresor.lock"

// holderBytesMax bounds what is read from a lock file: a holder's line.
const holderBytesMax = 4096

// ErrLocked reports a data directory whose embedded server runs in another
// process (or another RunEmbedded of this one). LockedError carries who.
var ErrLocked = errors.New("eventstore: data directory in use")

// Holder describes the process holding a data directory, as it wrote
// itself into the lock file.
type Holder struct {
	// PID is the holder's process id.
	PID int `json:"pid"`
	// Command is what runs there ("tresor serve"), as the holder's caller
	// described it (EmbeddedConfig.Holder).
	Command string `json:"command"`
	// Started is when it took the lock.
	Started time.Time `json:"started"`
	// Instance identifies this holding: the reader advertisement written
	// under it carries the same value, so that an advertisement left by a
	// holder killed with SIGKILL is recognised as stale.
	Instance string `json:"instance"`
}

// String names the holder in one phrase: "pid 4242 (tresor serve, since
// 2026-12-03T18:40:01Z)".
func (h Holder) String() string {
	if h.PID == 0 {
		return "another process (it has not described itself yet)"
	}
	return fmt.Sprintf("pid %d (%s, since %s)", h.PID, h.Command, h.Started.UTC().Format(time.RFC3339))
}

// LockedError is returned by RunEmbedded when another process holds the
// data directory. It wraps ErrLocked.
type LockedError struct {
	// Dir is the locked data directory.
	Dir string
	// Holder is the process holding it, as far as its lock file says.
	Holder Holder
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("data directory %s is in use by %s", e.Dir, e.Holder)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// dirLock is an exclusive flock(2) on a data directory's lock file. The
// kernel releases it when the process ends, however it ends: a SIGKILL
// never leaves a stale lock behind.
type dirLock struct {
	f      *os.File
	holder Holder
}

// lockDir takes the lock of dir without waiting, creating dir and the lock
// file as needed, and writes the holder's description into the file. It
// returns a *LockedError when someone else holds it.
func lockDir(dir, command string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			h, _ := readHolder(dir)
			return nil, &LockedError{Dir: dir, Holder: h}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l := &dirLock{f: f, holder: Holder{PID: os.Getpid(), Command: command, Started: time.Now().UTC(), Instance: nuid.Next()}}
	line, err := json.Marshal(l.holder)
	if err != nil {
		l.release()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The file is rewritten in place: it must stay the inode others lock.
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(append(line, '\n'), 0)
	}
	if err != nil {
		l.release()
		return nil, fmt.Errorf("lock %s: describe the holder: %w", path, err)
	}
	return l, nil
}

// release drops the lock (closing the file releases the flock).
func (l *dirLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// readHolder reads the holder's description from dir's lock file. A file
// not yet written (the holder is between its lock and its write) reads as
// the zero Holder.
func readHolder(dir string) (Holder, error) {
	f, err := os.Open(filepath.Join(dir, lockFileName))
	if err != nil {
		return Holder{}, fmt.Errorf("read the lock file of %s: %w", dir, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, holderBytesMax))
	if err != nil {
		return Holder{}, fmt.Errorf("read the lock file of %s: %w", dir, err)
	}
	var h Holder
	if len(b) > 0 {
		if err := json.Unmarshal(b, &h); err != nil {
			return Holder{}, fmt.Errorf("read the lock file of %s: %w", dir, err)
		}
	}
	return h, nil
}

// gone reports whether the holder's process has ended (a SIGKILL leaves
// its description behind). A process of another user still counts as
// alive.
func (h Holder) gone() bool {
	return h.PID > 0 && errors.Is(syscall.Kill(h.PID, 0), syscall.ESRCH)
}
