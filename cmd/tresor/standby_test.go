package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterRole returns a node's role as its health tells ("" when it does
// not answer).
func (s *server) clusterRole() string {
	status, m, err := s.send(call{"GET", "/v1/health", "", "", ""})
	if err != nil || status != 200 {
		return ""
	}
	c, _ := m["cluster"].(map[string]any)
	role, _ := c["role"].(string)
	return role
}

// TestStandbyTakesOverAfterKill9 (issue 12): three `tresor serve` on a
// three-node NATS cluster (replicas 3); deposits go through every node
// (standbys forward them to the writer). kill -9 of the writer: a standby
// takes the lease and deposits are acknowledged again; every acknowledged
// deposit is in the balance once, and the audit of the stream passes.
func TestStandbyTakesOverAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster and 3 processes: skipped in -short")
	}
	c := eventstoretest.StartCluster(t)
	data := t.TempDir()
	keys := filepath.Join(data, "keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	var sealSeed []byte
	for _, name := range []string{"master.key", "seal.ed25519", "token.key"} {
		key := make([]byte, 32)
		rand.Read(key)
		if name == "seal.ed25519" {
			sealSeed = key
		}
		if err := os.WriteFile(filepath.Join(keys, name), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--nats", c.URLs(), "--replicas", "3"}
	var nodes []*server
	for range 3 {
		nodes = append(nodes, startListening(t, data, args...))
	}
	for _, n := range nodes {
		n.waitReady(60 * time.Second)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("node %d:\n%s", i, n.logs)
			}
		}
	})
	writer := -1
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		for i, n := range nodes {
			if n.clusterRole() == "writer" {
				writer = i
				return nil
			}
		}
		return fmt.Errorf("no writer among the nodes")
	})
	op := nodes[0].token("operator", "")
	nodes[0].must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"10000.00","weekly_stake_limit":"100.00"}`})
	acked := 0
	for i := range 9 {
		nodes[i%3].must(200, call{"POST", "/v1/players/p1/deposits", op, fmt.Sprint("before-", i), `{"amount":"1.00"}`})
		acked++
	}

	nodes[writer].cmd.Process.Kill()
	survivor := nodes[(writer+1)%3]
	took, failed := depositUntilAcknowledged(t, survivor, op, "after-kill")
	acked++
	t.Logf("kill -9 of the writer: first deposit acknowledged by the new writer %s later; %d requests answered 503 meanwhile", took, failed)
	for i, n := range nodes {
		if i == writer {
			continue
		}
		n.must(200, call{"POST", "/v1/players/p1/deposits", op, fmt.Sprint("after-", i), `{"amount":"1.00"}`})
		acked++
	}

	// The stream's leader steps down, then its node is lost: no serve
	// exits, and deposits are acknowledged again within seconds.
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.TRESOR", nil, 5*time.Second); err != nil {
		t.Fatalf("stream leader step-down: %v", err)
	}
	took, failed = depositUntilAcknowledged(t, survivor, op, "after-stepdown")
	acked++
	t.Logf("stream leader stepped down: deposit acknowledged %s later; %d requests failed meanwhile", took, failed)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		st, err := js.Stream(eventstoretest.Ctx(t, 5*time.Second), "TRESOR")
		if err != nil {
			return err
		}
		info, err := st.Info(eventstoretest.Ctx(t, 5*time.Second))
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("no stream leader yet: %v", err)
		}
		leader = info.Cluster.Leader
		return nil
	})
	c.Stop(c.Index(leader))
	took, failed = depositUntilAcknowledged(t, survivor, op, "after-leader-loss")
	acked++
	t.Logf("NATS node %s (the stream's leader) lost: deposit acknowledged %s later; %d requests failed meanwhile", leader, took, failed)
	for i, n := range nodes {
		select {
		case err := <-n.done:
			if i != writer {
				t.Fatalf("node %d exited: %v\n%s", i, err, n.logs)
			}
		default:
		}
	}
	// The writer frozen past the lease's TTL (SIGSTOP): the other node takes
	// over; resumed, the old writer appends nothing (its lease is gone: it
	// steps down, and the fencing would refuse it) and rejoins as a standby.
	var frozen, other *server
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		for i, n := range nodes {
			if i != writer && n.clusterRole() == "writer" {
				frozen, other = n, nodes[3-writer-i]
				return nil
			}
		}
		return fmt.Errorf("no writer among the live nodes")
	})
	frozen.cmd.Process.Signal(syscall.SIGSTOP)
	took, failed = depositUntilAcknowledged(t, other, op, "while-frozen")
	acked++
	t.Logf("writer frozen (SIGSTOP): deposit acknowledged by the other node %s later; %d requests failed meanwhile", took, failed)
	frozen.cmd.Process.Signal(syscall.SIGCONT)
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		if r := frozen.clusterRole(); r != "standby" {
			return fmt.Errorf("the resumed writer's role: %q, want standby", r)
		}
		return nil
	})
	frozen.must(200, call{"POST", "/v1/players/p1/deposits", op, "after-resume", `{"amount":"1.00"}`})
	acked++

	want := fmt.Sprintf("%d.00", acked)
	for i, n := range nodes {
		if i == writer {
			continue
		}
		eventstoretest.Eventually(t, 30*time.Second, func() error {
			status, acct, err := n.send(call{"GET", "/v1/players/p1/account", op, "", ""})
			if err != nil || status != 200 {
				return fmt.Errorf("node %d: account: %d %v %v", i, status, acct, err)
			}
			if acct["balance"] != want {
				return fmt.Errorf("node %d: balance %v, want %s", i, acct["balance"], want)
			}
			return nil
		})
	}
	pub := hex.EncodeToString(ed25519.NewKeyFromSeed(sealSeed).Public().(ed25519.PublicKey))
	out, errOut, code := run(t, "audit", "--nats", c.URLs(), "--public-key", pub)
	if code != 0 {
		t.Fatalf("audit: exit %d\n%s\n%s", code, out, errOut)
	}
}

// depositUntilAcknowledged deposits 1.00 to p1 through s with key, again
// while it answers 503, and returns how long it took and how many attempts
// failed; any other answer, or 30 s without success, fails the test (the
// goal is 3 s; the bound leaves room for a slow election on a loaded
// machine, and the figure is logged).
func depositUntilAcknowledged(t *testing.T, s *server, op, key string) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	failed := 0
	for {
		status, m, err := s.send(call{"POST", "/v1/players/p1/deposits", op, key, `{"amount":"1.00"}`})
		if err == nil && status == 200 {
			return time.Since(start).Round(time.Millisecond), failed
		}
		if err == nil && status != 503 {
			t.Fatalf("deposit %s: %d %v, want 200 or 503", key, status, m)
		}
		failed++
		if time.Since(start) > 30*time.Second {
			t.Fatalf("deposit %s not acknowledged within 30s (%d failed, last %v)\n%s", key, failed, err, s.logs)
		}
		time.Sleep(20 * time.Millisecond) // a client's pause between retries
	}
}
