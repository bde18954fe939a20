package eventstore

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// movedGrace is how long an answer to a batch in flight is still awaited
// once the way to the stream's leader moved: a new leader commits what its
// predecessor replicated to it as it takes over, and answers for it; a
// batch published while the connection was away goes out as it comes back.
const movedGrace = 200 * time.Millisecond

// movedSettle is how long after a move a batch's answer is awaited at most,
// for batches published since: the new leader's interest in the stream's
// subjects takes a moment to reach every server, and a batch routed to the
// old leader meanwhile is dropped without an answer.
const movedSettle = 500 * time.Millisecond

// leaderMoves tells a store's committers when the way to the stream's
// leader moved: JetStream announced the stream's new leader, or the
// connection came back after a loss. A batch in flight then is seldom
// answered: its outcome is looked for on the stream after movedGrace,
// rather than after the whole RequestTimeout.
type leaderMoves struct {
	mu    sync.Mutex
	moved chan struct{} // closed (and replaced) at the next move
	at    time.Time     // the last move

	sub      *nats.Subscription
	statuses chan nats.Status
}

// watchLeader starts s.moves. A read-only store commits nothing and does
// not listen: the regulator's user may not.
func (s *NATSStore) watchLeader() error {
	m := &leaderMoves{moved: make(chan struct{})}
	s.moves = m
	if s.cfg.ReadOnly {
		return nil
	}
	sub, err := s.nc.Subscribe(LeaderElectedPrefix+s.cfg.Stream, func(*nats.Msg) { m.note() })
	if err != nil {
		return err
	}
	m.sub, m.statuses = sub, s.nc.StatusChanged(nats.CONNECTED)
	go func() {
		for range m.statuses {
			m.note()
		}
	}()
	return nil
}

// note records a move and wakes those waiting on the last.
func (m *leaderMoves) note() {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.moved)
	m.moved, m.at = make(chan struct{}), time.Now()
}

// next returns a channel closed at the next move, and since when the way
// has not moved (the zero time when it never has).
func (m *leaderMoves) next() (<-chan struct{}, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.moved, m.at
}

// stop ends the watch.
func (m *leaderMoves) stop(nc *nats.Conn) {
	if m.sub != nil {
		_ = m.sub.Unsubscribe()
		nc.RemoveStatusListener(m.statuses)
	}
}
