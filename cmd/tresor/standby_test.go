package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// standbyClients play through the three nodes during the faults.
	standbyClients = 6
	// standbyLoad is how long the clients play before each fault.
	standbyLoad = 700 * time.Millisecond
	// standbyRequestMax is the clients' timeout for one request: a frozen
	// node's HTTP server answers nothing, and a client then retries on
	// the next node with the same key (the crash suite's minute would
	// leave every client waiting on it).
	standbyRequestMax = 3 * time.Second
	// standbyRecoveryMax bounds the wait for the first command acknowledged
	// after a fault: the goal is 3 s; the bound leaves room for a slow
	// election on a loaded machine, and the figure is logged.
	standbyRecoveryMax = 30 * time.Second
)

// clusterKeys starts a three-node NATS cluster and writes the keys the
// nodes share into data; it returns the cluster and the seal's public key.
func clusterKeys(tb testing.TB, data string) (*eventstoretest.Cluster, string) {
	tb.Helper()
	return eventstoretest.StartCluster(tb), writeClusterKeys(tb, data)
}

// writeClusterKeys writes the keys the nodes share into data and returns
// the seal's public key.
func writeClusterKeys(tb testing.TB, data string) string {
	tb.Helper()
	keys := filepath.Join(data, "keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		tb.Fatal(err)
	}
	var sealSeed []byte
	for _, name := range []string{"master.key", "seal.ed25519", "token.key"} {
		key := make([]byte, 32)
		rand.Read(key)
		if name == "seal.ed25519" {
			sealSeed = key
		}
		if err := os.WriteFile(filepath.Join(keys, name), key, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return hex.EncodeToString(ed25519.NewKeyFromSeed(sealSeed).Public().(ed25519.PublicKey))
}

// startNodes starts three `tresor serve` on data with args and waits until
// they are ready; their logs are shown when the test fails.
func startNodes(tb testing.TB, data string, args ...string) []*server {
	tb.Helper()
	var nodes []*server
	for range 3 {
		n := startListening(tb, data, args...)
		n.retryUnavailable = true
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.written = nodes[0].written
		n.waitReady(60 * time.Second)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			for i, n := range nodes {
				tb.Logf("node %d:\n%s", i, n.lastLogs())
			}
		}
	})
	return nodes
}

// BenchmarkClusterPlays drives whole plays through three `tresor serve` on
// a three-node NATS cluster (replicas 3): all through the writer's node,
// then spread over the three (two in three commands forwarded to the
// writer). Every command is executed by the one writer either way.
func BenchmarkClusterPlays(b *testing.B) {
	data := b.TempDir()
	c, _ := clusterKeys(b, data)
	nodes := startNodes(b, data, "--nats", c.URLs(), "--replicas", "3")
	nodes[0].must(201, call{"POST", "/v1/emissions", nodes[0].token("operator", ""), "", `{"price":"0.50","blocks":1}`})
	writer := slices.IndexFunc(nodes, func(s *server) bool { return s.clusterRole() == "writer" })
	if writer < 0 {
		b.Fatal("no writer among the nodes")
	}
	b.Run("writer-node", func(b *testing.B) { drivePlays(b, "w", nodes[writer]) })
	b.Run("three-nodes", func(b *testing.B) {
		drivePlays(b, "t", nodes[writer], nodes[(writer+1)%3], nodes[(writer+2)%3])
	})
}

// clusterRole returns a node's role as its health tells ("" when it does
// not answer).
func (s *server) clusterRole() string {
	role, _ := s.clusterStatus()["role"].(string)
	return role
}

// clusterStatus returns the cluster object of a node's health (nil when
// it does not answer).
func (s *server) clusterStatus() map[string]any {
	status, m, err := s.send(call{"GET", "/v1/health", "", "", ""})
	if err != nil || status != 200 {
		return nil
	}
	c, _ := m["cluster"].(map[string]any)
	return c
}

// standbyCluster is three `tresor serve` on a three-node NATS cluster,
// with the crash suite's clients playing through all of them.
type standbyCluster struct {
	t     *testing.T
	run   *crashRun
	args  []string
	nodes []*server
}

// writer returns the index of the node whose health says it is the writer,
// waiting for one; skip is a node not to ask (-1 for none).
func (c *standbyCluster) writer(skip int) int {
	c.t.Helper()
	w := -1
	eventstoretest.Eventually(c.t, standbyRecoveryMax, func() error {
		for i, n := range c.nodes {
			if i != skip && n.clusterRole() == "writer" {
				w = i
				return nil
			}
		}
		return fmt.Errorf("no writer among the nodes")
	})
	return w
}

// fault lets the clients play, applies the fault and waits until a request
// sent after it is acknowledged; it logs how long that took and how many
// requests sent after the fault failed (503, 429 or no answer) before;
// it returns when the fault was applied and how long that took.
func (c *standbyCluster) fault(name string, apply func()) (at time.Time, took time.Duration) {
	c.t.Helper()
	time.Sleep(standbyLoad)
	at = time.Now()
	apply()
	var failed int
	eventstoretest.Eventually(c.t, standbyRecoveryMax, func() error {
		var ok bool
		if took, failed, ok = c.run.journal.recovery(at); !ok {
			return fmt.Errorf("%s: no command acknowledged since", name)
		}
		return nil
	})
	c.t.Logf("%s: first command acknowledged %s after the fault; %d requests failed meanwhile", name, took.Round(time.Millisecond), failed)
	return at, took
}

// restart starts node i again (a standby now) and sends the clients to it.
func (c *standbyCluster) restart(i int) {
	c.t.Helper()
	c.nodes[i] = startListening(c.t, c.run.data, c.args...)
	c.nodes[i].waitReady(60 * time.Second)
	urls := make([]string, len(c.nodes))
	for j, n := range c.nodes {
		urls[j] = n.url
	}
	c.run.urls.Store(&urls)
}

// streamLeader returns the NATS node that leads the stream.
func (c *standbyCluster) streamLeader(js jetstream.JetStream) string {
	c.t.Helper()
	var leader string
	eventstoretest.Eventually(c.t, 10*time.Second, func() error {
		st, err := js.Stream(eventstoretest.Ctx(c.t, 5*time.Second), "TRESOR")
		if err != nil {
			return err
		}
		info, err := st.Info(eventstoretest.Ctx(c.t, 5*time.Second))
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("no stream leader yet: %v", err)
		}
		leader = info.Cluster.Leader
		return nil
	})
	return leader
}

// TestStandbyTakesOverAfterKill9: three `tresor serve` on a three-node NATS
// cluster (replicas 3); the crash suite's clients stake, throw, deposit and
// withdraw through all three nodes, half of their writes sent twice at once
// through two nodes, each retry on the next node with the same key. The
// faults, in turn: kill -9 of the writer (it restarts as a standby), a
// graceful step-down of the stream's leader, the loss of the NATS node that
// leads the stream, and the writer frozen (SIGSTOP) past the lease's TTL
// then resumed: it appends nothing after another node took over, answers
// nothing from its old ledger (a throw of a play its successor recorded,
// sent to it as it resumes, is answered 200 or 503, never 404:
// resumedWriterProbe), and rejoins as a standby. No other serve exits. Then
// every acknowledged answer is in the stream once, as answered; nothing is
// there twice; every play is settled; every node shows the same balances;
// the audit passes. Each fault's time to the first acknowledged command,
// and the requests that failed meanwhile, are logged.
func TestStandbyTakesOverAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster and 3 processes: skipped in -short")
	}
	r := newCrashRun(t)
	r.clients = standbyClients
	r.http.Timeout = standbyRequestMax
	nc3, pub := clusterKeys(t, r.data)
	r.stored, r.auditKey = []string{"--nats", nc3.URLs()}, []string{"--public-key", pub}
	c := &standbyCluster{t: t, run: r, args: append([]string{"--nats", nc3.URLs(), "--replicas", "3"}, r.serveArgs...)}
	c.nodes = startNodes(t, r.data, c.args...)
	start := time.Now()
	r.setUp(c.nodes[c.writer(-1)], c.nodes...)

	killed := c.writer(-1)
	c.fault("kill -9 of the writer", func() { r.kill(c.nodes[killed]) })
	c.restart(killed)

	nc, err := nats.Connect(nc3.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c.fault("stream leader stepped down", func() {
		if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.TRESOR", nil, 5*time.Second); err != nil {
			t.Fatalf("stream leader step-down: %v", err)
		}
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.streamLeader(js)
	c.fault(fmt.Sprintf("NATS node %s (the stream's leader) lost", leader), func() { nc3.Stop(nc3.Index(leader)) })

	fi := c.writer(-1)
	frozen := c.nodes[fi]
	c.fault("writer frozen (SIGSTOP) past the lease's TTL", func() { frozen.cmd.Process.Signal(syscall.SIGSTOP) })
	probed := c.resumedWriterProbe(fi, c.writer(fi))
	frozen.cmd.Process.Signal(syscall.SIGCONT)
	probed()
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		if role := frozen.clusterRole(); role != "standby" {
			return fmt.Errorf("the resumed writer's role: %q, want standby", role)
		}
		return nil
	})
	c.standbyAnswers(fi)

	for i, n := range c.nodes {
		select {
		case err := <-n.done:
			t.Fatalf("node %d exited: %v\n%s", i, err, n.logs)
		default:
		}
	}
	r.stopClients()
	r.waitSettled(c.nodes[0])
	f := r.check("end", true)
	c.sameBalances()
	t.Logf("standby suite: %s, %d clients (seed %d): %d HTTP requests (retries included), %d answers, "+
		"%d acknowledged answers checked against the stream (%d writes), %d events, %d plays (%d completed by the system)",
		time.Since(start).Round(time.Second), r.clients, r.seed, f.requests, f.answers, f.checked, f.writes, f.events, f.plays, f.bySystem)
}

// resumedWriterProbe, while node frozen (the writer, SIGSTOPped past its
// lease) is still stopped, has node writer (its successor) record a play
// with its first throw for a player of its own, then sends that throw
// again to the frozen node, where it waits in the socket, and more copies
// once it is resumed. It returns what to call right after resuming it:
// every answer of the resumed node must be the first throw's (200, forwarded to the writer in
// charge, or answered from a ledger that has it) or 503 (retried on the
// writer in charge); never an answer from its old ledger, which has no
// such play (404) — the answer a resumed writer gave before it asked
// whether it was still in charge before answering from its ledger alone.
func (c *standbyCluster) resumedWriterProbe(frozen, writer int) func() {
	c.t.Helper()
	player, ws := "probe", c.nodes[writer]
	op, tok := ws.token("operator", ""), ws.token("player", "probe")
	send := func(n *server, w *crashWrite, want int) crashAnswer {
		c.t.Helper()
		c.run.journal.sending(w)
		status, b, err := c.run.exchange(n.url, w.call)
		if err != nil {
			c.t.Fatalf("%v: %v", w, err)
		}
		a := crashAnswer{w: w, status: status}
		a.decode(b)
		if status != want || a.bad != "" {
			c.t.Fatalf("%v: %d %s %s", w, status, a.bad, b)
		}
		c.run.journal.answered(a)
		return a
	}
	send(ws, &crashWrite{call: call{"PUT", "/v1/players/" + player, op, "", crashLimits}, kind: kindLimits, player: player}, http.StatusOK)
	send(ws, &crashWrite{call: call{"POST", "/v1/players/" + player + "/deposits", op, "probe-deposit", `{"amount":"5.00"}`},
		kind: kindDeposit, player: player, amount: 500}, http.StatusOK)
	play := send(ws, &crashWrite{call: call{"POST", "/v1/players/" + player + "/plays", tok, "probe-stake", `{"stake":"` + crashStake.String() + `"}`},
		kind: kindStake, player: player, amount: crashStake}, http.StatusCreated).body.PlayID
	c.run.journal.abandon(play)
	throw := &crashWrite{call: call{"POST", "/v1/players/" + player + "/plays/" + play + "/throws", tok, "", `{"throw":1}`},
		kind: kindThrow, player: player, play: play, throw: 1}
	send(ws, throw, http.StatusOK)
	type reply struct {
		status int
		body   []byte
		err    error
	}
	// Copies of it, each on a connection of its own: two wait in the
	// frozen node's socket, and more follow a millisecond apart once it is
	// resumed (the caller resumes it, then calls what is returned), so
	// that some are read in the moment before it has heard of its lease.
	const queued, following = 2, 8
	again := make(chan reply, queued+following)
	sendAgain := func() {
		c.run.journal.sending(throw)
		go func() {
			status, b, err := c.run.exchange(c.nodes[frozen].url, throw.call)
			again <- reply{status, b, err}
		}()
	}
	for range queued {
		sendAgain()
	}
	time.Sleep(200 * time.Millisecond)
	return func() {
		c.t.Helper()
		for range following {
			sendAgain()
			time.Sleep(time.Millisecond)
		}
		const copies = queued + following
		statuses := make([]int, 0, copies)
		for range copies {
			r := <-again
			if r.err != nil {
				c.t.Fatalf("%v again through the resumed writer: %v", throw, r.err)
			}
			a := crashAnswer{w: throw, status: r.status}
			a.decode(r.body)
			if r.status != http.StatusServiceUnavailable && (r.status != http.StatusOK || a.bad != "") {
				c.t.Fatalf("%v again through the resumed writer: %d %s %s, want its first answer or 503", throw, r.status, a.bad, r.body)
			}
			if r.status == http.StatusOK {
				c.run.journal.answered(a)
			}
			statuses = append(statuses, r.status)
		}
		c.t.Logf("%v again through the resumed writer, %d times: answered %v", throw, copies, statuses)
	}
}

// standbyAnswers deposits through node i, a standby: it forwards the
// command to the writer and answers it.
func (c *standbyCluster) standbyAnswers(i int) {
	c.t.Helper()
	player := "crash-0"
	w := &crashWrite{
		call: call{"POST", "/v1/players/" + player + "/deposits", c.nodes[i].token("operator", ""), "through-the-resumed-standby", `{"amount":"1.00"}`},
		kind: kindDeposit, player: player, amount: domain.Amount(100),
	}
	c.run.journal.sending(w)
	// Just resumed, it may still be reconnecting to NATS or reading the
	// lease: 503s are retried, as a client would.
	eventstoretest.Eventually(c.t, 10*time.Second, func() error {
		status, b, err := c.run.exchange(c.nodes[i].url, w.call)
		if err != nil || status == http.StatusServiceUnavailable {
			return fmt.Errorf("deposit through the resumed standby: %d %s %v", status, b, err)
		}
		a := crashAnswer{w: w, status: status}
		a.decode(b)
		c.run.journal.answered(a)
		if status != http.StatusOK {
			c.t.Fatalf("deposit through the resumed standby: %d %s", status, b)
		}
		return nil
	})
}

// sameBalances checks that every node, read at the stream's last sequence,
// shows each player the same balance.
func (c *standbyCluster) sameBalances() {
	c.t.Helper()
	op := c.nodes[0].token("operator", "")
	for p := range c.run.clients {
		path := fmt.Sprintf("/v1/players/crash-%d/account?min_seq=%d", p, c.run.stream.last)
		var balances []any
		for _, n := range c.nodes {
			balances = append(balances, n.must(200, call{"GET", path, op, "", ""})["balance"])
		}
		if balances[0] != balances[1] || balances[0] != balances[2] {
			c.t.Errorf("crash-%d: balances on the three nodes %v", p, balances)
		}
	}
}

// TestServeLeavesAHungNATSNode runs `tresor serve` on a three-node cluster
// through a proxy in front of one node, its only URL, and freezes the
// proxy: the node hangs with the connection open, as a stopped process or a
// partition leaves it. The node's pings notice, it reconnects to a node the
// cluster told it of, and commands are answered again within seconds (with
// nats.go's ping defaults, after 4 to 5 minutes). A key answered before the
// hang and retried after it answers the same: one effect.
func TestServeLeavesAHungNATSNode(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	data := t.TempDir()
	c, _ := clusterKeys(t, data)
	px := eventstoretest.StartProxy(t, strings.TrimPrefix(c.URL(0), "nats://"))
	s := startServe(t, data, "--nats", "nats://"+px.Addr, "--replicas", "3")
	op, _ := s.fundedPlayer()
	before := s.must(200, call{"POST", "/v1/players/p-42/deposits", op, "before", `{"amount":"1.00"}`})

	px.Freeze()
	hung := time.Now()
	var after map[string]any
	for n := 0; after == nil; n++ {
		if time.Since(hung) > 30*time.Second {
			t.Fatalf("no deposit answered 30 s after the NATS node hung (%d tries)\n%s", n, s.logs)
		}
		// One key until it is answered: a 503 may have been recorded.
		switch status, m, err := s.send(call{"POST", "/v1/players/p-42/deposits", op, "after", `{"amount":"2.00"}`}); {
		case err == nil && status == 200:
			after = m
		case err == nil && status != 503:
			t.Fatalf("deposit after the hang: %d %v", status, m)
		default:
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("a deposit answered %s after the NATS node hung", time.Since(hung).Round(100*time.Millisecond))
	if again := s.must(200, call{"POST", "/v1/players/p-42/deposits", op, "before", `{"amount":"1.00"}`}); again["balance_after"] != before["balance_after"] {
		t.Fatalf("the key answered before the hang: balance_after %v, then %v", before["balance_after"], again["balance_after"])
	}
	if acct := s.must(200, call{"GET", fmt.Sprintf("/v1/players/p-42/account?min_seq=%.0f", after["seq"]), op, "", ""}); acct["balance"] != "23.00" {
		t.Fatalf("balance %v after deposits of 20, 1 and 2: want 23.00", acct["balance"])
	}
}

// clusterWithoutQuorum starts a three-node cluster, writes the nodes' keys
// into a data directory and stops two of the nodes, as a cluster still
// restarting is: no quorum, no leader.
func clusterWithoutQuorum(t *testing.T) (*eventstoretest.Cluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	data := t.TempDir()
	c, _ := clusterKeys(t, data)
	c.Stop(1)
	c.Stop(2)
	return c, data
}

// TestServeWaitsForARestartingCluster starts `tresor serve` while two NATS
// nodes of three are down, as a node started with its cluster (a machine
// room's power back, every unit at once) meets it: no quorum, no leader
// yet. The serve waits instead of exiting within its first request
// timeout, and is ready, taking deposits, once the nodes are back.
func TestServeWaitsForARestartingCluster(t *testing.T) {
	c, data := clusterWithoutQuorum(t)
	// back after two request timeouts of a cluster node: before, serve
	// exited on the first ("create or look up stream TRESOR: context
	// deadline exceeded")
	back := c.StartAfter(t, 4*time.Second, 1, 2)
	s := startListening(t, data, "--nats", c.URLs(), "--replicas", "3")
	back()
	s.waitReady(60 * time.Second)
	op, _ := s.fundedPlayer()
	if acct := s.must(200, call{"POST", "/v1/players/p-42/deposits", op, "after", `{"amount":"2.00"}`}); acct["balance_after"] != "22.00" {
		t.Fatalf("deposit once the cluster is back: %v", acct)
	}
}

// TestServeWaitingForItsClusterSaysSoAndStopsCleanly starts `tresor serve`
// on a cluster with two nodes of three down. While its stream cannot open,
// it listens and says why (it kept its port closed for up to 30 s per
// open, and a load balancer saw a refused connection): liveness 200 with
// readiness "starting", readiness and every request 503 with Retry-After,
// naming what it opens, and its log names each try. A SIGTERM then stops
// it at once with status 0, as a supervisor stopping it expects (it exited
// 1 on "context canceled"): it has written nothing.
func TestServeWaitingForItsClusterSaysSoAndStopsCleanly(t *testing.T) {
	c, data := clusterWithoutQuorum(t)
	s := startListening(t, data, "--nats", c.URLs(), "--replicas", "3")
	health, err := s.probe("/v1/health", "")
	if err != nil || health.status != 200 || health.body["readiness"] != "starting" {
		t.Fatalf("health while the stream opens: %+v %v", health, err)
	}
	ready, err := s.probe("/v1/ready", "")
	if err != nil || ready.status != 503 || ready.retryAfter != "1" || ready.body["status"] != "starting" || ready.body["reason"] != "opening the event stream" {
		t.Fatalf("readiness while the stream opens: %+v %v", ready, err)
	}
	op := s.token("operator", "")
	status, problem := s.do(call{"POST", "/v1/players/p-42/deposits", op, "early", `{"amount":"2.00"}`})
	if status != 503 || problem["code"] != "unavailable" || !strings.Contains(fmt.Sprint(problem["detail"]), "opening the event stream") {
		t.Fatalf("a deposit while the stream opens: %d %v", status, problem)
	}
	if page, err := s.probe("/", ""); err != nil || page.status != 200 || !strings.Contains(page.raw, "<html") {
		t.Fatalf("the home page while the stream opens: %d %v", page.status, err)
	}
	eventually(t, 10*time.Second, func() bool {
		return strings.Contains(s.logs.String(), `msg="not open yet: trying again" open="stream TRESOR" try=1`)
	})
	s.stop()
}

// TestASecondServeUnderTheSameNodeNameIsRefused starts `tresor serve` twice
// with the same --node-name on one cluster, as a unit started twice would:
// the second is refused, naming the process that holds the name (before,
// it ran as a second node of that name, health and logs telling of two).
// Once the first is killed (kill -9: it releases nothing), a serve under
// the name starts, its claim having lapsed after the lease's TTL.
func TestASecondServeUnderTheSameNodeNameIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	data := t.TempDir()
	c, _ := clusterKeys(t, data)
	args := []string{"serve", "--data", data, "--http", "127.0.0.1:0", "--nats", c.URLs(), "--replicas", "3", "--node-name", "node-1"}
	first := startListening(t, data, args[5:]...)
	first.waitReady(60 * time.Second)
	_, stderr, code := runWithin(t, time.Minute, args...)
	held := fmt.Sprintf(`node name "node-1" is held by another process (pid %d on `, first.cmd.Process.Pid)
	if code != 1 || !strings.Contains(stderr, held) || !strings.Contains(stderr, "give each node its own --node-name") {
		t.Fatalf("a second serve as node-1: exit %d\n%s", code, stderr)
	}
	if role := first.clusterRole(); role != "writer" {
		t.Fatalf("the first node-1 after the second was refused: role %q", role)
	}
	first.cmd.Process.Kill()
	<-first.done
	again := startListening(t, data, args[5:]...)
	again.waitReady(60 * time.Second)
	op, _ := again.fundedPlayer()
	if acct := again.must(200, call{"POST", "/v1/players/p-42/deposits", op, "again", `{"amount":"2.00"}`}); acct["balance_after"] != "22.00" {
		t.Fatalf("a deposit through node-1 started again: %v", acct)
	}
}

// TestAServeWhoseNodeNameWasTakenWhileFrozenStops freezes a serve (SIGSTOP)
// past the lease's TTL, starts another under its --node-name, which claims
// the lapsed name and serves, then thaws the first: it finds its name
// held by the other and exits 1 saying so (before, it only logged it, and
// two processes ran as one node), while the other goes on serving.
func TestAServeWhoseNodeNameWasTakenWhileFrozenStops(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	data := t.TempDir()
	c, _ := clusterKeys(t, data)
	args := []string{"--nats", c.URLs(), "--replicas", "3", "--node-name", "node-1"}
	frozen := startListening(t, data, args...)
	frozen.waitReady(60 * time.Second)
	frozen.cmd.Process.Signal(syscall.SIGSTOP)
	successor := startListening(t, data, args...)
	successor.waitReady(60 * time.Second)
	frozen.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case err := <-frozen.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(frozen.logs.String(), `node name \"node-1\" claimed by another process (pid `+fmt.Sprint(successor.cmd.Process.Pid)) {
			t.Fatalf("the thawed serve: %v\n%s", err, frozen.logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the thawed serve still runs 30 s after its name was taken\n%s", frozen.logs)
	}
	op, _ := successor.fundedPlayer()
	if acct := successor.must(200, call{"POST", "/v1/players/p-42/deposits", op, "successor", `{"amount":"2.00"}`}); acct["balance_after"] != "22.00" {
		t.Fatalf("a deposit through the successor: %v", acct)
	}
}
