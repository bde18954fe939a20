package vault

import (
	"fmt"
	"sync"

	"github.com/fdj/tresor/audit"
)

// saver writes the auditor's state and the vault's position on a
// goroutine of its own, in order, a newer state replacing one not begun
// yet: the copy goes on while megabytes of state are synced. The first
// error stops it, and every later save returns it.
type saver struct {
	stateFile, positionFile string
	next                    chan saved
	done                    chan struct{}
	mu                      sync.Mutex
	err                     error
}

// saved is one round's state file bytes and position.
type saved struct {
	state []byte
	pos   position
}

// startSaver starts the saver's goroutine; close stops it.
func startSaver(stateFile, positionFile string) *saver {
	s := &saver{stateFile: stateFile, positionFile: positionFile, next: make(chan saved, 1), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *saver) run() {
	defer close(s.done)
	for sv := range s.next {
		err := audit.WriteStateBytes(s.stateFile, sv.state)
		if err == nil {
			err = writePosition(s.positionFile, sv.pos)
		}
		if err != nil {
			s.mu.Lock()
			s.err = fmt.Errorf("vault: %w", err)
			s.mu.Unlock()
			return
		}
	}
}

// save hands sv to the goroutine, dropping a save it has not begun: the
// newer state holds all the older one did. It returns an earlier save's
// error.
func (s *saver) save(sv saved) error {
	if err := s.failed(); err != nil {
		return err
	}
	select {
	case <-s.next:
	default:
	}
	s.next <- sv
	return nil
}

// failed returns the first save's error.
func (s *saver) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// close waits for the last save and returns the first error.
func (s *saver) close() error {
	close(s.next)
	<-s.done
	return s.failed()
}
