package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
	"github.com/jackc/pgx/v5"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// auditJSON is the part of audit's --json report the tests read.
type auditJSON struct {
	OK              bool           `json:"ok"`
	Plays           int            `json:"plays"`
	Events          int            `json:"events"`
	ViolationCounts map[string]int `json:"violation_counts"`
	Violations      []struct {
		Sequence uint64 `json:"sequence"`
		Code     string `json:"code"`
		Expected string `json:"expected"`
		Found    string `json:"found"`
	} `json:"violations"`
	Source    string  `json:"source"`
	FromSeal  uint64  `json:"from_seal"`
	FromState uint64  `json:"from_state"`
	NewEvents int     `json:"new_events"`
	Last      uint64  `json:"last_sequence"`
	Yardstick float64 `json:"yardstick_events_per_second"`
}

func auditReport(t *testing.T, wantExit int, args ...string) auditJSON {
	t.Helper()
	stdout, stderr, code := run(t, append([]string{"audit", "--json", "--quiet"}, args...)...)
	if code != wantExit {
		t.Fatalf("audit %v: exit %d, want %d: %s", args, code, wantExit, stderr)
	}
	var r auditJSON
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("audit %v: %v in %q", args, err, stdout)
	}
	return r
}

func TestAuditCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, stderr, code := run(t, "simulate", "--data", dir, "--price", "1", "--plays", "20", "--players", "2", "--quiet"); code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	// The regulator's way: the operator hands over its public key in hex.
	stdout, stderr, code := run(t, "seal-key", "--data", dir)
	want := sealPublicKey(t, filepath.Join(dir, "keys", "seal.ed25519"))
	pub, keyID, _ := strings.Cut(strings.TrimSpace(stdout), "\n")
	if code != 0 || pub != hex.EncodeToString(want) || keyID != "key_id "+eventstore.KeyID(want) {
		t.Fatalf("seal-key: exit %d, %q, %s", code, stdout, stderr)
	}
	if r := auditReport(t, 0, "--data", dir, "--public-key", pub); !r.OK || r.Plays != 20 || r.Source != "data "+dir {
		t.Fatalf("clean stream: %+v", r)
	}

	// The same stream through an export: clean, then caught once a byte of
	// it is edited.
	file := filepath.Join(t.TempDir(), "stream.ndjson")
	if _, stderr, code := run(t, "export", "--data", dir, "--out", file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	if r := auditReport(t, 0, "--file", file, "--public-key", pub); !r.OK || r.Plays != 20 || r.Source != "file "+file {
		t.Fatalf("clean export: %+v", r)
	}
	// From the first seal, of the stream and of the export.
	seal := firstSeal(t, file)
	for _, source := range [][]string{{"--data", dir}, {"--file", file}} {
		if r := auditReport(t, 0, append(source, "--public-key", pub, "--from-seal", fmt.Sprint(seal))...); !r.OK || r.FromSeal != seal || r.Events == 0 {
			t.Fatalf("%v from the seal at %d: %+v", source, seal, r)
		}
	}
	b := mustRead(t, file)
	i := strings.Index(string(b), `"balance_after":"`) + len(`"balance_after":"`)
	b[i]++
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := auditReport(t, 1, "--file", file, "--public-key", pub); r.ViolationCounts["hash_mismatch"] != 1 {
		t.Fatalf("edited export: %+v", r)
	}

	// An insider appends to a copy of the stream without the operator's
	// key: the committer seals with the insider's.
	forged := t.TempDir()
	if err := os.CopyFS(forged, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	appendWithKey(t, forged, ed25519.NewKeyFromSeed([]byte("insider-seal-key-not-the-real-1!")))
	r := auditReport(t, 1, "--data", forged, "--public-key", pub)
	if r.OK || r.ViolationCounts["seal_invalid"] == 0 || r.Violations[0].Code != "seal_invalid" {
		t.Fatalf("forged seal: %+v", r)
	}
	// The human form names the violation too.
	stdout, _, code = run(t, "audit", "--data", forged, "--quiet")
	if code != 1 || !strings.Contains(stdout, "seal_invalid") {
		t.Fatalf("exit %d: %s", code, stdout)
	}

	for _, args := range [][]string{
		{"--data", dir, "--file", "export.ndjson"},
		{"--nats", "nats://127.0.0.1:1"},
		{"--data", dir, "--public-key", "abcd"},
		{"--data", dir, "--max-violations", "0"},
		{"--data", dir, "--from-seal", "1"},
	} {
		if _, stderr, code := run(t, append([]string{"audit", "--quiet"}, args...)...); code != 2 || !strings.HasPrefix(stderr, "tresor: ") {
			t.Errorf("audit %v: exit %d, %q; want 2", args, code, stderr)
		}
	}
}

// TestIncrementalAuditCommand runs the regulator's daily audit with
// --state: the first run audits everything and writes the state, the next
// reads only the new events and reports what a full audit reports; a state
// file cut short is refused (exit 2), and a stream that no longer holds
// what the state verified fails the audit (exit 1) with the old state kept.
func TestIncrementalAuditCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, stderr, code := run(t, "simulate", "--data", dir, "--price", "1", "--plays", "20", "--players", "2", "--quiet"); code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	key := ed25519.NewKeyFromSeed(mustRead(t, filepath.Join(dir, "keys", "seal.ed25519")))
	fork := t.TempDir()
	if err := os.CopyFS(fork, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "audit.state")
	first := auditReport(t, 0, "--data", dir, "--state", state)
	if !first.OK || first.FromState != 0 || first.NewEvents != first.Events || first.Plays != 20 {
		t.Fatalf("first audit: %+v", first)
	}
	firstState := mustRead(t, state)
	appendWithKey(t, dir, key)
	next := auditReport(t, 0, "--data", dir, "--state", state)
	full := auditReport(t, 0, "--data", dir)
	if next.FromState != first.Last || next.NewEvents == 0 || next.NewEvents >= 10 || next.Events != full.Events || next.Plays != full.Plays || next.Last != full.Last {
		t.Fatalf("incremental %+v, full %+v", next, full)
	}
	saved := mustRead(t, state)
	// The same from an export, resumed from the first day's state.
	export, fromFile := filepath.Join(t.TempDir(), "stream.ndjson"), filepath.Join(t.TempDir(), "audit.state")
	if _, stderr, code := run(t, "export", "--data", dir, "--out", export); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	if err := os.WriteFile(fromFile, firstState, 0o600); err != nil {
		t.Fatal(err)
	}
	pub := hex.EncodeToString(key.Public().(ed25519.PublicKey))
	if r := auditReport(t, 0, "--file", export, "--public-key", pub, "--state", fromFile); r.FromState != first.Last || r.Events != full.Events || r.NewEvents != next.NewEvents {
		t.Fatalf("export resumed: %+v", r)
	}

	// The operator's copy of the stream before the append, where another
	// event follows: at the saved position it holds another seal.
	appendEvents(t, fork, key, eventstore.Event{Type: "AccountOpened", SchemaVersion: 1, Aggregate: eventstore.Aggregate{Kind: "player", ID: "trudy"},
		Payload: []byte(`{"player":"trudy"}`)})
	appendWithKey(t, fork, key)
	broken := auditReport(t, 1, "--data", fork, "--public-key", pub, "--state", state)
	if broken.ViolationCounts["continuity_broken"] != 1 || broken.NewEvents != 0 {
		t.Fatalf("forked stream: %+v", broken)
	}
	if got := mustRead(t, state); string(got) != string(saved) {
		t.Fatal("the state was rewritten after a failed continuity check")
	}

	if err := os.WriteFile(state, saved[:len(saved)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "audit", "--quiet", "--data", dir, "--state", state)
	if code != 2 || !strings.Contains(stderr, "audit state unusable: truncated or corrupt") || !strings.Contains(stderr, "rerun a full audit") {
		t.Fatalf("truncated state: exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{
		{"--data", dir, "--state", state, "--from-seal", "1"},
		{"--data", dir, "--state", filepath.Join(dir, "no-such-dir", "audit.state")},
	} {
		if _, stderr, code := run(t, append([]string{"audit", "--quiet"}, args...)...); code != 2 {
			t.Errorf("audit %v: exit %d, %q; want 2", args, code, stderr)
		}
	}
}

// appendWithKey appends one event to the stream of a data directory
// through a committer sealing with key.
func appendWithKey(t *testing.T, dir string, key ed25519.PrivateKey) {
	t.Helper()
	appendEvents(t, dir, key, eventstore.Event{Type: "AccountOpened", SchemaVersion: 1, Aggregate: eventstore.Aggregate{Kind: "player", ID: "mallory"},
		Payload: []byte(`{"player":"mallory"}`)})
}

// appendEvents appends events, one append each, to the stream of a data
// directory through a committer sealing with key: hashes, links and seals
// are right, whatever the events say.
func appendEvents(t *testing.T, dir string, key ed25519.PrivateKey, events ...eventstore.Event) {
	t.Helper()
	nc, done := embeddedConn(t, dir)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := eventstore.Open(ctx, nc, eventstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := store.NewCommitter(ctx, settlement.Chain, eventstore.CommitterConfig{SealKey: key})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if res := <-c.Submit(ctx, eventstore.AppendRequest{Events: []eventstore.Event{ev}}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAuditComparesThePostgreSQLReadModels(t *testing.T) {
	t.Parallel()
	dir, db := t.TempDir(), freshDatabase(t)
	for _, args := range [][]string{
		{"simulate", "--data", dir, "--price", "2", "--plays", "12", "--players", "2", "--quiet"},
		{"projections", "rebuild", "--data", dir, "--database-url", db},
	} {
		if _, stderr, code := run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	if r := auditReport(t, 0, "--data", dir, "--database-url", db); !r.OK || r.Plays != 12 {
		t.Fatalf("read models as projected: %+v", r)
	}
	// when a prize is edited in PostgreSQL
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var schema string
	if err := conn.QueryRow(ctx, `SELECT schema_name FROM tresor_projections.generations WHERE state = 'current'`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`UPDATE %s.plays SET prize = prize + 100`, pgx.Identifier{schema}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	r := auditReport(t, 1, "--data", dir, "--database-url", db)
	if r.ViolationCounts["projection_mismatch"] == 0 || len(r.ViolationCounts) != 1 {
		t.Fatalf("edited prizes: %+v", r)
	}
}

// firstSeal returns the stream sequence of the first seal of an export.
func firstSeal(t *testing.T, file string) uint64 {
	t.Helper()
	for _, line := range strings.Split(string(mustRead(t, file)), "\n") {
		var l struct {
			Sequence uint64 `json:"sequence"`
			Type     string `json:"type"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Type == eventstore.SealType {
			return l.Sequence
		}
	}
	t.Fatal("no seal in the export")
	return 0
}

// The regulator's read-only NATS user of docs/export.md audits the live
// stream, the yardstick included: nothing of it needs to write.
func TestRegulatorAuditsWithTheReadOnlyUser(t *testing.T) {
	_, regulator, sealKey := regulatorStream(t)
	pub := hex.EncodeToString(sealPublicKey(t, sealKey))
	r := auditReport(t, 0, "--nats", regulator, "--inbox-prefix", "_INBOX_regulator", "--public-key", pub, "--yardstick")
	if !r.OK || r.Plays != 30 || r.Yardstick <= 0 {
		t.Fatalf("audit as the regulator: %+v", r)
	}
}

// regulatorServer runs a nats-server with the users of docs/export.md and
// returns it with the operator's and the regulator's URLs. It sets the
// environment: its test cannot run in parallel.
func regulatorServer(t *testing.T) (srv *natsserver.Server, operator, regulator string) {
	t.Helper()
	t.Setenv("TRESOR_NATS_PASSWORD", "operator-secret")
	t.Setenv("REGULATOR_NATS_PASSWORD", "regulator-secret")
	srv = startAuthServer(t, regulatorConf(t))
	addr := srv.Addr().String()
	operator = (&url.URL{Scheme: "nats", User: url.UserPassword("tresor", "operator-secret"), Host: addr}).String()
	regulator = (&url.URL{Scheme: "nats", User: url.UserPassword("regulator", "regulator-secret"), Host: addr}).String()
	return srv, operator, regulator
}

// regulatorStream runs a nats-server with the users of docs/export.md and
// writes a stream of 30 plays through the real write path as the
// operator. It returns the operator's and the regulator's URLs and the
// seal key file.
func regulatorStream(t *testing.T) (operator, regulator, sealKey string) {
	t.Helper()
	_, operator, regulator = regulatorServer(t)
	sealKey = writeKey(t, ed25519.SeedSize)
	if _, stderr, code := run(t, "simulate", "--nats", operator, "--master-key-file", writeKey(t, settlement.MasterKeySize),
		"--seal-key-file", sealKey, "--plays", "30", "--players", "5", "--quiet"); code != 0 {
		t.Fatalf("simulate as the operator: exit %d: %s", code, stderr)
	}
	return operator, regulator, sealKey
}
