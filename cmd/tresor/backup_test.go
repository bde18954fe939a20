package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// ageIdentity writes a fresh age identity to a file and returns the file
// and its recipient.
func ageIdentity(tb testing.TB) (file, recipient string) {
	tb.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		tb.Fatal(err)
	}
	file = filepath.Join(tb.TempDir(), "identity.txt")
	if err := os.WriteFile(file, []byte(id.String()+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return file, id.Recipient().String()
}

// mustRun runs the binary and fails unless it exits 0; it returns stderr.
func mustRun(tb testing.TB, args ...string) string {
	tb.Helper()
	_, stderr, code := run(tb, args...)
	if code != 0 {
		tb.Fatalf("tresor %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return stderr
}

// Players play, deposit and send duplicates while two backups run, a full
// one and then an incremental one; the server is killed and its data
// deleted; the backup restored with its keys into a fresh directory holds
// every write acknowledged before the second backup began, with the
// answer its client saw; the audit passes; serve starts on it, a retried
// key answers as before, and new commands continue the chain.
func TestRestoreFromBackupsTakenWhilePlaying(t *testing.T) {
	r := newCrashRun(t)
	s := startServe(t, r.data, r.serveArgs...)
	r.setUp(s)
	dir := filepath.Join(t.TempDir(), "backup")
	identity, recipient := ageIdentity(t)
	eventually(t, time.Minute, func() bool { return len(r.journal.snapshot().answers) > 500 })
	mustRun(t, "backup", "--data", r.data, "--out", dir, "--keys", "--recipient", recipient)
	eventually(t, time.Minute, func() bool { return len(r.journal.snapshot().answers) > 2000 })
	before := r.journal.snapshot()
	mustRun(t, "backup", "--data", r.data, "--out", dir)
	m, _, err := readManifest(dir)
	if err != nil || len(m.Parts) != 2 || m.Keys == nil {
		t.Fatalf("manifest after two backups: %+v, %v", m, err)
	}
	r.stopClients()
	r.kill(s)
	if err := os.RemoveAll(r.data); err != nil {
		t.Fatal(err)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	t.Log(mustRun(t, "restore", "--from", dir, "--data", restored, "--keys", "--identity", identity))
	r.stored = []string{"--data", restored}
	fs := &crashFindings{r: r, counts: map[string]int{}, shown: map[string][]string{}}
	r.export = filepath.Join(t.TempDir(), "restored.ndjson")
	mustRun(t, "export", "--data", restored, "--out", r.export)
	if err := r.stream.readExport(r.export); err != nil {
		t.Fatal(err)
	}
	if r.stream.last != m.lastSequence() {
		t.Fatalf("restored stream ends at %d, the backup at %d", r.stream.last, m.lastSequence())
	}
	written := r.verifyAnswers(before.answers, fs)
	r.streamDuplicates(fs)
	r.audit(fs)
	if len(fs.shown) > 0 || len(written) == 0 {
		t.Fatalf("restored stream: %v, %d writes checked: %v", fs.counts, len(written), fs.shown)
	}
	t.Logf("%d acknowledged writes before the second backup found as answered in the %d events restored", len(written), r.stream.last)

	s = startServe(t, restored, r.serveArgs...)
	var retried bool
	for _, a := range before.answers {
		if a.w.kind != kindDeposit || a.status/100 != 2 || a.bad != "" {
			continue
		}
		status, body, err := r.exchange(s.url, a.w.call)
		var again crashAnswerBody
		if err != nil || status != http.StatusOK || json.Unmarshal(body, &again) != nil || *again.BalanceAfter != *a.body.BalanceAfter {
			t.Fatalf("retry of %s after the restore: %d %s %v, first answered balance_after %s", a.w, status, body, err, *a.body.BalanceAfter)
		}
		status, body, err = r.exchange(s.url, call{"POST", "/v1/players/" + a.w.player + "/deposits", a.w.token, "after-restore", `{"amount":"1.00"}`})
		if err != nil || status/100 != 2 {
			t.Fatalf("a new deposit after the restore: %d %s %v", status, body, err)
		}
		retried = true
		break
	}
	if !retried {
		t.Fatal("no deposit acknowledged before the second backup to retry")
	}
	s.stop()
	r.audit(fs)
	if len(fs.shown) > 0 {
		t.Fatalf("after new commands on the restored ledger: %v", fs.shown)
	}
}

// A backup that was altered, cut or does not match its manifest is
// refused, naming the first bad position or file, and nothing is left in
// the target; so is a target that is not empty.
func TestRestoreRefusesABrokenBackup(t *testing.T) {
	data := simulateStream(t, "300")
	dir := filepath.Join(t.TempDir(), "backup")
	mustRun(t, "backup", "--data", data, "--out", dir)
	part := mustRead(t, filepath.Join(dir, "events-000001.ndjson"))
	lines := bytes.SplitAfter(part, []byte("\n"))
	lines = lines[:len(lines)-1] // after the last line break
	deposit, stake := -1, -1
	for i, l := range lines {
		if deposit < 0 && bytes.Contains(l, []byte(`"type":"FundsDeposited"`)) {
			deposit = i
		}
		if stake < 0 && i > 20 && bytes.Contains(l, []byte(`"type":"StakePlaced"`)) && bytes.Contains(l, []byte(`"append_remaining":1,`)) {
			stake = i
		}
	}
	if deposit < 0 || stake < 0 {
		t.Fatal("no deposit or stake in the stream")
	}
	seq := func(i int) string { return fmt.Sprintf("sequence %d", i+1) }
	for _, tc := range []struct {
		name string
		// edit changes the part's lines; the manifest is then made to
		// match the file, unless keepManifest.
		edit         func([][]byte) [][]byte
		keepManifest bool
		target       string // default: a fresh directory
		want         []string
	}{
		{name: "changed amount", edit: func(ls [][]byte) [][]byte {
			l := bytes.Clone(ls[deposit])
			at := bytes.Index(l, []byte(`"amount":"`)) + len(`"amount":"`)
			l[at] = '1' + (l[at]-'0')%9 // another digit
			ls[deposit] = l
			return ls
		}, want: []string{seq(deposit), "hash"}},
		{name: "removed line", edit: func(ls [][]byte) [][]byte {
			return append(ls[:deposit:deposit], ls[deposit+1:]...)
		}, want: []string{fmt.Sprintf("at sequence %d the file holds sequence %d", deposit+1, deposit+2)}},
		{name: "two lines swapped", edit: func(ls [][]byte) [][]byte {
			ls[deposit], ls[deposit+1] = ls[deposit+1], ls[deposit]
			return ls
		}, want: []string{fmt.Sprintf("at sequence %d the file holds sequence %d", deposit+1, deposit+2)}},
		{name: "cut inside an append", edit: func(ls [][]byte) [][]byte {
			return ls[:stake+1]
		}, want: []string{"ends inside the append begun at " + seq(stake)}},
		{name: "manifest hash mismatch", edit: func(ls [][]byte) [][]byte {
			return ls[:len(ls)-1]
		}, keepManifest: true, want: []string{"events-000001.ndjson", "SHA-256"}},
		{name: "non-empty target", target: data, want: []string{"not empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := filepath.Join(t.TempDir(), "backup")
			if err := os.CopyFS(broken, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				editPart(t, broken, tc.edit(append([][]byte(nil), lines...)), !tc.keepManifest)
			}
			target := tc.target
			if target == "" {
				target = filepath.Join(t.TempDir(), "restored")
			}
			_, stderr, code := run(t, "restore", "--from", broken, "--data", target)
			for _, w := range tc.want {
				if code == 0 || !strings.Contains(stderr, w) {
					t.Fatalf("restore: exit %d, stderr %q, want it to name %q", code, stderr, w)
				}
			}
			t.Log(strings.TrimSpace(stderr))
			if _, err := os.Stat(target); tc.target == "" && err == nil {
				t.Fatalf("a refused restore left %s behind", target)
			}
		})
	}
	mustRun(t, "audit", "--data", data, "--quiet") // the original, untouched by the refusal
}

// editPart writes lines as the backup's first part and, when fix, makes
// the manifest match it: its hash, size, last sequence and event count.
func editPart(tb testing.TB, dir string, lines [][]byte, fix bool) {
	tb.Helper()
	file := filepath.Join(dir, "events-000001.ndjson")
	if err := os.WriteFile(file, bytes.Join(lines, nil), 0o600); err != nil {
		tb.Fatal(err)
	}
	if !fix {
		return
	}
	m, _, err := readManifest(dir)
	if err != nil {
		tb.Fatal(err)
	}
	p := &m.Parts[0]
	if p.SHA256, p.Bytes, err = fileSHA256(dir, p.File); err != nil {
		tb.Fatal(err)
	}
	var last struct {
		Sequence uint64 `json:"sequence"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil {
		tb.Fatal(err)
	}
	p.LastSequence = max(last.Sequence, uint64(len(lines)))
	p.Events = p.LastSequence
	if err := writeManifest(dir, m); err != nil {
		tb.Fatal(err)
	}
}

// A restore cut short (killed between two batches) leaves its stream
// marked: serve, export and audit refuse it, naming the unfinished restore.
func TestAnUnfinishedRestoreIsNeverTakenForTheLedger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "backup")
	mustRun(t, "backup", "--data", simulateStream(t, "50"), "--out", dir)
	var appends []eventstore.RecordedEvent
	if err := eventstore.ReadExport(bytes.NewReader(mustRead(t, filepath.Join(dir, "events-000001.ndjson"))), func(r eventstore.RecordedEvent) error {
		if len(appends) < 20 || appends[len(appends)-1].AppendRemaining > 0 {
			appends = append(appends, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	srv := eventstoretest.RunEmbedded(t, filepath.Join(data, "jetstream"))
	store := eventstoretest.OpenEmbedded(t, srv, eventstore.Config{Restore: true})
	ctx := eventstoretest.Ctx(t, 30*time.Second)
	if err := store.BeginRestore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.Reappend(ctx, appends); err != nil {
		t.Fatal(err)
	}
	store.Close()
	srv.Shutdown()
	for _, args := range [][]string{
		{"serve", "--data", data, "--http", "127.0.0.1:0"},
		{"export", "--data", data, "--out", "-"},
		{"audit", "--data", data, "--quiet", "--public-key", strings.Repeat("ab", 32)},
	} {
		_, stderr, code := runWithin(t, time.Minute, args...)
		if code != 1 || !strings.Contains(stderr, "restore that has not finished") {
			t.Errorf("%s on an unfinished restore: exit %d, %s", args[0], code, stderr)
		}
	}
}
