package eventstore

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
)

// LocalStreamState is the state of stream as server e holds it itself,
// leader or follower: a test of a cluster looks at one replica's copy,
// which the JetStream API (answered by the leader) does not show. ok is
// false while e holds no such stream.
func LocalStreamState(e *EmbeddedServer, stream string) (st server.StreamState, ok bool, err error) {
	acc, err := e.srv.JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true})
	if err != nil {
		return st, false, fmt.Errorf("jsz of %s: %w", e.Name(), err)
	}
	for _, sd := range acc.Streams {
		if sd.Name == stream {
			return sd.State, true, nil
		}
	}
	return st, false, nil
}
