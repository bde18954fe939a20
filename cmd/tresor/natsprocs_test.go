package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsProcs is a three-node JetStream cluster of nats-server processes,
// each with its own configuration, data directory and log file. Unlike
// eventstoretest.Cluster, whose servers run inside the test, a node can be
// killed with SIGKILL: it leaves its files as a crashed machine does, and
// its peers learn of it only by its silence.
type natsProcs struct {
	tb          testing.TB
	dir         string
	clientPorts []int
	routePorts  []int
	cmds        []*exec.Cmd
	done        []chan error
}

var (
	natsBinOnce sync.Once
	natsBin     string
	natsBinErr  error
)

// natsServerBin builds nats-server, once, from the module's own version.
func natsServerBin(tb testing.TB) string {
	tb.Helper()
	natsBinOnce.Do(func() {
		natsBin = filepath.Join(filepath.Dir(tresorBin), "nats-server")
		out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsBinErr = fmt.Errorf("build nats-server: %v\n%s", err, out)
		}
	})
	if natsBinErr != nil {
		tb.Fatal(natsBinErr)
	}
	return natsBin
}

// natsStartAttempts bounds the tries on fresh ports: a port picked free
// can be taken by another process before the server binds it.
const natsStartAttempts = 3

// startNATSProcs starts the three nodes and waits for JetStream's meta
// leader; the nodes are killed at cleanup.
func startNATSProcs(tb testing.TB) *natsProcs {
	tb.Helper()
	bin := natsServerBin(tb)
	p := &natsProcs{tb: tb, cmds: make([]*exec.Cmd, 3), done: make([]chan error, 3)}
	tb.Cleanup(p.killAll)
	for attempt := range natsStartAttempts {
		p.dir = filepath.Join(tb.TempDir(), fmt.Sprintf("a%d", attempt))
		p.clientPorts, p.routePorts = eventstoretest.FreePorts(tb, 3), eventstoretest.FreePorts(tb, 3)
		for i := range 3 {
			p.launch(bin, i)
		}
		if err := p.waitMetaLeader(30 * time.Second); err == nil {
			return p
		} else if attempt == natsStartAttempts-1 {
			tb.Fatalf("nats-server cluster: %v\n%s", err, p.logs())
		}
		p.killAll()
	}
	return p
}

// config is node i's configuration: every write synced before it is
// acknowledged, and the batch size Tresor's in-process servers allow.
func (p *natsProcs) config(i int) string {
	var routes []string
	for j, port := range p.routePorts {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", port))
		}
	}
	return fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
logfile: %q
logtime_utc: true
jetstream {
  store_dir: %q
  sync_interval: always
  limits { batch { max_msgs: %d } }
}
cluster {
  name: tresor-test
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, i, p.clientPorts[i], p.logFile(i), filepath.Join(p.dir, fmt.Sprintf("n%d", i)),
		eventstore.CommitBatchEventsMax, p.routePorts[i], strings.Join(routes, ", "))
}

func (p *natsProcs) logFile(i int) string { return filepath.Join(p.dir, fmt.Sprintf("n%d.log", i)) }

// launch writes node i's configuration and starts it.
func (p *natsProcs) launch(bin string, i int) {
	p.tb.Helper()
	conf := filepath.Join(p.dir, fmt.Sprintf("n%d.conf", i))
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		p.tb.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(p.config(i)), 0o600); err != nil {
		p.tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		p.tb.Fatalf("start nats-server n%d: %v", i, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	p.cmds[i], p.done[i] = cmd, done
}

// start starts node i again, on its ports and data directory.
func (p *natsProcs) start(i int) { p.launch(natsServerBin(p.tb), i) }

// kill ends node i with SIGKILL and waits until it is gone.
func (p *natsProcs) kill(i int) { p.signal(i, syscall.SIGKILL) }

// stop ends node i with SIGTERM, a clean shutdown, and waits for it.
func (p *natsProcs) stop(i int) { p.signal(i, syscall.SIGTERM) }

func (p *natsProcs) signal(i int, sig syscall.Signal) {
	p.tb.Helper()
	if err := p.cmds[i].Process.Signal(sig); err != nil {
		p.tb.Fatalf("signal %v to nats-server n%d: %v", sig, i, err)
	}
	select {
	case <-p.done[i]:
		p.cmds[i] = nil
	case <-time.After(30 * time.Second):
		p.tb.Fatalf("nats-server n%d still running 30 s after %v", i, sig)
	}
}

func (p *natsProcs) killAll() {
	for i, cmd := range p.cmds {
		if cmd != nil {
			cmd.Process.Kill()
			<-p.done[i]
			p.cmds[i] = nil
		}
	}
}

// URLs is the comma-separated client URLs of the nodes.
func (p *natsProcs) URLs() string { return eventstoretest.ClientURLs(p.clientPorts) }

// index returns the index of the node named name ("n1"), -1 for none.
func (p *natsProcs) index(name string) int { return eventstoretest.NodeIndex(name, len(p.clientPorts)) }

// waitMetaLeader waits until JetStream answers, or a node has exited.
func (p *natsProcs) waitMetaLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		for i, d := range p.done {
			select {
			case err := <-d:
				p.cmds[i] = nil
				d <- err
				return fmt.Errorf("nats-server n%d exited: %v", i, err)
			default:
			}
		}
		err := func() error {
			nc, err := nats.Connect(p.URLs())
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = js.AccountInfo(ctx)
			return err
		}()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no JetStream meta leader after %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leaderLine is JetStream's notice of a stream leader's election, with the
// log's UTC timestamp (microseconds).
var leaderLine = regexp.MustCompile(`(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6}) \[INF\] JetStream cluster new stream leader for '\$G > ([^']+)'`)

// elected returns when a node's log first says stream was given a new
// leader at or after since; ok is false while none has.
func (p *natsProcs) elected(stream string, since time.Time) (at time.Time, ok bool) {
	at, ok = p.elections(since)[stream]
	return at, ok
}

// elections returns, for each stream given a new leader at or after
// since, when the first was, as the nodes' logs say.
func (p *natsProcs) elections(since time.Time) map[string]time.Time {
	first := map[string]time.Time{}
	for i := range p.clientPorts {
		f, err := os.Open(p.logFile(i))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			m := leaderLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			t, err := time.Parse("2006/01/02 15:04:05.000000", m[1])
			if at, ok := first[m[2]]; err == nil && !t.Before(since) && (!ok || t.Before(at)) {
				first[m[2]] = t
			}
		}
		f.Close()
	}
	return first
}

// logs is the tail of every node's log, for a failure's message.
func (p *natsProcs) logs() string {
	var b strings.Builder
	for i := range p.clientPorts {
		data, _ := os.ReadFile(p.logFile(i))
		fmt.Fprintf(&b, "nats-server n%d:\n%s\n", i, data[max(0, len(data)-4000):])
	}
	return b.String()
}

// waitCurrent waits until every stream of the cluster (Tresor's, and the
// buckets') has a leader and two replicas, both current: a node just
// restarted has caught up, and losing another keeps every quorum.
func (p *natsProcs) waitCurrent(js jetstream.JetStream, timeout time.Duration) {
	p.tb.Helper()
	eventstoretest.Eventually(p.tb, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		names := js.StreamNames(ctx)
		for name := range names.Name() {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return err
			}
			if c := info.Cluster; c == nil || c.Leader == "" || len(c.Replicas) != 2 {
				return fmt.Errorf("stream %s: %+v", name, c)
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current {
					return fmt.Errorf("stream %s: replica %s not current", name, r.Name)
				}
			}
		}
		return names.Err()
	})
}

// ledBy returns the streams whose leader is node name.
func (p *natsProcs) ledBy(js jetstream.JetStream, name string) []string {
	p.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var led []string
	infos := js.ListStreams(ctx)
	for info := range infos.Info() {
		if info.Cluster != nil && info.Cluster.Leader == name {
			led = append(led, info.Config.Name)
		}
	}
	if err := infos.Err(); err != nil {
		p.tb.Fatalf("list streams: %v", err)
	}
	return led
}
