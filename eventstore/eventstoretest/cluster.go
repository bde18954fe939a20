package eventstoretest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a 3-node JetStream cluster on loopback ports, each node with
// its own data directory, for tests of replicated streams and of what
// survives the loss of a node.
type Cluster struct {
	dirs        []string
	clientPorts []int
	routePorts  []int
	// Nodes are the running servers; a stopped node is nil.
	Nodes []*eventstore.EmbeddedServer
}

// StartCluster starts a 3-node cluster and waits until JetStream has a
// meta leader. The nodes stop at cleanup.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c := &Cluster{clientPorts: FreePorts(tb, 3), routePorts: FreePorts(tb, 3)}
	root := tb.TempDir()
	for i := range 3 {
		c.dirs = append(c.dirs, filepath.Join(root, fmt.Sprintf("n%d", i)))
	}
	c.Nodes = make([]*eventstore.EmbeddedServer, 3)
	c.StartAll(tb)
	tb.Cleanup(func() {
		for i, n := range c.Nodes {
			if n != nil {
				c.Stop(i)
			}
		}
	})
	return c
}

// Start starts node i on its ports and data directory.
func (c *Cluster) Start(tb testing.TB, i int) {
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
	c.Nodes[i] = srv
}

// StartAll starts every node and waits until JetStream has a meta leader:
// a stream can be created.
func (c *Cluster) StartAll(tb testing.TB) {
	tb.Helper()
	for i := range c.Nodes {
		c.Start(tb, i)
	}
	Eventually(tb, 30*time.Second, func() error {
		nc, err := nats.Connect(c.URLs())
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

// Stop shuts node i down, as the loss of a machine would.
func (c *Cluster) Stop(i int) {
	c.Nodes[i].Shutdown()
	c.Nodes[i] = nil
}

// URL is node i's client URL.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.clientPorts[i]) }

// URLs is the comma-separated client URLs of every node, the list a
// client reconnects across.
func (c *Cluster) URLs() string {
	var u []string
	for i := range c.clientPorts {
		u = append(u, c.URL(i))
	}
	return strings.Join(u, ",")
}

// Index returns the index of the node named name ("n1"), -1 for none.
func (c *Cluster) Index(name string) int {
	for i := range c.dirs {
		if fmt.Sprintf("n%d", i) == name {
			return i
		}
	}
	return -1
}

// FreePorts reserves n loopback ports by listening and closing: the tiny
// race with other processes is acceptable in tests.
func FreePorts(tb testing.TB, n int) []int {
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
