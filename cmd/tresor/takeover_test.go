package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/cluster"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// takeoverAfterElectionMax bounds Tresor's share of a lost stream
	// leader: from JetStream's elections of the new leaders a writer
	// needs (the stream's, the lease bucket's, the high-water bucket's) to
	// the first command acknowledged. Each election wakes the nodes' waits
	// (a writer's start reads, a standby's reads of the lease), an
	// abandoned lease is taken over without waiting for its expiry, and
	// the replay holds the tail past the standby's ledger only: beyond
	// this bound one of those waited out a timeout. The figure itself is
	// logged, and kept in docs/performance.md. The bounds hold the
	// measuring runs (TRESOR_TAKEOVER_FAULTS set, make crash-takeover)
	// only: the clients' own backoff counts in them, and make test's
	// other packages share the two cores (figures are measured, not
	// asserted, where the load is not the test's).
	takeoverAfterElectionMax = time.Second
	// handoverMax bounds how long writes stop while a writer stopped by
	// SIGTERM hands over to a caught-up standby: it releases the lease as
	// it stops, and the standby acquires at once and replays at most
	// cluster.CaughtUpLagMax events.
	handoverMax = time.Second
	// takeoverPreload is the stream's length before the faults: the writer
	// has stored snapshots by then (crashSnapshotEvery), so no later start
	// or takeover needs to replay the stream from its first event.
	takeoverPreload = 2000
)

// measuring reports a run that measures takeovers (TRESOR_TAKEOVER_FAULTS
// set): their bounds are checked then.
func measuring() bool { return os.Getenv("TRESOR_TAKEOVER_FAULTS") != "" }

// TestTakeoverOnNATSProcesses runs three `tresor serve --replicas 3` on a
// cluster of three nats-server processes, the crash suite's clients
// playing through the three and retrying by key, through these faults:
// kill -9 of the NATS node that leads the stream (TRESOR_TAKEOVER_FAULTS
// times), restarted after; a rolling restart of the serves as
// docs/operations.md describes it; a rolling restart of the NATS nodes,
// each stepped down from what it leads first; then TRESOR_TAKEOVER_STARTS
// starts and stops of a fourth serve. Tresor's share of each lost leader
// (from the new leader's election, read in the servers' logs, to the first
// command acknowledged) and the writer's handover are logged, and bounded
// in a measuring run (measuring); no serve
// replays the stream from its first event once it has snapshots, none
// panics, every acknowledged answer is in the stream once, as answered,
// and the audit passes.
func TestTakeoverOnNATSProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("3 nats-server and 3 tresor processes: skipped in -short")
	}
	faults := crashSize(t, "TRESOR_TAKEOVER_FAULTS", 1, 20)
	starts := crashSize(t, "TRESOR_TAKEOVER_STARTS", 1, 200)
	r := newCrashRun(t)
	r.clients = standbyClients
	r.http.Timeout = standbyRequestMax
	procs := startNATSProcs(t)
	pub := writeClusterKeys(t, r.data)
	r.stored, r.auditKey = []string{"--nats", procs.URLs()}, []string{"--public-key", pub}
	c := &standbyCluster{t: t, run: r, args: append([]string{"--nats", procs.URLs(), "--replicas", "3"}, r.serveArgs...)}
	c.nodes = startNodes(t, r.data, c.args...)
	begun := time.Now()
	r.setUp(c.nodes[c.writer(-1)], c.nodes...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(procs.logs())
		}
	})
	nc, err := nats.Connect(procs.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.preload(js)
	marks := c.logMarks()

	var shares, downs []time.Duration
	for k := range faults {
		share, down := c.killStreamLeader(procs, js, k+1)
		shares, downs = append(shares, share), append(downs, down)
	}
	c.noFullReplay(marks)
	var handovers []time.Duration
	for range faults {
		handovers = append(handovers, c.rollingRestart())
	}
	c.rollingNATSRestart(procs, js, nc)
	c.startsAndStops(starts)
	c.noFullReplay(marks)

	r.stopClients()
	r.waitSettled(c.nodes[0])
	f := r.check("end", true)
	c.sameBalances()
	t.Logf("takeover suite: %s; stream leader killed %d times: writes stopped %s, of which Tresor's share after the election %s; "+
		"rolling restarts of the serves: writes stopped %s; %d starts; %d acknowledged answers checked against the stream (%d writes), %d events",
		time.Since(begun).Round(time.Second), faults, spread(downs), spread(shares), spread(handovers), starts,
		f.checked, f.writes, f.events)
}

// spread formats figures as the least, the middle one and the most.
func spread(ds []time.Duration) string {
	s := slices.Sorted(slices.Values(ds))
	if len(s) == 0 {
		return "none"
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("%s / %s / %s (min / median / max of %d)", ms(s[0]), ms(s[len(s)/2]), ms(s[len(s)-1]), len(s))
}

// preload lets the clients play until the stream holds takeoverPreload
// events.
func (c *standbyCluster) preload(js jetstream.JetStream) {
	c.t.Helper()
	eventstoretest.Eventually(c.t, 2*time.Minute, func() error {
		st, err := js.Stream(eventstoretest.Ctx(c.t, 5*time.Second), "TRESOR")
		if err != nil {
			return err
		}
		info, err := st.Info(eventstoretest.Ctx(c.t, 5*time.Second))
		if err != nil || info.State.LastSeq < takeoverPreload {
			return fmt.Errorf("the stream holds fewer than %d events: %v", takeoverPreload, err)
		}
		return nil
	})
}

// killStreamLeader kills the NATS node that leads the stream (SIGKILL),
// waits for the first command acknowledged after, reads the new leader's
// election in the surviving nodes' logs, starts the node again and waits
// until it is current. It returns Tresor's share (the election to that
// first acknowledgement) and how long writes stopped.
func (c *standbyCluster) killStreamLeader(procs *natsProcs, js jetstream.JetStream, k int) (share, down time.Duration) {
	c.t.Helper()
	// The leader is read at the kill, not before the clients' load: a
	// node restarted by the fault before may have taken it meanwhile.
	leader := -1
	marks := c.logMarks()
	at, took := c.fault(fmt.Sprintf("kill -9 %d of the NATS node leading the stream", k), func() {
		leader = procs.index(c.streamLeader(js))
		procs.kill(leader)
	})
	var elected time.Time
	eventstoretest.Eventually(c.t, 10*time.Second, func() error {
		var ok bool
		if elected, ok = procs.elected("TRESOR", at); !ok {
			return fmt.Errorf("no new leader of TRESOR in the logs since the kill")
		}
		return nil
	})
	// A writer needs the stream, the lease bucket and the high-water
	// bucket: JetStream's part is the last of their elections that the
	// kill caused, Tresor's share what follows it.
	needed := elected
	var others []string
	for name, t := range procs.elections(at) {
		others = append(others, fmt.Sprintf("%s %s", name, t.Sub(at).Round(time.Millisecond)))
		if (name == "KV_TRESOR_LEASES" || name == "KV_"+eventstore.HighWaterBucket) && t.After(needed) {
			needed = t
		}
	}
	slices.Sort(others)
	share = at.Add(took).Sub(needed)
	c.t.Logf("kill -9 %d of n%d at %s: new stream leader elected %s after the kill, the last that a writer needs %s; first command acknowledged %s after it (leaders elected after the kill: %s)",
		k, leader, at.UTC().Format("15:04:05.000"), elected.Sub(at).Round(time.Millisecond), needed.Sub(at).Round(time.Millisecond), share.Round(time.Millisecond), strings.Join(others, ", "))
	if measuring() {
		sent, failed := c.run.journal.between(needed, at.Add(took))
		c.t.Logf("kill -9 %d: %d requests sent between the elections and the first acknowledgement, %d of them failed", k, sent, failed)
		c.logTakeover(marks)
	}
	if measuring() && share > takeoverAfterElectionMax {
		c.t.Errorf("kill -9 %d of the stream's leader: first command acknowledged %s after JetStream's elections, more than %s",
			k, share.Round(time.Millisecond), takeoverAfterElectionMax)
	}
	procs.start(leader)
	procs.waitCurrent(js, time.Minute)
	return share, took
}

// rollingRestart restarts the serves as docs/operations.md says: each
// standby, waiting until it is ready and caught up, then the writer
// (SIGTERM), started again as a standby. It returns how long writes
// stopped from the writer's SIGTERM to the first command acknowledged
// after it had exited, and fails a measuring run beyond handoverMax.
func (c *standbyCluster) rollingRestart() time.Duration {
	c.t.Helper()
	// The writer is looked up before each restart: on a loaded machine a
	// writer may lose its lease meanwhile (a renewal later than the TTL),
	// and the node that took it over is then the one restarted last.
	for i := range c.nodes {
		if i != c.writer(-1) {
			c.nodes[i].stop()
			c.restart(i)
			c.waitCaughtUp(i)
		}
	}
	w := c.writer(-1)
	time.Sleep(standbyLoad)
	at := time.Now()
	c.nodes[w].stop()
	exited := time.Now()
	var next time.Time
	eventstoretest.Eventually(c.t, standbyRecoveryMax, func() error {
		var ok bool
		if next, ok = c.run.journal.acknowledgedAfter(exited); !ok {
			return fmt.Errorf("no command acknowledged since the writer exited")
		}
		return nil
	})
	down := c.run.journal.stall(at, next)
	c.t.Logf("rolling restart: the writer exited %s after its SIGTERM; writes stopped for %s at most meanwhile",
		exited.Sub(at).Round(time.Millisecond), down.Round(time.Millisecond))
	if measuring() && down > handoverMax {
		c.t.Errorf("rolling restart: writes stopped for %s while the writer handed over, more than %s", down.Round(time.Millisecond), handoverMax)
	}
	c.restart(w)
	return down
}

// waitCaughtUp waits until node i is a standby within
// cluster.CaughtUpLagMax events of the stream's head, or the writer: a
// caught-up standby may take a lease its writer lost meanwhile.
func (c *standbyCluster) waitCaughtUp(i int) {
	c.t.Helper()
	eventstoretest.Eventually(c.t, time.Minute, func() error {
		s := c.nodes[i].clusterStatus()
		if s["role"] == "writer" {
			return nil
		}
		lag, ok := s["standby_lag"].(float64)
		if s["role"] != "standby" || !ok || lag >= cluster.CaughtUpLagMax {
			return fmt.Errorf("node %d: %v", i, s)
		}
		return nil
	})
}

// rollingNATSRestart restarts the NATS nodes one at a time as
// docs/operations.md says: the streams a node leads stepped down first,
// SIGTERM, started again, and every stream current before the next.
func (c *standbyCluster) rollingNATSRestart(procs *natsProcs, js jetstream.JetStream, nc *nats.Conn) {
	c.t.Helper()
	for i := range 3 {
		name := fmt.Sprintf("n%d", i)
		marks := c.logMarks()
		at := time.Now()
		eventstoretest.Eventually(c.t, 30*time.Second, func() error {
			led := procs.ledBy(js, name)
			for _, s := range led {
				nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+s, nil, 5*time.Second)
			}
			if len(led) > 0 {
				return fmt.Errorf("%s still leads %v", name, led)
			}
			return nil
		})
		procs.stop(i)
		procs.start(i)
		procs.waitCurrent(js, time.Minute)
		back := time.Now()
		var next time.Time
		eventstoretest.Eventually(c.t, standbyRecoveryMax, func() error {
			var ok bool
			if next, ok = c.run.journal.acknowledgedAfter(back); !ok {
				return fmt.Errorf("no command acknowledged since NATS node %s is back", name)
			}
			return nil
		})
		c.t.Logf("NATS node %s restarted: writes stopped for %s at most", name, c.run.journal.stall(at, next).Round(time.Millisecond))
		if measuring() {
			c.logTakeover(marks)
		}
	}
}

// startsAndStops starts a fourth serve n times on the cluster under load,
// waits until it is ready and stops it (SIGTERM): each exits cleanly.
func (c *standbyCluster) startsAndStops(n int) {
	c.t.Helper()
	at := time.Now()
	for k := range n {
		s := startServe(c.t, c.run.data, c.args...)
		s.stop()
		if bad := fullReplays(s.logs.String()); len(bad) > 0 {
			c.t.Fatalf("start %d: its log tells of a full replay or a panic: %q\n%s", k+1, bad, s.logs)
		}
	}
	c.t.Logf("%d starts to ready and stops in %s", n, time.Since(at).Round(time.Millisecond))
}

// logMarks returns how much of each node's log was written before the
// faults.
func (c *standbyCluster) logMarks() map[*server]int {
	marks := map[*server]int{}
	for _, n := range c.nodes {
		marks[n] = len(n.logs.String())
	}
	return marks
}

// takeoverLine is a serve's log line that tells of its writer's part in a
// takeover.
var takeoverLine = regexp.MustCompile(`writer|lease|ledger rebuilt`)

// logTakeover logs the serves' lines about their writers since marks, so
// that a measuring run shows where Tresor's share went.
func (c *standbyCluster) logTakeover(marks map[*server]int) {
	for i, n := range c.nodes {
		for _, line := range strings.Split(n.logs.String()[marks[n]:], "\n") {
			if takeoverLine.MatchString(line) {
				c.t.Logf("serve %d: %s", i, line)
			}
		}
	}
}

// noFullReplay checks the logs of the serves running now, from marks for
// those that ran before the faults.
func (c *standbyCluster) noFullReplay(marks map[*server]int) {
	c.t.Helper()
	for i, n := range c.nodes {
		for _, line := range fullReplays(n.logs.String()[marks[n]:]) {
			c.t.Errorf("node %d: %s", i, line)
		}
	}
}

// rebuiltLine is a writer's rebuild of its ledger, with where it began.
var rebuiltLine = regexp.MustCompile(`msg="ledger rebuilt" from_snapshot=(\d+) replayed=(\d+)`)

// fullReplays returns the lines of a serve's log that tell of a replay of
// the stream from its first event (a rebuild from no snapshot replaying
// more than a takeover may, or a start that found no snapshot to begin
// from) or of a panic: once the stream has snapshots, neither should be.
func fullReplays(logs string) []string {
	var bad []string
	for _, line := range strings.Split(logs, "\n") {
		m := rebuiltLine.FindStringSubmatch(line)
		replayed := 0
		if m != nil {
			replayed, _ = strconv.Atoi(m[2])
		}
		if m != nil && m[1] == "0" && replayed > cluster.CaughtUpLagMax ||
			strings.Contains(line, "replaying the whole stream") || strings.Contains(line, "panic") {
			bad = append(bad, line)
		}
	}
	return bad
}
