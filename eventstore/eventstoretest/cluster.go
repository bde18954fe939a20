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
	c := &Cluster{Nodes: make([]*eventstore.EmbeddedServer, 3)}
	root := tb.TempDir()
	tb.Cleanup(c.stopAll)
	// The ports are picked free, then bound by the servers: another
	// process of the suite can take one in between, and the node that
	// cannot bind it is never ready. A first start that fails is tried
	// again on other ports, in fresh data directories.
	var err error
	for attempt := range clusterStartAttempts {
		c.clientPorts, c.routePorts, c.dirs = FreePorts(tb, 3), FreePorts(tb, 3), nil
		for i := range 3 {
			c.dirs = append(c.dirs, filepath.Join(root, fmt.Sprintf("a%d", attempt), fmt.Sprintf("n%d", i)))
		}
		if err = c.startNodes(); err == nil {
			break
		}
		tb.Logf("cluster start %d of %d: %v", attempt+1, clusterStartAttempts, err)
		c.stopAll()
	}
	if err != nil {
		tb.Fatal(err)
	}
	c.waitForMetaLeader(tb)
	return c
}

// clusterStartAttempts bounds StartCluster's tries on fresh ports.
const clusterStartAttempts = 3

// Start starts node i on its ports and data directory.
func (c *Cluster) Start(tb testing.TB, i int) {
	tb.Helper()
	if err := c.start(i); err != nil {
		tb.Fatal(err)
	}
}

func (c *Cluster) start(i int) error {
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
		return err
	}
	c.Nodes[i] = srv
	return nil
}

// StartAfter starts nodes after d, in the background, so that the test
// can meanwhile start what must wait for them; the function it returns
// waits until they have started and fails the test if one could not.
func (c *Cluster) StartAfter(tb testing.TB, d time.Duration, nodes ...int) (wait func()) {
	done := make(chan error, 1)
	go func() {
		time.Sleep(d)
		for _, i := range nodes {
			if err := c.start(i); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return func() {
		tb.Helper()
		if err := <-done; err != nil {
			tb.Fatal(err)
		}
	}
}

// startNodes starts every node, stopping at the first that fails.
func (c *Cluster) startNodes() error {
	for i := range c.Nodes {
		if err := c.start(i); err != nil {
			return err
		}
	}
	return nil
}

// stopAll stops the nodes still running.
func (c *Cluster) stopAll() {
	for i, n := range c.Nodes {
		if n != nil {
			c.Stop(i)
		}
	}
}

// StartAll starts every node and waits until JetStream has a meta leader:
// a stream can be created.
func (c *Cluster) StartAll(tb testing.TB) {
	tb.Helper()
	for i := range c.Nodes {
		c.Start(tb, i)
	}
	c.waitForMetaLeader(tb)
}

// waitForMetaLeader waits until JetStream has a meta leader.
func (c *Cluster) waitForMetaLeader(tb testing.TB) {
	tb.Helper()
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

// Dir is node i's data directory: JetStream's files are under its
// "jetstream" directory, for a test that damages them while the node is
// down.
func (c *Cluster) Dir(i int) string { return c.dirs[i] }

// URL is node i's client URL.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.clientPorts[i]) }

// URLs is the comma-separated client URLs of every node, the list a
// client reconnects across.
func (c *Cluster) URLs() string { return ClientURLs(c.clientPorts) }

// ClientURLs is the comma-separated loopback client URLs of nodes
// listening on ports.
func ClientURLs(ports []int) string {
	var u []string
	for _, port := range ports {
		u = append(u, fmt.Sprintf("nats://127.0.0.1:%d", port))
	}
	return strings.Join(u, ",")
}

// Index returns the index of the node named name ("n1"), -1 for none.
func (c *Cluster) Index(name string) int { return NodeIndex(name, len(c.dirs)) }

// NodeIndex returns the index of the node named name ("n1") among nodes
// named n0, n1, …, -1 for none.
func NodeIndex(name string, nodes int) int {
	for i := range nodes {
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
