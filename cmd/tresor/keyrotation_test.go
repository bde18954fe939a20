package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// placeKey writes a fresh random key of size bytes at path (mode 0600),
// as the key custodian does before a rotation.
func placeKey(tb testing.TB, path string, size int) {
	tb.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// playOnce makes one whole play of 1 € for player (its account funded
// first): a unit drawn from the open block's deck, four throws, settled.
func playOnce(s *server, op, player string) {
	s.tb.Helper()
	tok := s.token("player", player)
	s.must(200, call{"PUT", "/v1/players/" + player, op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	s.must(200, call{"POST", "/v1/players/" + player + "/deposits", op, player + "-d", `{"amount":"5.00"}`})
	play := s.must(201, call{"POST", "/v1/players/" + player + "/plays", tok, player + "-k", `{"stake":"1.00"}`})
	id := play["play_id"].(string)
	var th map[string]any
	for n := 1; n <= 4; n++ {
		th = s.must(200, call{"POST", "/v1/players/" + player + "/plays/" + id + "/throws", tok, "", fmt.Sprintf(`{"throw":%d}`, n)})
	}
	if th["status"] != "settled" {
		s.tb.Fatalf("play %s after four throws: %v", id, th)
	}
}

// stopNodes stops the nodes of a cluster, the standbys first, so that no
// takeover runs while they stop.
func stopNodes(nodes []*server) {
	var writer *server
	for _, n := range nodes {
		if n.clusterRole() == "writer" {
			writer = n
			continue
		}
		n.stop()
	}
	if writer != nil {
		writer.stop()
	}
}

// exportTypes exports the stream where (--data DIR or --nats URL) with
// the real export and counts its event types; file is the export.
func exportTypes(tb testing.TB, where ...string) (types map[string]int, file string) {
	tb.Helper()
	file = filepath.Join(tb.TempDir(), "export.ndjson")
	if _, stderr, code := run(tb, append(append([]string{"export"}, where...), "--out", file)...); code != 0 {
		tb.Fatalf("export: exit %d: %s", code, stderr)
	}
	f, err := os.Open(file)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	types = map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			tb.Fatal(err)
		}
		types[ev.Type]++
	}
	return types, file
}

// The keys rotate through the real binary on the embedded default: the
// key custodian places the next seal key and the next master key, the
// writer rotates both when it restarts; the old keys are then destroyed
// and a writer holding only the new master key reopens every open block
// and sells from it; a writer given only a retired seal key refuses to
// start; a second seal-key rotation follows; and the audit passes from
// the first public key alone.
func TestKeysRotateAcrossRestarts(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	keys := filepath.Join(data, "keys")
	s := startServe(t, data)
	op := s.token("operator", "")
	s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":2}`})
	s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"0.50","blocks":1}`})
	playOnce(s, op, "p-1")
	s.stop()
	first, stderr, code := run(t, "seal-key", "--data", data)
	if code != 0 {
		t.Fatalf("seal-key: exit %d: %s", code, stderr)
	}
	firstPub := strings.SplitN(first, "\n", 2)[0]
	retiredSeal, err := os.ReadFile(filepath.Join(keys, "seal.ed25519"))
	if err != nil {
		t.Fatal(err)
	}

	// The first rotation of both keys, at the writer's restart.
	placeKey(t, filepath.Join(keys, "seal-next.ed25519"), 32)
	placeKey(t, filepath.Join(keys, "master-next.key"), 32)
	s = startServe(t, data)
	playOnce(s, op, "p-2")
	s.stop()
	if !strings.Contains(s.logs.String(), "block seeds resealed") {
		t.Fatalf("no reseal in the writer's log:\n%s", s.logs)
	}

	// The old keys destroyed: the next files become the keys.
	for _, f := range [][2]string{{"seal-next.ed25519", "seal.ed25519"}, {"master-next.key", "master.key"}} {
		if err := os.Rename(filepath.Join(keys, f[0]), filepath.Join(keys, f[1])); err != nil {
			t.Fatal(err)
		}
	}
	second, err := os.ReadFile(filepath.Join(keys, "seal.ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	s = startServe(t, data)
	playOnce(s, op, "p-3")
	s.stop()
	if strings.Contains(s.logs.String(), "block seeds resealed") {
		t.Fatalf("resealed again under the same key:\n%s", s.logs)
	}

	// A writer given only the retired seal key refuses to sign with it.
	current, err := os.ReadFile(filepath.Join(keys, "seal.ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(keys, "seal.ed25519"), retiredSeal, 0o600); err != nil {
		t.Fatal(err)
	}
	refused, addr := launchServe(t, data)
	select {
	case err := <-refused.done:
		if err == nil || !strings.Contains(refused.logs.String(), "retired") {
			t.Fatalf("serve with a retired seal key exited with %v:\n%s", err, refused.logs)
		}
	case a := <-addr:
		refused.url = "http://" + a
		eventually(t, 30*time.Second, func() bool { return strings.Contains(refused.logs.String(), "retired") })
		refused.cmd.Process.Kill()
		<-refused.done
	case <-time.After(60 * time.Second):
		t.Fatalf("serve with a retired seal key neither refused nor listened:\n%s", refused.logs)
	}
	if err := os.WriteFile(filepath.Join(keys, "seal.ed25519"), current, 0o600); err != nil {
		t.Fatal(err)
	}

	// The second seal-key rotation.
	placeKey(t, filepath.Join(keys, "seal-next.ed25519"), 32)
	s = startServe(t, data)
	playOnce(s, op, "p-4")
	s.stop()

	types, export := exportTypes(t, "--data", data)
	if types[eventstore.SealKeyRotatedType] != 2 || types[domain.TypeSeedsResealed] != 1 {
		t.Fatalf("the stream holds %d seal-key rotations and %d reseals, want 2 and 1: %v",
			types[eventstore.SealKeyRotatedType], types[domain.TypeSeedsResealed], types)
	}
	for _, where := range [][]string{{"--data", data}, {"--file", export}} {
		if r := auditReport(t, 0, append(where, "--public-key", firstPub)...); !r.OK || r.Plays != 4 {
			t.Fatalf("audit of %v from the first public key: %+v", where, r)
		}
	}
	if _, stderr, code := run(t, "audit", "--data", data, "--quiet"); code != 2 || !strings.Contains(stderr, "give the first public key") {
		t.Fatalf("audit with the key file's later key: exit %d: %s", code, stderr)
	}
	restoreRotated(t, data, firstPub)
	revokeSecond(t, data, firstPub, second)
}

// revokeSecond revokes the second seal key from the first position, as
// after learning it was exposed: the audit names its seals, and a second
// start with the same flags records nothing more.
func revokeSecond(t *testing.T, data, firstPub string, second []byte) {
	id := eventstore.KeyID(ed25519.NewKeyFromSeed(second).Public().(ed25519.PublicKey))
	for range 2 {
		s := startServe(t, data, "--seal-key-revoke", id+":1", "--seal-key-revoke-reason", "key file found on a lost laptop")
		s.stop()
	}
	if types, _ := exportTypes(t, "--data", data); types[eventstore.SealKeyRevokedType] != 1 {
		t.Fatalf("%d revocations on the stream, want 1", types[eventstore.SealKeyRevokedType])
	}
	r := auditReport(t, 1, "--data", data, "--public-key", firstPub)
	if r.ViolationCounts["seal_revoked"] != 1 || len(r.ViolationCounts) != 1 || !strings.Contains(r.Violations[0].Found, "seals no longer count") {
		t.Fatalf("audit after the revocation: %+v", r)
	}
}

// restoreRotated backs up a stream whose keys rotated, with its keys, and
// restores it: the backup wants the first public key (the key file holds
// a later one), the restore follows the rotations from it and checks the
// backed-up seal key is the chain's current one, and a writer on the
// restored directory, holding only the new keys, sells on.
func restoreRotated(t *testing.T, data, firstPub string) {
	keys := filepath.Join(data, "keys")
	if err := os.Rename(filepath.Join(keys, "seal-next.ed25519"), filepath.Join(keys, "seal.ed25519")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "backup")
	identity, recipient := ageIdentity(t)
	if _, stderr, code := run(t, "backup", "--data", data, "--out", dir, "--keys", "--recipient", recipient); code != 2 || !strings.Contains(stderr, "give the first public key") {
		t.Fatalf("backup with a later seal key: exit %d: %s", code, stderr)
	}
	mustRun(t, "backup", "--data", data, "--out", dir, "--keys", "--recipient", recipient, "--public-key", firstPub)
	restored := filepath.Join(t.TempDir(), "restored")
	mustRun(t, "restore", "--from", dir, "--data", restored, "--keys", "--identity", identity)
	if r := auditReport(t, 0, "--data", restored, "--public-key", firstPub); !r.OK || r.Plays != 4 {
		t.Fatalf("audit of the restored stream: %+v", r)
	}
	s := startServe(t, restored)
	playOnce(s, s.token("operator", ""), "p-5")
	s.stop()
}

// The same rotations on a three-node cluster: the key files are shared by
// the nodes, which restart together after each change; whichever takes
// the lease rotates, and the audit of the replicated stream passes from
// the first public key alone.
func TestKeysRotateOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster and 3 processes: skipped in -short")
	}
	data := t.TempDir()
	c, firstPub := clusterKeys(t, data)
	args := []string{"--nats", c.URLs(), "--replicas", "3"}
	keys := filepath.Join(data, "keys")
	// The restarted nodes read the key files as they are now.
	stopAll := stopNodes
	restart := func(nodes []*server) []*server {
		stopAll(nodes)
		return startNodes(t, data, args...)
	}
	nodes := startNodes(t, data, args...)
	op := nodes[0].token("operator", "")
	nodes[0].must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":2}`})
	playOnce(nodes[1], op, "p-1")

	firstKey := mustRead(t, filepath.Join(keys, "seal.ed25519"))
	placeKey(t, filepath.Join(keys, "seal-next.ed25519"), 32)
	placeKey(t, filepath.Join(keys, "master-next.key"), 32)
	nodes = restart(nodes)
	playOnce(nodes[2], op, "p-2")

	for _, f := range [][2]string{{"seal-next.ed25519", "seal.ed25519"}, {"master-next.key", "master.key"}} {
		if err := os.Rename(filepath.Join(keys, f[0]), filepath.Join(keys, f[1])); err != nil {
			t.Fatal(err)
		}
	}
	nodes = restart(nodes)
	playOnce(nodes[0], op, "p-3")

	placeKey(t, filepath.Join(keys, "seal-next.ed25519"), 32)
	nodes = restart(nodes)
	playOnce(nodes[1], op, "p-4")
	stopAll(nodes)

	types, _ := exportTypes(t, "--nats", c.URLs())
	if types[eventstore.SealKeyRotatedType] != 2 || types[domain.TypeSeedsResealed] != 1 {
		t.Fatalf("the stream holds %d seal-key rotations and %d reseals, want 2 and 1: %v",
			types[eventstore.SealKeyRotatedType], types[domain.TypeSeedsResealed], types)
	}
	if r := auditReport(t, 0, "--nats", c.URLs(), "--public-key", firstPub); !r.OK || r.Plays != 4 {
		t.Fatalf("audit from the first public key: %+v", r)
	}

	// A node given back the first, retired key wins the lease but its
	// writer refuses to open: it must say it is not ready, not take
	// commands that would wait on a writer that never comes.
	if err := os.WriteFile(filepath.Join(keys, "seal.ed25519"), firstKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(keys, "seal-next.ed25519")); err != nil {
		t.Fatal(err)
	}
	retired := startListening(t, data, args...)
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		p, err := retired.probe("/v1/ready", "")
		if err != nil || p.status != http.StatusServiceUnavailable || !strings.Contains(p.raw, "writer does not open") || !strings.Contains(p.raw, "retired") {
			return fmt.Errorf("readiness of a node holding only a retired seal key: %d %s (%v)\n%s", p.status, p.raw, err, retired.logs)
		}
		return nil
	})
}
