package eventstore_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runEmbedded starts an embedded server on a fresh directory.
func runEmbedded(tb testing.TB, dir string) *eventstore.EmbeddedServer {
	tb.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Shutdown)
	return srv
}

// forge publishes a copy of ev with another payload straight to the stream.
func forge(tb testing.TB, store eventstore.Store, ev eventstore.RecordedEvent, payload []byte) uint64 {
	tb.Helper()
	ev.ID += "-forged"
	ev.Payload = payload
	return publishRaw(tb, store, ev)
}

// publishRaw publishes ev straight to the stream, bypassing the store, with
// the envelope headers of the first stored format: no append marker, as
// every event stored before it existed.
func publishRaw(tb testing.TB, store eventstore.Store, ev eventstore.RecordedEvent) uint64 {
	tb.Helper()
	ns := store.(*eventstore.NATSStore)
	js, err := jetstream.New(ns.Conn())
	if err != nil {
		tb.Fatal(err)
	}
	msg := &nats.Msg{Subject: ns.Subject(ev.Chain, ev.Aggregate), Header: nats.Header{
		eventstore.HeaderID:         {ev.ID},
		eventstore.HeaderType:       {ev.Type},
		eventstore.HeaderSchema:     {fmt.Sprint(ev.SchemaVersion)},
		eventstore.HeaderChainSeq:   {fmt.Sprint(ev.ChainSeq)},
		eventstore.HeaderRecordedAt: {ev.RecordedAt.Format(time.RFC3339Nano)},
		eventstore.HeaderPrevHash:   {ev.PrevHash.String()},
		eventstore.HeaderHash:       {ev.Hash.String()},
	}, Data: ev.Payload}
	if ev.CorrelationID != "" {
		msg.Header.Set(eventstore.HeaderCorrelation, ev.CorrelationID)
	}
	ack, err := js.PublishMsg(eventstoretest.Ctx(tb, 10*time.Second), msg)
	if err != nil {
		tb.Fatalf("publish %s straight to the stream: %v", ev.ID, err)
	}
	return ack.Sequence
}

// openStore opens a store on srv, closed at cleanup.
func openStore(tb testing.TB, srv *eventstore.EmbeddedServer, cfg eventstore.Config) *eventstore.NATSStore {
	tb.Helper()
	s, err := srv.Open(eventstoretest.Ctx(tb, 30*time.Second), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// embeddedBackend runs the suite against one embedded server.
func embeddedBackend(tb testing.TB) eventstoretest.Backend {
	dir := tb.TempDir()
	srv := runEmbedded(tb, dir)
	return eventstoretest.Backend{
		Open: func(tb testing.TB, cfg eventstore.Config) eventstore.Store {
			return openStore(tb, srv, cfg)
		},
		Forge: forge,
		Restart: func(tb testing.TB) {
			srv.Shutdown()
			srv = runEmbedded(tb, dir)
		},
	}
}

// freePorts reserves n loopback ports by listening and closing: the tiny
// race with other processes is acceptable in tests.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// cluster is a 3-node JetStream cluster on loopback ports.
type cluster struct {
	dirs        []string
	clientPorts []int
	routePorts  []int
	nodes       []*eventstore.EmbeddedServer
}

func startCluster(tb testing.TB) *cluster {
	tb.Helper()
	c := &cluster{clientPorts: freePorts(tb, 3), routePorts: freePorts(tb, 3)}
	root := tb.TempDir()
	for i := range 3 {
		c.dirs = append(c.dirs, filepath.Join(root, fmt.Sprintf("n%d", i)))
	}
	c.nodes = make([]*eventstore.EmbeddedServer, 3)
	c.startAll(tb)
	tb.Cleanup(func() {
		for _, n := range c.nodes {
			if n != nil {
				n.Shutdown()
			}
		}
	})
	return c
}

func (c *cluster) start(tb testing.TB, i int) {
	tb.Helper()
	var routes []string
	for j, p := range c.routePorts {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		}
	}
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{
		DataDir:    c.dirs[i],
		ServerName: fmt.Sprintf("n%d", i),
		ListenAddr: fmt.Sprintf("127.0.0.1:%d", c.clientPorts[i]),
		Cluster: &eventstore.ClusterConfig{Name: "tresor-test",
			ListenAddr: fmt.Sprintf("127.0.0.1:%d", c.routePorts[i]), Routes: routes},
		StartTimeout: 20 * time.Second,
	})
	if err != nil {
		tb.Fatal(err)
	}
	c.nodes[i] = srv
}

func (c *cluster) startAll(tb testing.TB) {
	tb.Helper()
	for i := range c.nodes {
		c.start(tb, i)
	}
	// Wait until JetStream has a meta leader: a stream can be created.
	eventstoretest.Eventually(tb, 30*time.Second, func() error {
		nc, err := nats.Connect(c.urls())
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.AccountInfo(context.Background())
		return err
	})
}

func (c *cluster) stop(i int) {
	c.nodes[i].Shutdown()
	c.nodes[i] = nil
}

func (c *cluster) urls() string {
	var u []string
	for _, p := range c.clientPorts {
		u = append(u, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(u, ",")
}

func (c *cluster) open(tb testing.TB, cfg eventstore.Config) *eventstore.NATSStore {
	tb.Helper()
	cfg.Replicas = 3
	var s *eventstore.NATSStore
	eventstoretest.Eventually(tb, 30*time.Second, func() error {
		var err error
		s, err = eventstore.Connect(eventstoretest.Ctx(tb, 15*time.Second), c.urls(), cfg)
		return err
	})
	tb.Cleanup(func() { s.Close() })
	return s
}

func (c *cluster) backend() eventstoretest.Backend {
	return eventstoretest.Backend{
		Open:  func(tb testing.TB, cfg eventstore.Config) eventstore.Store { return c.open(tb, cfg) },
		Forge: forge,
		Restart: func(tb testing.TB) {
			for i := range c.nodes {
				c.stop(i)
			}
			c.startAll(tb)
		},
	}
}
