package eventstore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// blockDamage is a way a disk spoils the newest block file of a stream
// while its node is down.
type blockDamage struct {
	name   string
	damage func(b []byte) []byte
	// tail says whether the damage reaches the end of the block, so
	// that the replica loses the stream's last events rather than one
	// in its middle.
	tail bool
}

// blockDamageBytes is how much of the block's end the cut and the zeroing
// spoil: one page.
const blockDamageBytes = 4096

var blockDamages = []blockDamage{
	{name: "tail cut", tail: true, damage: func(b []byte) []byte { return b[:len(b)-blockDamageBytes] }},
	{name: "tail zeroed", tail: true, damage: func(b []byte) []byte {
		clear(b[len(b)-blockDamageBytes:])
		return b
	}},
	{name: "payload byte flipped mid-file", damage: func(b []byte) []byte {
		i := bytes.Index(b, midPayload)
		if i < 0 {
			return nil
		}
		b[i+len(midPayload)/2] ^= 0xff
		return b
	}},
}

// midPayload is the payload of the event in the middle of the stream
// appendAcknowledged writes: a byte flipped in it spoils that record's
// data, not its framing.
var midPayload = []byte(`{"n":150}`)

// TestADamagedReplicaLosesNoAcknowledgedEvent damages the newest block
// file of an R3 stream on one node while it is down, that node a follower
// or the stream's leader, and restarts it.
//
// nats-server 2.15.3 does not heal the replica: it comes back claiming the
// stream up to its last sequence, the events of the damaged records
// missing (a cut or zeroed tail: the last events; a byte flipped in an
// event's payload: that event), and stays so through leader changes; it may be elected
// leader, and its peers are never told. A message it cannot read is
// missing, never altered. So, with each node made leader in turn: the
// healthy ones hold every acknowledged event with its hash; the damaged
// one lacks some, a read it serves fails (never ends short), and a writer
// is refused on it when it lacks the high-water mark's event. A writer
// never starts short of the mark. Wiping the replica's copy of the stream
// makes it catch up from its peers, after which every node serves every
// acknowledged event.
//
// Each case starts a cluster of its own: make test runs two of the six (a
// damaged leader's tail, a follower's flipped byte), TRESOR_STORAGE_FAULTS=all
// (make crash-storage) every one.
func TestADamagedReplicaLosesNoAcknowledgedEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	all := os.Getenv("TRESOR_STORAGE_FAULTS") == "all"
	for _, role := range []string{"follower", "leader"} {
		for i, d := range blockDamages {
			if !all && !(role == "leader" && i == 0) && !(role == "follower" && i == len(blockDamages)-1) {
				continue
			}
			t.Run(role+"/"+d.name, func(t *testing.T) { damageOneReplica(t, role, d) })
		}
	}
}

// damageOneReplica runs one case of TestADamagedReplicaLosesNoAcknowledgedEvent.
func damageOneReplica(t *testing.T, role string, d blockDamage) {
	c := eventstoretest.StartCluster(t)
	cfg := eventstore.Config{Stream: "DISK", SubjectPrefix: "disk", RequestTimeout: 2 * time.Second}
	s := eventstoretest.OpenOnCluster(t, c, cfg)
	acked, mark := appendAcknowledged(t, s, 100)
	for i := range c.Nodes {
		waitLocalState(t, c, i, cfg.Stream, mark.Sequence, mark.Sequence)
	}
	leader := leaderOf(t, c, s)
	victim := leader
	if role == "follower" {
		victim = (leader + 1) % len(c.Nodes)
	}
	c.Stop(victim)
	blk := damageNewestBlock(t, c.Dir(victim), cfg.Stream, d)
	c.Start(t, victim)
	restarted := time.Now()
	st, ok, err := eventstore.LocalStreamState(c.Nodes[victim], cfg.Stream)
	if err != nil || !ok {
		t.Fatalf("n%d after its restart: stream %s held %t: %v", victim, cfg.Stream, ok, err)
	}
	t.Logf("%s of n%d (%s) damaged; at restart it holds %d messages, last %d, %d deleted, lost %v",
		blk, victim, role, st.Msgs, st.LastSeq, st.NumDeleted, st.Lost)
	if st.LastSeq != mark.Sequence || (st.Msgs < mark.Sequence) != d.tail {
		t.Errorf("n%d at restart: %d messages up to %d; nats-server 2.15.3 kept the last sequence %d with the damaged tail's messages deleted (%t)",
			victim, st.Msgs, st.LastSeq, mark.Sequence, d.tail)
	}
	// Its peers count it current: nothing tells them it lacks events.
	waitCurrent(t, s, fmt.Sprintf("n%d", victim))
	t.Logf("n%d current in the stream's cluster info %s after its restart", victim, time.Since(restarted).Round(time.Millisecond))

	for _, n := range []int{victim, (victim + 1) % 3, (victim + 2) % 3, victim} {
		makeLeader(t, c, s, n)
		missing, differing := heldByLeader(t, s, acked)
		t.Logf("n%d leads (%s after the restart): it lacks %v", n, time.Since(restarted).Round(time.Millisecond), missing)
		if len(differing) > 0 {
			t.Errorf("n%d serves acknowledged events altered: %v", n, differing)
		}
		if n != victim && len(missing) > 0 {
			t.Errorf("healthy n%d lacks acknowledged events %v", n, missing)
		}
		if n == victim {
			checkDamage(t, d, missing, mark)
		}
		if n == victim && d.tail {
			checkHoles(t, s)
		}
		readNeverShort(t, s, acked)
		checkStart(t, s, mark, slices.Contains(missing, mark.Sequence))
	}

	if role != "follower" {
		return
	}
	// The way out: the replica's copy wiped, it catches up from its peers.
	// (Shown on the follower cases only: the replica is the same once the
	// damaged leader has restarted as a follower.)
	c.Stop(victim)
	if err := os.RemoveAll(streamDir(c.Dir(victim), cfg.Stream)); err != nil {
		t.Fatal(err)
	}
	c.Start(t, victim)
	restarted = time.Now()
	waitLocalState(t, c, victim, cfg.Stream, mark.Sequence, mark.Sequence)
	t.Logf("n%d's copy wiped: whole again %s after its restart", victim, time.Since(restarted).Round(time.Millisecond))
	makeLeader(t, c, s, victim)
	if missing, differing := heldByLeader(t, s, acked); len(missing)+len(differing) > 0 {
		t.Errorf("n%d, caught up, lacks %v and serves %v altered", victim, missing, differing)
	}
	checkStart(t, s, mark, false)
}

// checkDamage checks what the damaged replica lacks, as its leader, against
// what nats-server 2.15.3 was seen to do: the events of the damaged
// records and no others, the whole tail from the first of them for a
// damaged tail.
func checkDamage(t *testing.T, d blockDamage, missing []uint64, mark eventstore.Head) {
	t.Helper()
	switch {
	case len(missing) == 0:
		t.Errorf("the damaged replica, %s, lacks no event: nats-server healed it", d.name)
	case d.tail && (missing[len(missing)-1] != mark.Sequence || missing[len(missing)-1]-missing[0]+1 != uint64(len(missing))):
		t.Errorf("%s: the damaged replica lacks %v, want the tail up to %d", d.name, missing, mark.Sequence)
	case !d.tail && slices.Contains(missing, mark.Sequence):
		t.Errorf("%s: the damaged replica lacks %v, its tail included", d.name, missing)
	}
}

// appendAcknowledged appends n requests of three events through a
// committer that keeps a high-water mark, and returns the hash of each
// acknowledged event by sequence and the mark once the committer closed.
func appendAcknowledged(t *testing.T, s *eventstore.NATSStore, n int) (map[uint64]eventstore.Hash, eventstore.Head) {
	t.Helper()
	ctx := eventstoretest.Ctx(t, time.Minute)
	hw, err := s.OpenHighWaterKV(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	// (the bucket was just created: its first read may find no responder)
	var cm eventstore.Committer
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		cm, err = s.NewCommitter(ctx, "c1", eventstore.CommitterConfig{HighWater: hw})
		return err
	})
	var results []<-chan eventstore.AppendResult
	for i := range n {
		var req eventstore.AppendRequest
		for j := range 3 {
			req.Events = append(req.Events, eventstoretest.Ev("test.A", "acct", fmt.Sprintf("a%d", i%7), 3*i+j))
		}
		results = append(results, cm.Submit(ctx, req))
	}
	var seqs []uint64
	for _, r := range results {
		res := <-r
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		seqs = append(seqs, res.Sequences...)
	}
	if err := errors.Join(cm.Close(), hw.Close()); err != nil {
		t.Fatal(err)
	}
	mark, ok, err := hw.Load(ctx)
	if err != nil || !ok || mark.Sequence != slices.Max(seqs) {
		t.Fatalf("high-water mark %+v (kept %t), want the last acknowledged sequence %d: %v", mark, ok, slices.Max(seqs), err)
	}
	// (the stream was just created: a first read may find no consumer
	// ready in time, and is tried again)
	all := map[uint64]eventstore.Hash{}
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		clear(all)
		_, err := s.ReadFrom(ctx, 1, func(ev eventstore.RecordedEvent) error {
			all[ev.Sequence] = ev.Hash
			return nil
		})
		return err
	})
	acked := map[uint64]eventstore.Hash{}
	for _, seq := range seqs {
		h, ok := all[seq]
		if !ok {
			t.Fatalf("acknowledged sequence %d not read back", seq)
		}
		acked[seq] = h
	}
	return acked, mark
}

// waitLocalState waits until node i holds msgs messages of stream up to
// sequence last.
func waitLocalState(t *testing.T, c *eventstoretest.Cluster, i int, stream string, msgs, last uint64) {
	t.Helper()
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		st, ok, err := eventstore.LocalStreamState(c.Nodes[i], stream)
		if err != nil {
			return err
		}
		if !ok || st.Msgs != msgs || st.LastSeq != last {
			return fmt.Errorf("n%d holds %d messages of %s up to %d, want %d up to %d", i, st.Msgs, stream, st.LastSeq, msgs, last)
		}
		return nil
	})
}

// streamInfoMax bounds one stream info request: one asked while the
// stream elects a leader goes unanswered, and the next is asked sooner.
const streamInfoMax = 500 * time.Millisecond

// leaderOf returns the index of the stream's leader, once it has one.
func leaderOf(t *testing.T, c *eventstoretest.Cluster, s *eventstore.NATSStore) int {
	t.Helper()
	var i int
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		info, err := s.Stream().Info(eventstoretest.Ctx(t, streamInfoMax))
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return errors.New("no stream leader")
		}
		if i = c.Index(info.Cluster.Leader); i < 0 {
			return fmt.Errorf("stream leader %q is no node of the cluster", info.Cluster.Leader)
		}
		return nil
	})
	return i
}

// waitCurrent waits until the stream's cluster info counts the replica on
// the server named current.
func waitCurrent(t *testing.T, s *eventstore.NATSStore, name string) {
	t.Helper()
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		info, err := s.Stream().Info(eventstoretest.Ctx(t, streamInfoMax))
		if err != nil {
			return err
		}
		if info.Cluster != nil && info.Cluster.Leader == name {
			return nil
		}
		for _, p := range info.Cluster.Replicas {
			if p.Name == name && p.Current && !p.Offline {
				return nil
			}
		}
		return fmt.Errorf("replica %s not current: %+v", name, info.Cluster)
	})
}

// stepDownsMax bounds the step-downs asked to make a node the leader.
const stepDownsMax = 4

// makeLeader asks the stream's leader to step down in favour of node n
// until n leads.
func makeLeader(t *testing.T, c *eventstoretest.Cluster, s *eventstore.NATSStore, n int) {
	t.Helper()
	var last error
	for range stepDownsMax {
		if leaderOf(t, c, s) == n {
			return
		}
		last = stepDownTo(s, fmt.Sprintf("n%d", n))
		if last != nil {
			continue
		}
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && leaderOf(t, c, s) != n {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if leaderOf(t, c, s) != n {
		t.Fatalf("n%d not the stream's leader after %d step-downs: %v", n, stepDownsMax, last)
	}
}

// stepDownTo asks the stream's leader to hand over to the server named.
func stepDownTo(s *eventstore.NATSStore, name string) error {
	body := fmt.Sprintf(`{"placement":{"preferred":%q}}`, name)
	msg, err := s.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+s.StreamName(), []byte(body), 5*time.Second)
	if err != nil {
		return err
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return fmt.Errorf("step down to %s: %s", name, resp.Error.Description)
	}
	return nil
}

// streamDir is where a node keeps stream's files.
func streamDir(nodeDir, stream string) string {
	return filepath.Join(nodeDir, "jetstream", "$G", "streams", stream)
}

// damageNewestBlock damages the newest block file of stream under nodeDir
// and names it.
func damageNewestBlock(t *testing.T, nodeDir, stream string, d blockDamage) string {
	t.Helper()
	path := eventstoretest.NewestBlock(t, streamDir(nodeDir, stream))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 4*blockDamageBytes {
		t.Fatalf("block %s holds %d bytes: too few to damage", path, len(b))
	}
	size := len(b)
	if b = d.damage(b); b == nil {
		t.Fatalf("%s: found nothing to damage in %s", d.name, path)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s (%d bytes, %s)", filepath.Base(path), size, d.name)
}

// heldByLeader gets each acknowledged event from the stream's leader,
// which answers a message get from its own copy, and returns the
// sequences it lacks and those where it holds another event.
func heldByLeader(t *testing.T, s *eventstore.NATSStore, acked map[uint64]eventstore.Hash) (missing, differing []uint64) {
	t.Helper()
	ctx := eventstoretest.Ctx(t, 30*time.Second)
	eventstoretest.Eventually(t, 20*time.Second, func() error {
		missing, differing = nil, nil
		for seq, h := range acked {
			m, err := s.Stream().GetMsg(ctx, seq)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				missing = append(missing, seq)
			case err != nil:
				return fmt.Errorf("get acknowledged event %d: %w", seq, err)
			case m.Header.Get(eventstore.HeaderHash) != h.String():
				differing = append(differing, seq)
			}
		}
		return nil
	})
	slices.Sort(missing)
	slices.Sort(differing)
	return missing, differing
}

// readNeverShort reads the stream through the store: the read is served
// by the replica its consumer was placed on, which may be the damaged
// one. It either hands on every acknowledged event with its hash, or fails
// with a gap or a timeout; it never ends short.
func readNeverShort(t *testing.T, s *eventstore.NATSStore, acked map[uint64]eventstore.Hash) {
	t.Helper()
	found := map[uint64]eventstore.Hash{}
	_, err := s.ReadFrom(eventstoretest.Ctx(t, 30*time.Second), 1, func(ev eventstore.RecordedEvent) error {
		found[ev.Sequence] = ev.Hash
		return nil
	})
	if err != nil {
		if !errors.Is(err, eventstore.ErrGap) && !errors.Is(err, nats.ErrTimeout) {
			t.Errorf("read: %v; want every acknowledged event, a gap or a timeout", err)
		}
		t.Logf("read through the store: %v", err)
		return
	}
	for seq, h := range acked {
		if found[seq] != h {
			t.Errorf("read ended without error, acknowledged event %d missing or altered: %s, want %s", seq, found[seq], h)
			return
		}
	}
}

// checkHoles starts a committer on the chain without a high-water mark,
// on a leader whose copy counts the messages it lost as deleted: the
// holes alone refuse it.
func checkHoles(t *testing.T, s *eventstore.NATSStore) {
	t.Helper()
	cm, err := s.NewCommitter(eventstoretest.Ctx(t, 30*time.Second), "c1", eventstore.CommitterConfig{})
	var te *eventstore.TruncatedError
	if !errors.As(err, &te) || te.Holes == 0 {
		if err == nil {
			cm.Close()
		}
		t.Errorf("start without a mark on a copy with holes: %v, want a *TruncatedError naming them", err)
	}
}

// checkStart starts a committer on the chain with its high-water mark: it
// must be refused with a *TruncatedError when refused is set, and start at
// or past the mark otherwise.
func checkStart(t *testing.T, s *eventstore.NATSStore, mark eventstore.Head, refused bool) {
	t.Helper()
	ctx := eventstoretest.Ctx(t, 30*time.Second)
	hw, err := s.OpenHighWaterKV(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer hw.Close()
	cm, err := s.NewCommitter(ctx, "c1", eventstore.CommitterConfig{HighWater: hw})
	var te *eventstore.TruncatedError
	switch {
	case refused && errors.As(err, &te) && errors.Is(err, eventstore.ErrTruncated):
		t.Logf("start refused: %v", err)
	case refused:
		t.Errorf("start on a leader that lacks the mark's event %d: %v, want a *TruncatedError", mark.Sequence, err)
	case err != nil:
		t.Errorf("start on a leader that holds the mark's event %d: %v", mark.Sequence, err)
	default:
		if head := cm.Head(); head.Sequence < mark.Sequence {
			t.Errorf("started at %d, short of the high-water mark %d", head.Sequence, mark.Sequence)
		}
		cm.Close()
	}
}
