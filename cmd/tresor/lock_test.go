package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// refusedOneLine runs tresor with args and checks that it is refused the
// data directory with exit status 1 and one line naming the directory and
// the holder.
func refusedOneLine(t *testing.T, data string, holder int, command string, args ...string) {
	t.Helper()
	_, stderr, code := run(t, args...)
	want := fmt.Sprintf("tresor: data directory %s is in use by pid %d (%s, since ", data, holder, command)
	if code != 1 || !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("%v: exit %d, stderr %q; want 1 and one line starting %q", args, code, stderr, want)
	}
}

// TestOneServePerDataDirectory starts a second serve and a simulate on the
// data directory of a running serve: both are refused while the first
// goes on serving, and the read-only commands work beside it. After a
// kill -9, a restart on the directory succeeds at once.
func TestOneServePerDataDirectory(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	db := freshDatabase(t)
	s := startServe(t, data, "--database-url", db)
	op := s.token("operator", "")
	s.must(200, call{"PUT", "/v1/players/p-1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"10.00"}`})
	s.must(200, call{"POST", "/v1/players/p-1/deposits", op, "d1", `{"amount":"20.00"}`})

	pid := s.cmd.Process.Pid
	refusedOneLine(t, data, pid, "tresor serve", "serve", "--data", data, "--http", "127.0.0.1:0")
	refusedOneLine(t, data, pid, "tresor serve", "simulate", "--data", data, "--plays", "1", "--players", "1", "--quiet")
	if acct := s.must(200, call{"POST", "/v1/players/p-1/deposits", op, "d2", `{"amount":"20.00"}`}); acct["balance"] != "40.00" {
		t.Fatalf("the first serve after the refusals: %v", acct)
	}

	r := auditReport(t, 0, "--data", data)
	if !r.OK || r.Events == 0 {
		t.Fatalf("audit beside serve: %+v", r)
	}
	file := filepath.Join(t.TempDir(), "live.ndjson")
	exportFile(t, "--data", data, "--out", file)
	// No seal yet (a minute's worth): the chain is checked, not the seals.
	v, n := eventstore.NewVerifier(sealPublicKey(t, filepath.Join(data, "keys", "seal.ed25519"))), 0
	if err := eventstore.ReadExport(bytes.NewReader(mustRead(t, file)), func(rec eventstore.RecordedEvent) error {
		n++
		return v.Check(rec)
	}); err != nil || n != r.Events {
		t.Fatalf("export beside serve: %d records, the audit read %d: %v", n, r.Events, err)
	}
	if out, stderr, code := run(t, "seal-key", "--data", data); code != 0 || !regexp.MustCompile(`^[0-9a-f]{64}\nkey_id `).MatchString(out) {
		t.Errorf("seal-key beside serve: exit %d, %q, %s", code, out, stderr)
	}
	if _, stderr, code := run(t, "projections", "rebuild", "--data", data, "--database-url", db); code != 0 {
		t.Errorf("projections rebuild beside serve: exit %d: %s", code, stderr)
	}
	// None of them took the directory: serve still holds it.
	if lock := string(mustRead(t, filepath.Join(data, "jetstream", "tresor.lock"))); !strings.Contains(lock, fmt.Sprintf(`"pid":%d,`, pid)) {
		t.Fatalf("lock file after the readers: %s", lock)
	}
	if acct := s.must(200, call{"GET", "/v1/players/p-1/account", op, "", ""}); acct["balance"] != "40.00" {
		t.Fatalf("after the rebuild: %v", acct)
	}

	s.cmd.Process.Kill()
	<-s.done
	restarted := startServe(t, data, "--database-url", db)
	if acct := restarted.must(200, call{"GET", "/v1/players/p-1/account", op, "", ""}); acct["balance"] != "40.00" {
		t.Fatalf("after kill -9 and a restart: %v", acct)
	}
	restarted.stop()
}

// TestReadOnlyCommandHoldsAFreeDataDirectory runs an export on a
// directory no server runs: it runs the server itself and holds the
// directory, so that a serve started meanwhile is refused naming it, while
// an audit reads through it; once the export ends, serve starts.
func TestReadOnlyCommandHoldsAFreeDataDirectory(t *testing.T) {
	t.Parallel()
	data := simulateStream(t, "150")
	export := exec.Command(tresorBin, "export", "--data", data, "--out", "-")
	stdout, err := export.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	export.Stderr = &stderr
	if err := export.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { export.Process.Kill() })
	// Unread, the pipe fills up: the export waits, holding the directory.
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		lock, err := os.ReadFile(filepath.Join(data, "jetstream", "tresor.lock"))
		if err != nil || !strings.Contains(string(lock), fmt.Sprintf(`"pid":%d,`, export.Process.Pid)) {
			return fmt.Errorf("lock file %q: %v", lock, err)
		}
		return nil
	})
	refusedOneLine(t, data, export.Process.Pid, "tresor export", "serve", "--data", data, "--http", "127.0.0.1:0")
	if r := auditReport(t, 0, "--data", data); !r.OK || r.Plays != 150 {
		t.Fatalf("audit beside the export: %+v", r)
	}
	if _, err := io.Copy(io.Discard, stdout); err != nil {
		t.Fatal(err)
	}
	if err := export.Wait(); err != nil {
		t.Fatalf("export: %v: %s", err, stderr.String())
	}
	startServe(t, data).stop()
}

// TestAClusterNodesDirectoryRefusesTheEmbeddedLedger: `serve --nats` marks
// its data directory; a serve or a simulate started on it without --nats,
// as an operator who forgot TRESOR_NATS_URL would, is refused with one
// line and creates nothing there: no second, empty ledger taking deposits
// beside the cluster's. The node itself goes on.
func TestAClusterNodesDirectoryRefusesTheEmbeddedLedger(t *testing.T) {
	t.Parallel()
	data := externalKeys(t)
	s := startServe(t, data, "--nats", externalNATS(t), "--node-name", "n1")
	if mark := string(mustRead(t, filepath.Join(data, "cluster-node"))); !strings.Contains(mark, "n1, a node of a NATS cluster") {
		t.Fatalf("the mark names no node: %q", mark)
	}
	for _, args := range [][]string{
		{"serve", "--data", data, "--http", "127.0.0.1:0"},
		{"simulate", "--data", data, "--plays", "1", "--players", "1", "--quiet"},
	} {
		_, stderr, code := runWithin(t, time.Minute, args...)
		want := fmt.Sprintf("tresor: data directory %s is a NATS cluster node's (%s): without --nats", data, filepath.Join(data, "cluster-node"))
		if code != 1 || !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 1 and one line starting %q", args, code, stderr, want)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "jetstream")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an embedded ledger was begun in the node's directory: %v", err)
	}
	op := s.token("operator", "")
	s.must(200, call{"PUT", "/v1/players/p-1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"10.00"}`})
	if acct := s.must(200, call{"POST", "/v1/players/p-1/deposits", op, "d1", `{"amount":"20.00"}`}); acct["balance_after"] != "20.00" {
		t.Fatalf("the node after the refusals: %v", acct)
	}
}

// TestServeMakesNoKeyBesideAStreamWithEvents starts serve on a ledger
// whose master and seal keys are not where it looks (a restore without
// --keys, a keys directory moved, a mistyped --seal-key-file): it exits
// with status 1 naming the file, and makes no key, since a seal signed by
// a key made now would fail every audit from then on, and a master key
// made now opens no seed. Once the keys are back, serve starts and the
// audit passes.
func TestServeMakesNoKeyBesideAStreamWithEvents(t *testing.T) {
	t.Parallel()
	data, aside := t.TempDir(), filepath.Join(t.TempDir(), "keys")
	keys := filepath.Join(data, "keys")
	// No block is open: nothing asks the master key to open a seed, and
	// only the seal key's file stands between serve and a foreign seal.
	s := startServe(t, data)
	for _, c := range []call{
		{"PUT", "/v1/players/p-42", "", "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`},
		{"POST", "/v1/players/p-42/deposits", "", "d1", `{"amount":"20.00"}`},
	} {
		c.token = s.staffToken("operator", "alice")
		s.must(200, c)
	}
	s.stop()
	if err := os.Rename(keys, aside); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runWithin(t, 30*time.Second, "serve", "--data", data, "--http", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, filepath.Join(keys, "master.key")) {
		t.Errorf("serve without its keys: exit %d, %s; want 1, naming the master key's file", code, stderr)
	}
	for _, key := range []string{"master.key", "seal.ed25519"} {
		if _, err := os.Stat(filepath.Join(keys, key)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after serve refused to start: %v, want none made", key, err)
		}
	}
	if err := os.RemoveAll(keys); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, keys); err != nil {
		t.Fatal(err)
	}
	startServe(t, data).stop()
	if r := auditReport(t, 0, "--data", data, "--public-key", hexKey(t, data)); !r.OK {
		t.Fatalf("audit: %+v", r)
	}
}
