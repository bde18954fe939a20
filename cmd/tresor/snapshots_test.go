package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/snapshot"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestServeStartsItsReadModelsFromTheirSnapshot: serve on the embedded
// default records plays, stops cleanly (its in-memory read models take a
// snapshot), and starts again: the read models come from that snapshot,
// not from the first event, and answer the same balances, histories,
// statements and blocks as before the stop.
func TestServeStartsItsReadModelsFromTheirSnapshot(t *testing.T) {
	data := t.TempDir()
	// given a serve that recorded plays, some finished, one in progress
	s := startServe(t, data)
	recordPlays(s)
	before := snapshotReads(s)
	// when it stops cleanly
	s.stop()
	if !strings.Contains(s.logs.String(), "no projections snapshot: applying the whole stream") {
		t.Fatalf("the first start found a projections snapshot:\n%s", s.logs)
	}
	taken := regexp.MustCompile(`projections snapshot taken.* seq=(\d+)`).FindStringSubmatch(s.logs.String())
	if taken == nil {
		t.Fatalf("no projections snapshot at the clean stop:\n%s", s.logs)
	}
	// then the next start's read models come from that snapshot
	again := startServe(t, data)
	after := snapshotReads(again)
	again.stop()
	logs := again.logs.String()
	if !strings.Contains(logs, `projections start from a snapshot" seq=`+taken[1]+" ") || strings.Contains(logs, "applying the whole stream") {
		t.Fatalf("the read models did not start from the snapshot at %s:\n%s", taken[1], logs)
	}
	// and answer as before the stop
	if after != before {
		t.Fatalf("reads differ after a start from the snapshot:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// snapshotPlayers are the players recordPlays opens.
var snapshotPlayers = []string{"p-1", "p-2", "p-3"}

// recordPlays opens an emission and snapshotPlayers, each with a deposit
// and three plays: two finished, one in progress.
func recordPlays(s *server) {
	op := s.token("operator", "")
	s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":2}`})
	for _, p := range snapshotPlayers {
		tok := s.token("player", p)
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
		s.must(200, call{"POST", "/v1/players/" + p + "/deposits", op, "d-" + p, `{"amount":"30.00"}`})
		for i := range 3 {
			play := s.must(201, call{"POST", "/v1/players/" + p + "/plays", tok, fmt.Sprint("k", i), `{"stake":"1.00"}`})
			for range 4 - i/2 {
				s.must(200, call{"POST", "/v1/players/" + p + "/plays/" + play["play_id"].(string) + "/throws", tok, "", ""})
			}
		}
	}
}

// statementPosition is a statement's read-model position, which the seal
// recorded at a clean stop moves on: everything else must agree.
var statementPosition = regexp.MustCompile(`,"seq":\d+}$`)

// snapshotReads reads snapshotPlayers' accounts, histories and statements,
// and the blocks.
func snapshotReads(s *server) string {
	reg := s.token("regulator", "")
	var b strings.Builder
	for _, p := range snapshotPlayers {
		for _, path := range []string{"/account", "/plays?limit=50", "/statement"} {
			b.WriteString(statementPosition.ReplaceAllString(strings.TrimSpace(s.getText("/v1/players/"+p+path, reg)), "}") + "\n")
		}
	}
	b.WriteString(s.getText("/v1/blocks", reg))
	return b.String()
}

// TestAShardRefusedAfterTheStartIsRebuiltWithoutAWrite: serve starts its
// read models from their snapshot's hot section; the last shard's part,
// altered in the bucket, is refused when the warm-up loads it. Nothing is
// written after the start, as on an idle ledger: the read models apply the
// stream again at once, readiness comes back within seconds, and the reads
// answer as before the stop.
func TestAShardRefusedAfterTheStartIsRebuiltWithoutAWrite(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, data)
	recordPlays(s)
	before := snapshotReads(s)
	s.stop()
	alterLastPart(t, data, projectionSnapshotKind)
	// when serve starts from that snapshot and the warm-up reaches the
	// shard (after its three attempts)
	again := startServe(t, data)
	defer again.stop()
	eventually(t, time.Minute, func() bool {
		return strings.Contains(again.logs.String(), "projections snapshot shard refused")
	})
	// then, with no write, the read models are applied again from the
	// stream and serve is ready within seconds, not at the next write
	again.waitReady(5 * time.Second)
	if after := snapshotReads(again); after != before {
		t.Fatalf("reads after the rebuild differ from before the stop:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// alterLastPart flips a byte of the last part of the newest snapshot of
// kind in the data directory's bucket, serve stopped.
func alterLastPart(t *testing.T, data, kind string) {
	t.Helper()
	nc, done := embeddedConn(t, data)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	os, err := js.ObjectStore(ctx, snapshot.BucketDefault)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := os.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, in := range infos {
		if strings.HasPrefix(in.Name, "part."+kind+".") {
			parts = append(parts, in.Name)
		}
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		t.Fatalf("no %s snapshot part", kind)
	}
	last := parts[len(parts)-1]
	b, err := os.GetBytes(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 1
	if _, err := os.PutBytes(ctx, last, b); err != nil {
		t.Fatal(err)
	}
}

// embeddedConn runs the embedded server on the data directory dir, serve
// stopped, and connects to it; done closes both, before serve starts
// there again.
func embeddedConn(t *testing.T, dir string) (nc *nats.Conn, done func()) {
	t.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: filepath.Join(dir, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	if nc, err = srv.Conn(); err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	return nc, func() {
		nc.Close()
		srv.Shutdown()
	}
}
