package eventstoretest

import (
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// RunEmbedded starts an embedded server on dir, shut down at cleanup.
func RunEmbedded(tb testing.TB, dir string) *eventstore.EmbeddedServer {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Shutdown)
	return srv
}

// OpenEmbedded opens a store on srv, closed at cleanup.
func OpenEmbedded(tb testing.TB, srv *eventstore.EmbeddedServer, cfg eventstore.Config) *eventstore.NATSStore {
	tb.Helper()
	s, err := srv.Open(Ctx(tb, 30*time.Second), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// OpenOnCluster opens a store of three replicas on cluster c, trying
// again while the cluster elects its leaders, closed at cleanup.
func OpenOnCluster(tb testing.TB, c *Cluster, cfg eventstore.Config) *eventstore.NATSStore {
	tb.Helper()
	cfg.Replicas = 3
	var s *eventstore.NATSStore
	Eventually(tb, 30*time.Second, func() error {
		var err error
		s, err = eventstore.Connect(Ctx(tb, 15*time.Second), c.URLs(), cfg)
		return err
	})
	tb.Cleanup(func() { s.Close() })
	return s
}
