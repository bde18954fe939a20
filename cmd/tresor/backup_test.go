package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/settlement"
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
// one and then an incremental one; the server is killed, a last backup
// takes the tail and the snapshots, and the data is deleted; the backup
// restored with its keys into a fresh directory holds every write
// acknowledged before the second backup began, with the answer its client
// saw; the audit passes; serve starts on it from the snapshots the backup
// carried, a retried key answers as before, and new commands continue the
// chain.
func TestRestoreFromBackupsTakenWhilePlaying(t *testing.T) {
	restoreWhilePlaying(t, func(r *crashRun, restored string) []string {
		r.stored = []string{"--data", restored}
		return nil
	})
}

// The same backups restored into a fresh three-node NATS cluster
// (--replicas 3): every acknowledged write is there as answered, the audit
// passes, and serve on the cluster continues the chain.
func TestRestoreIntoAFreshThreeNodeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	restoreWhilePlaying(t, func(r *crashRun, _ string) []string {
		c := eventstoretest.StartCluster(t)
		r.stored = []string{"--nats", c.URLs()}
		return []string{"--nats", c.URLs(), "--replicas", "3"}
	})
}

// restoreWhilePlaying backs a ledger up twice while it plays and once
// after its serve is killed, loses it,
// restores the backup into the target that into makes ready (it returns
// the flags that name the target beside --data, which holds the restored
// keys) and checks the restored ledger: every acknowledged write, the
// audit, a retried key and new commands on serve.
func restoreWhilePlaying(t *testing.T, into func(r *crashRun, restored string) []string) {
	r := newCrashRun(t)
	s := startServe(t, r.data, r.serveArgs...)
	r.setUp(s)
	dir := filepath.Join(t.TempDir(), "backup")
	identity, recipient := ageIdentity(t)
	sealPersonalFields(s)
	logged := probeComplianceLogs(s)
	eventually(t, time.Minute, func() bool { return len(r.journal.snapshot().answers) > 500 })
	mustRun(t, "backup", "--data", r.data, "--out", dir, "--keys", "--recipient", recipient)
	afterFirst := time.Now().UTC()
	if names := backupDataKeyNames(t, dir); !names["p."+keptPlayer] || !names["p."+erasedPlayer] {
		t.Fatalf("a backup beside serve, through its keeper, carries the data keys %v: want both players'", names)
	}
	erasure := eraseApproved(t, r.data, s.url, "--player", erasedPlayer, "--legal-ground", "GDPR art. 17 request")
	eventually(t, time.Minute, func() bool { return len(r.journal.snapshot().answers) > 2000 })
	before := r.journal.snapshot()
	if out := mustRun(t, "backup", "--data", r.data, "--out", dir); !strings.Contains(out, "; snapshots writer at ") {
		t.Fatalf("a backup beside serve, through its read-only user, carries no writer snapshot: %s", out)
	}
	if names := backupDataKeyNames(t, dir); !names["p."+keptPlayer] || names["p."+erasedPlayer] {
		t.Fatalf("the next backup's data keys %v: want the kept player's, not the erased one's", names)
	}
	r.stopClients()
	r.kill(s)
	// Once serve is gone, a last backup adds what the stream got since, and
	// the newest snapshots.
	t.Log(mustRun(t, "backup", "--data", r.data, "--out", dir))
	m, _, err := readManifest(dir)
	if err != nil || len(m.Parts) < 2 || m.Keys == nil || len(m.Snapshots) == 0 {
		t.Fatalf("manifest after the backups: %+v, %v", m, err)
	}
	if err := os.RemoveAll(r.data); err != nil {
		t.Fatal(err)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	target := into(r, restored)
	r.auditKey = []string{"--public-key", m.SealPublicKey}
	out := mustRun(t, append([]string{"restore", "--from", dir, "--data", restored, "--keys", "--identity", identity}, target...)...)
	t.Log(out)
	if !strings.Contains(out, "; snapshots writer at ") || !strings.Contains(out, "; data keys: ") {
		t.Fatalf("restore put back no writer snapshot or no data keys: %s", out)
	}
	fs := &crashFindings{r: r, counts: map[string]int{}, shown: map[string][]string{}}
	r.export = filepath.Join(t.TempDir(), "restored.ndjson")
	mustRun(t, append([]string{"export", "--out", r.export}, r.stored...)...)
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

	s = startServe(t, restored, append(target, r.serveArgs...)...)
	if !strings.Contains(s.logs.String(), "starting from a snapshot") {
		t.Fatalf("serve on the restored ledger did not start from the restored snapshot:\n%s", s.logs)
	}
	r.retryAndContinue(s, before)
	checkBanReasons(s, strconv.FormatFloat(erasure["decided_seq"].(float64), 'f', 0, 64))
	logged.check(s, afterFirst)
	s.stop()
	r.audit(fs)
	if len(fs.shown) > 0 {
		t.Fatalf("after new commands on the restored ledger: %v", fs.shown)
	}
}

// complianceLogs are the answers of GET /v1/significant-events and GET
// /v1/access-log, each entry without its seq (a restored log numbers its
// entries anew).
type complianceLogs struct {
	tb                 testing.TB
	significant, reads []map[string]any
}

// probeRefusedPath is the path of the refused request the probe makes.
const probeRefusedPath = "/v1/players/probe-refused/account"

// probeComplianceLogs makes on s a refused request and a staff read of a
// player's data, and returns both logs once they hold them.
func probeComplianceLogs(s *server) complianceLogs {
	s.tb.Helper()
	s.problem(401, "unauthorized", call{"GET", probeRefusedPath, "", "", ""})
	s.must(200, call{"GET", "/v1/players/" + keptPlayer + "/bans", s.token("operator", ""), "", ""})
	var l complianceLogs
	eventually(s.tb, time.Minute, func() bool {
		l = readComplianceLogs(s, "")
		return l.has(probeRefusedPath, keptPlayer)
	})
	return l
}

// readComplianceLogs reads both logs on s, the significant-event log
// with the query given.
func readComplianceLogs(s *server, query string) complianceLogs {
	s.tb.Helper()
	reg := s.token("regulator", "")
	entries := func(m map[string]any, key string) []map[string]any {
		var out []map[string]any
		for _, x := range m[key].([]any) {
			e := x.(map[string]any)
			delete(e, "seq")
			out = append(out, e)
		}
		return out
	}
	sig := s.must(200, call{"GET", "/v1/significant-events?limit=1000" + query, reg, "", ""})
	reads := s.must(200, call{"GET", "/v1/access-log?limit=1000", reg, "", ""})
	return complianceLogs{tb: s.tb, significant: entries(sig, "events"), reads: entries(reads, "entries")}
}

// has reports whether the logs hold the refused request of path and a
// staff read of the player's data.
func (l complianceLogs) has(path, player string) bool {
	return slices.ContainsFunc(l.significant, func(e map[string]any) bool { return e["path"] == path }) &&
		slices.ContainsFunc(l.reads, func(e map[string]any) bool { return e["player"] == player })
}

// check checks that the logs on s (a restored ledger) hold every entry of
// l as it was, its time included, and that a read of the significant-event
// log since a time after them (before the restore) leaves them out: the
// log reads the time an entry was first stored, not the restore's.
func (l complianceLogs) check(s *server, after time.Time) {
	l.tb.Helper()
	now := readComplianceLogs(s, "")
	for _, e := range l.significant {
		if !slices.ContainsFunc(now.significant, func(n map[string]any) bool { return reflect.DeepEqual(e, n) }) {
			l.tb.Fatalf("the restored significant-event log lacks %v: %v", e, now.significant)
		}
	}
	for _, e := range l.reads {
		if !slices.ContainsFunc(now.reads, func(n map[string]any) bool { return reflect.DeepEqual(e, n) }) {
			l.tb.Fatalf("the restored access log lacks %v: %v", e, now.reads)
		}
	}
	since := readComplianceLogs(s, "&since="+after.Format(time.RFC3339Nano))
	if slices.ContainsFunc(since.significant, func(e map[string]any) bool { return e["path"] == probeRefusedPath }) {
		l.tb.Fatalf("significant events since %s, before the restore, hold the refused request made before it: %v", after, since.significant)
	}
}

// Two players each with a ban whose reason is sealed under their data
// key: the kept one's reads after a restore; the erased one's reads
// "[erased]", its erasure restored with it.
const (
	keptPlayer   = "kept-1"
	erasedPlayer = "gone-1"
	keptReason   = "a reason the restore keeps readable"
	erasedReason = "a reason erased before the restore"
)

// sealPersonalFields bans both players, each with its reason, and closes
// the account of the one to erase (an erasure needs it closed).
func sealPersonalFields(s *server) {
	s.tb.Helper()
	op := s.token("operator", "")
	for player, reason := range map[string]string{keptPlayer: keptReason, erasedPlayer: erasedReason} {
		s.must(200, call{"PUT", "/v1/players/" + player, op, "", `{"weekly_deposit_limit":"10.00","weekly_stake_limit":"10.00"}`})
		s.must(201, call{"POST", "/v1/players/" + player + "/bans", op, "", `{"reference":"REF-` + player + `","reason":"` + reason + `"}`})
	}
	s.must(200, call{"POST", "/v1/players/" + erasedPlayer + "/closure", op, "", `{"reason":"leaves"}`})
}

// checkBanReasons reads both players' bans on s from minSeq on.
func checkBanReasons(s *server, minSeq string) {
	s.tb.Helper()
	op := s.token("operator", "")
	kept := fmt.Sprint(s.must(200, call{"GET", "/v1/players/" + keptPlayer + "/bans?min_seq=" + minSeq, op, "", ""}))
	erased := fmt.Sprint(s.must(200, call{"GET", "/v1/players/" + erasedPlayer + "/bans?min_seq=" + minSeq, op, "", ""}))
	if !strings.Contains(kept, keptReason) || !strings.Contains(erased, domain.ErasedText) || strings.Contains(erased, erasedReason) {
		s.tb.Fatalf("the bans after the restore: kept %s, erased %s; want the first reason in clear, the second %q", kept, erased, domain.ErasedText)
	}
}

// backupDataKeyNames are the names of the data keys a backup holds.
func backupDataKeyNames(tb testing.TB, dir string) map[string]bool {
	tb.Helper()
	m, _, err := readManifest(dir)
	if err != nil || m.DataKeys == nil || m.DataKeys.File == "" {
		tb.Fatalf("the backup's manifest holds no data keys: %+v, %v", m, err)
	}
	entries, err := readDataKeysFile(dir, m.DataKeys)
	if err != nil {
		tb.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name] = true
	}
	return names
}

// retryAndContinue retries on s a deposit acknowledged before the backup,
// which must answer as it did, and makes a new one.
func (r *crashRun) retryAndContinue(s *server, before journalCopy) {
	r.t.Helper()
	for _, a := range before.answers {
		if a.w.kind != kindDeposit || a.status/100 != 2 || a.bad != "" {
			continue
		}
		status, body, err := r.exchange(s.url, a.w.call)
		var again crashAnswerBody
		if err != nil || status != http.StatusOK || json.Unmarshal(body, &again) != nil || *again.BalanceAfter != *a.body.BalanceAfter {
			r.t.Fatalf("retry of %s after the restore: %d %s %v, first answered balance_after %s", a.w, status, body, err, *a.body.BalanceAfter)
		}
		status, body, err = r.exchange(s.url, call{"POST", "/v1/players/" + a.w.player + "/deposits", a.w.token, "after-restore", `{"amount":"1.00"}`})
		if err != nil || status/100 != 2 {
			r.t.Fatalf("a new deposit after the restore: %d %s %v", status, body, err)
		}
		return
	}
	r.t.Fatal("no deposit acknowledged before the second backup to retry")
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

// The regulator's read-only user of docs/export.md is enough to back a
// NATS cluster's ledger up through --nats, all but its data keys. The
// operator's user backs it up first, data keys included; a player is
// erased; the regulator's backup adds only what the operator wrote since,
// chained to it, and says, on its line and in the manifest, that it
// carries no data keys: the directory keeps the operator's, which still
// hold the erased player's key. Restored into a fresh directory, the
// stream exports byte for byte as the operator's, the audit passes, and
// the erased player's key is left out: its erasure is in the backup. The
// user reads the snapshot bucket too: the backup carries the writer's
// snapshot, and the restore puts it back. The operator's backup taken
// before the erasure, restored, holds the key until tresor erase
// --replay-from applies the erasure an export of the live stream holds.
func TestBackupThroughTheRegulatorsUser(t *testing.T) {
	_, operator, regulator := regulatorServer(t)
	data := t.TempDir()
	keys := filepath.Join(data, "keys")
	master, sealKey := filepath.Join(keys, "master.key"), filepath.Join(keys, "seal.ed25519")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	for file, size := range map[string]int{master: settlement.MasterKeySize, sealKey: ed25519.SeedSize, filepath.Join(keys, "token.key"): api.TokenKeySize} {
		if err := os.Rename(writeKey(t, size), file); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, "simulate", "--nats", operator, "--master-key-file", master, "--seal-key-file", sealKey, "--plays", "30", "--players", "5", "--quiet")
	pub := hex.EncodeToString(sealPublicKey(t, sealKey))
	dir, beforeErasure := filepath.Join(t.TempDir(), "backup"), filepath.Join(t.TempDir(), "before-erasure")
	backup := func(as string, opts ...string) string {
		return mustRun(t, append([]string{"backup", "--nats", as, "--public-key", pub, "--master-key-file", master, "--out", dir}, opts...)...)
	}
	s := startServe(t, data, "--nats", operator)
	sealPersonalFields(s)
	first := backup(operator)
	if names := backupDataKeyNames(t, dir); !strings.Contains(first, "; data keys: ") || !names["p."+erasedPlayer] {
		t.Fatalf("the operator's backup carries the data keys %v: want the player's to erase\n%s", names, first)
	}
	if err := os.CopyFS(beforeErasure, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	eraseApproved(t, data, s.url, "--player", erasedPlayer, "--legal-ground", "GDPR art. 17 request")
	s.stop()
	second := backup(regulator, "--inbox-prefix", "_INBOX_regulator")
	m, _, err := readManifest(dir)
	if err != nil || len(m.Parts) != 2 || m.Parts[1].FirstSequence != m.Parts[0].LastSequence+1 ||
		!strings.Contains(first, "; snapshots writer at ") || len(m.Snapshots) == 0 {
		t.Fatalf("manifest after the operator's and the regulator's backups: %+v, %v\n%s\n%s", m, err, first, second)
	}
	if !strings.Contains(second, "no data keys: the NATS user may not read the bucket "+eventstore.DataKeysBucket) ||
		m.DataKeys == nil || !strings.Contains(m.DataKeys.Missing, "may not read") || m.DataKeys.Sequence != m.Parts[0].LastSequence {
		t.Fatalf("the regulator's backup: %s, data keys %+v: want it to say it carries none, and keep the operator's", second, m.DataKeys)
	}
	if sig := m.Logs["significant"]; !strings.Contains(second, "no significant-event log: the NATS user may not read the stream "+eventstore.SignificantStream) ||
		sig == nil || !strings.Contains(sig.Missing, "may not read") {
		t.Fatalf("the regulator's backup: %s, significant-event log %+v: want it to say it carries none", second, sig)
	}
	t.Log(first, second)

	restored := filepath.Join(t.TempDir(), "restored")
	out := mustRun(t, "restore", "--from", dir, "--data", restored, "--master-key-file", master)
	if !strings.Contains(out, "; snapshots writer at ") || !strings.Contains(out, " put back, 2 left out (their erasure is in the backup)") {
		t.Fatalf("the restore put back no writer snapshot, or the erased player's key and entry: %s", out)
	}
	if r := auditReport(t, 0, "--data", restored, "--public-key", pub); !r.OK || r.Plays != 30 {
		t.Fatalf("audit of the restored ledger: %+v", r)
	}
	files := t.TempDir()
	byOperator, restoredExport := filepath.Join(files, "operator.ndjson"), filepath.Join(files, "restored.ndjson")
	exportFile(t, "--nats", operator, "--out", byOperator)
	exportFile(t, "--data", restored, "--out", restoredExport)
	if !bytes.Equal(mustRead(t, byOperator), mustRead(t, restoredExport)) {
		t.Fatal("the restored stream differs from the operator's")
	}

	// Restored to a point before the erasure, the backup still never
	// brings back the key: the erasure is in its later part.
	point := filepath.Join(t.TempDir(), "point")
	if out := mustRun(t, "restore", "--from", dir, "--data", point, "--to-seq", strconv.FormatUint(m.Parts[0].LastSequence, 10)); !strings.Contains(out, " 2 left out ") {
		t.Fatalf("a restore to a point before the erasure: %s", out)
	}
	older := filepath.Join(t.TempDir(), "older")
	mustRun(t, "restore", "--from", beforeErasure, "--data", older, "--master-key-file", master)
	for want, destroyed := range []string{`"entries_destroyed": 2`, `"entries_destroyed": 0`} {
		if out, errOut, code := run(t, "erase", "--replay-from", byOperator, "--data", older); code != 0 || !strings.Contains(out, destroyed) {
			t.Fatalf("replay %d of the erasures: exit %d, %s %s; want %s", want+1, code, out, errOut, destroyed)
		}
	}
}

// TestABackupClearsWhatAKilledRunLeft puts in a backup directory the
// unfinished files a run killed mid-copy leaves (a timer's timeout, a
// reboot): a snapshot's and a part's. The next run, which holds the
// directory's lock, removes them, so that runs killed every so often do
// not fill the backup's disk with copies of snapshots no manifest names.
func TestABackupClearsWhatAKilledRunLeft(t *testing.T) {
	t.Parallel()
	data, out := t.TempDir(), t.TempDir()
	mustRun(t, "simulate", "--data", data, "--plays", "5", "--players", "2", "--quiet")
	mustRun(t, "backup", "--data", data, "--out", out)
	left := []string{"snapshot-1598643612.partial", "events-000002.ndjson.partial"}
	for _, f := range left {
		if err := os.WriteFile(filepath.Join(out, f), []byte("cut short"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, "backup", "--data", data, "--out", out)
	for _, f := range left {
		if _, err := os.Stat(filepath.Join(out, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after a backup: %v, want it removed", f, err)
		}
	}
	mustRun(t, "restore", "--from", out, "--data", t.TempDir())
}
