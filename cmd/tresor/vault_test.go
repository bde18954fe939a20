package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/vault"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// forkReportMax is how soon a rewritten stream must be reported as a fork.
const forkReportMax = 5 * time.Second

// startVault runs the real `tresor vault` on data, following source (the
// regulator's URL, given in the environment as a password belongs), and
// waits until it listens.
func startVault(tb testing.TB, data, source, pub string, args ...string) *server {
	tb.Helper()
	cmd := exec.Command(vaultBin(), append([]string{"vault", "--data", data, "--http", "127.0.0.1:0", "--public-key", pub,
		"--inbox-prefix", "_INBOX_regulator"}, args...)...)
	cmd.Env = append(os.Environ(), "TRESOR_VAULT_SOURCE="+source)
	v, addr := launch(tb, cmd, data)
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("tresor vault on %s:\n%s", data, v.logs)
		}
	})
	v.awaitListening(addr, "tresor vault")
	return v
}

// vaultBin is the binary `tresor vault` runs from: TRESOR_VAULT_BIN, to
// measure another build of the vault beside this one's on the same stream,
// or the one built for the tests.
func vaultBin() string {
	if bin := os.Getenv("TRESOR_VAULT_BIN"); bin != "" {
		return bin
	}
	return tresorBin
}

// vaultStatus reads GET /v1/vault/status.
func (s *server) vaultStatus() map[string]any {
	s.tb.Helper()
	return s.must(200, call{"GET", "/v1/vault/status", "", "", ""})
}

// metrics reads /metrics.
func (s *server) metrics() string {
	s.tb.Helper()
	resp, body := s.get("/metrics", nil)
	if resp.StatusCode != 200 {
		s.tb.Fatalf("GET /metrics: %s", resp.Status)
	}
	return body
}

// metric reads one series of /metrics without labels.
func (s *server) metric(name string) float64 {
	s.tb.Helper()
	sc := bufio.NewScanner(strings.NewReader(s.metrics()))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				s.tb.Fatal(err)
			}
			return f
		}
	}
	s.tb.Fatalf("no %s in /metrics", name)
	return 0
}

// TestVaultFollowsTheOperator runs the operator's `tresor serve` on a NATS
// server with the users of docs/export.md, under load, and the
// regulator's `tresor vault` following it with the read-only user: the
// vault, killed with -9 in the middle and restarted, resumes from its own
// copy and reads from the source only what it had not copied; once the
// load stops it has verified everything, found nothing, and its copy
// exports byte for byte as the operator's stream. Then the operator's
// stream is replaced by one whose deposit at a position the vault holds is
// another amount, the chain rehashed from there, and the operator
// restarted on it: the vault reports a fork naming that position within
// 5 seconds; a vault that never saw the first history reports the seals
// the rewrite broke.
func TestVaultFollowsTheOperator(t *testing.T) {
	_, operator, regulator := regulatorServer(t)
	opData, vaultData := t.TempDir(), t.TempDir()
	pub := writeClusterKeys(t, opData)
	s := startServe(t, opData, "--nats", operator)
	players := []string{"p0", "p1", "p2", "p3"}
	op := fundPlayers(s, players)

	var never atomic.Bool
	stop := make(chan struct{})
	load := stakeLoad(s, players, &never, stop)
	v := startVault(t, vaultData, regulator, pub)
	eventstoretest.Eventually(t, 30*time.Second, verified(v, 100))
	v.kill()
	v = startVault(t, vaultData, regulator, pub)
	resumed := regexp.MustCompile(`vault: resumed" verified_seq=(\d+) replayed_from_copy=(\d+) following_from=(\d+)`)
	var from uint64
	eventstoretest.Eventually(t, 10*time.Second, func() error {
		m := resumed.FindStringSubmatch(v.logs.String())
		if m == nil {
			return fmt.Errorf("no resume line yet")
		}
		from, _ = strconv.ParseUint(m[3], 10, 64)
		return nil
	})
	if from < 100 {
		t.Fatalf("the restarted vault follows the source from %d, before what it had verified\n%s", from, v.logs)
	}
	s.must(200, call{"POST", "/v1/players/p0/deposits", op, "d2", `{"amount":"100.00"}`})
	eventstoretest.Eventually(t, 30*time.Second, verified(v, float64(from+200)))
	close(stop)
	if _, err := load(); err != nil {
		t.Fatal(err)
	}

	// The operator stops, its writer sealing its last events. The vault
	// catches up: everything verified, the closing seal too, nothing
	// found, and only the events after the restart's position read from
	// the source.
	s.stop()
	last := lastSequence(t, operator)
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		st := v.vaultStatus()
		if st["verified_seq"].(float64) != float64(last) || st["source_seq"].(float64) != float64(last) || st["lag_events"].(float64) != 0 {
			return fmt.Errorf("status %v, the source ends at %d", st, last)
		}
		return nil
	})
	st := v.vaultStatus()
	if len(st["violations"].([]any)) != 0 || len(st["forks"].([]any)) != 0 || st["last_seal_seq"].(float64) != float64(last) {
		t.Fatalf("status after the load: %v\n%s", st, v.logs)
	}
	if read := v.metric("tresor_vault_source_events_read_total"); read != float64(last-from+1) {
		t.Fatalf("the restarted vault read %v events from the source, want %d (from %d to %d)", read, last-from+1, from, last)
	}
	ofSource := sameAsSource(t, vaultData, regulator, pub, last)
	checkCosignatures(t, v, vaultData, ofSource)

	// The operator rewrites its stream at a deposit the vault holds.
	at := rewriteStream(t, operator, ofSource)
	rewritten := time.Now()
	restarted, addr := launchServe(t, opData, "--nats", operator)
	forkLine := regexp.MustCompile(fmt.Sprintf(`alarm: fork.* sequence=%d code=fork`, at))
	eventstoretest.Eventually(t, forkReportMax, func() error {
		forks := v.vaultStatus()["forks"].([]any)
		if len(forks) != 1 || forks[0].(map[string]any)["sequence"].(float64) != float64(at) || !forkLine.MatchString(v.logs.String()) {
			return fmt.Errorf("forks %v", forks)
		}
		return nil
	})
	t.Logf("fork at sequence %d of %d reported %s after the rewrite", at, last, time.Since(rewritten).Round(time.Millisecond))
	restarted.awaitListening(addr, "tresor serve")
	restarted.waitReady(60 * time.Second)
	restarted.stop()
	v.stop()

	// A vault that never saw the first history finds the rewritten one
	// fails the audit where its seals no longer sign what they name.
	fresh := startVault(t, t.TempDir(), regulator, pub)
	fresh.waitAlarm("seal_invalid")
	if !regexp.MustCompile(`alarm: violation" sequence=\d+ code=seal_invalid`).MatchString(fresh.logs.String()) {
		t.Fatalf("the violation is not logged with its position:\n%s", fresh.logs)
	}
	fresh.stop()
}

// fundPlayers opens an emission and gives each player limits and 500.00;
// it returns the operator's token.
func fundPlayers(s *server, players []string) string {
	s.tb.Helper()
	op := s.token("operator", "")
	s.must(201, call{"POST", "/v1/emissions", op, "e1", `{"price":"1.00","blocks":1}`})
	for _, p := range players {
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"1000.00","weekly_stake_limit":"1000.00"}`})
		s.must(200, call{"POST", "/v1/players/" + p + "/deposits", op, "d1", `{"amount":"500.00"}`})
	}
	return op
}

// verified says whether the vault has verified at least least events.
func verified(v *server, least float64) func() error {
	return func() error {
		if n := v.vaultStatus()["verified_seq"].(float64); n < least {
			return fmt.Errorf("verified_seq %v", n)
		}
		return nil
	}
}

// stopAndCatchUp stops the operator's serve s, its writer sealing its
// last events, and waits until the vault v has verified the stream at url
// to its end, the closing seal included; it returns the last sequence.
func stopAndCatchUp(t *testing.T, s, v *server, url string) uint64 {
	t.Helper()
	s.stop()
	last := lastSequence(t, url)
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		if st := v.vaultStatus(); st["verified_seq"].(float64) != float64(last) || st["last_seal_seq"].(float64) != float64(last) {
			return fmt.Errorf("status %v, the source ends at %d", st, last)
		}
		return nil
	})
	return last
}

// checkCosignatures checks that the vault cosigned, with the key of its
// data directory, the head of every seal of the export in file, and
// nothing else.
func checkCosignatures(t *testing.T, v *server, vaultData, file string) {
	t.Helper()
	seed := mustRead(t, filepath.Join(vaultData, "keys", "vault.ed25519"))
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	var answer struct {
		PublicKey    string              `json:"public_key"`
		Cosignatures []vault.Cosignature `json:"cosignatures"`
	}
	if resp, body := v.get("/v1/vault/cosignatures", nil); resp.StatusCode != 200 || json.Unmarshal([]byte(body), &answer) != nil {
		t.Fatalf("GET /v1/vault/cosignatures: %s %s", resp.Status, body)
	}
	if answer.PublicKey != hex.EncodeToString(pub) {
		t.Fatalf("the vault answers the key %s, its key file holds %x", answer.PublicKey, pub)
	}
	cosigned := map[uint64]vault.Cosignature{}
	for _, c := range answer.Cosignatures {
		if err := c.Verify(pub); err != nil {
			t.Fatal(err)
		}
		if _, twice := cosigned[c.SealSequence]; twice {
			t.Fatalf("the seal at %d cosigned twice", c.SealSequence)
		}
		cosigned[c.SealSequence] = c
	}
	seals := 0
	if err := eventstore.ReadExport(bytes.NewReader(mustRead(t, file)), func(ev eventstore.RecordedEvent) error {
		if ev.Type != eventstore.SealType {
			return nil
		}
		seals++
		var seal eventstore.Seal
		if err := json.Unmarshal(ev.Payload, &seal); err != nil {
			return err
		}
		c, ok := cosigned[ev.Sequence]
		if !ok || c.Chain != seal.Chain || c.Sequence != seal.Sequence || c.ChainSeq != seal.ChainSeq || c.Hash != seal.Hash {
			return fmt.Errorf("the seal at %d (%+v): cosignature %+v", ev.Sequence, seal, c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seals == 0 || seals != len(cosigned) {
		t.Fatalf("%d seals, %d cosignatures", seals, len(cosigned))
	}
}

// lastSequence is the last sequence of the stream at url.
func lastSequence(t *testing.T, url string) uint64 {
	t.Helper()
	st, err := eventstore.Connect(context.Background(), url, eventstore.Config{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	last, err := st.LastSequence(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// rewriteStream replaces the stream at url, as its operator can, with the
// events of the export in file but the amount of the middle deposit,
// rehashing its chain from there (its seals are left as they were: only
// the key could sign again), and deletes every other stream of the
// account (the writer's high-water mark, its snapshots), so that serve
// starts on the rewritten history. It returns the deposit's sequence.
func rewriteStream(t *testing.T, url, file string) uint64 {
	t.Helper()
	events := readExportEvents(t, file)
	var at int
	for i := len(events) / 2; i < len(events) && at == 0; i++ {
		if events[i].Type == "FundsDeposited" {
			at = i
		}
	}
	for i := len(events) / 2; i >= 0 && at == 0; i-- {
		if events[i].Type == "FundsDeposited" {
			at = i
		}
	}
	if at == 0 {
		t.Fatal("no deposit to rewrite")
	}
	before := string(events[at].Payload)
	events[at].Payload = regexp.MustCompile(`"amount":"[0-9.]+"`).ReplaceAll(events[at].Payload, []byte(`"amount":"999.00"`))
	if string(events[at].Payload) == before {
		t.Fatalf("no amount in %s", before)
	}
	prev := events[at].PrevHash
	for i := at; i < len(events); i++ {
		if events[i].Chain != events[at].Chain {
			continue
		}
		events[i].PrevHash = prev
		events[i].Hash = eventstore.ComputeHash(&events[i])
		prev = events[i].Hash
	}

	// The operator's own evidence of the first history goes too: its
	// high-water mark and snapshots would refuse the rewrite.
	deleteStreams(t, url)
	ctx := context.Background()
	st, err := eventstore.Connect(ctx, url, eventstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reappendAll(t, st, events)
	return events[at].Sequence
}

// deleteStreams deletes every stream of the account at url: the ledger,
// the writer's high-water mark, its snapshots.
func deleteStreams(t *testing.T, url string) {
	t.Helper()
	js := jetStreamAt(t, url)
	ctx := context.Background()
	names := js.StreamNames(ctx)
	var streams []string
	for name := range names.Name() {
		streams = append(streams, name)
	}
	if names.Err() != nil {
		t.Fatal(names.Err())
	}
	for _, name := range streams {
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
}

// hasAlarm reports whether the vault's status lists a violation of code.
func hasAlarm(st map[string]any, code string) bool {
	for _, viol := range st["violations"].([]any) {
		if viol.(map[string]any)["code"] == code {
			return true
		}
	}
	return false
}

// waitAlarm waits until the vault's status lists a violation of code.
func (s *server) waitAlarm(code string) {
	s.tb.Helper()
	eventstoretest.Eventually(s.tb, 30*time.Second, func() error {
		if st := s.vaultStatus(); !hasAlarm(st, code) {
			return fmt.Errorf("no %s: %v", code, st)
		}
		return nil
	})
}

// TestPrometheusAlertsOnTheVault runs a real Prometheus with the vault's
// shipped rules (their `for` cut to seconds) scraping a real vault that
// follows a real serve: the vault's series are there and no alert is
// active while all is well; events left unsealed past --seal-overdue
// raise seal_overdue on the status and TresorVaultSealOverdue, which
// clear once the operator's writer seals them at its stop; the
// operator's NATS going away raises source_unreachable and
// TresorVaultSourceUnreachable.
func TestPrometheusAlertsOnTheVault(t *testing.T) {
	bin := prometheusTool(t, "prometheus")
	srv, operator, regulator := regulatorServer(t)
	opData := t.TempDir()
	pub := writeClusterKeys(t, opData)
	s := startServe(t, opData, "--nats", operator)
	v := startVault(t, t.TempDir(), regulator, pub, "--seal-overdue", "2s", "--unreachable-after", "1s")
	prom := startPrometheusOn(t, bin, vaultRules, "tresor-vault", strings.TrimPrefix(v.url, "http://"))
	for _, metric := range []string{"tresor_vault_source_seq", "tresor_vault_verified_seq", "tresor_vault_lag_events", "tresor_vault_lag_seconds",
		"tresor_vault_last_seal_seq", "tresor_vault_forks", `tresor_vault_violations{code="hash_mismatch"}`, "tresor_vault_source_up"} {
		prom.waitFor(t, metric, func(v []promSample) string {
			if len(v) != 1 {
				return fmt.Sprintf("%d series", len(v))
			}
			return ""
		})
	}
	prom.waitFor(t, "tresor_vault_source_up", valueIs("1"))
	for _, name := range []string{"TresorVaultFork", "TresorVaultViolation", "TresorVaultSourceUnreachable", "TresorVaultSealOverdue", "TresorVaultDown"} {
		if state := prom.alert(t, name); state != "" {
			t.Fatalf("%s is %s on a healthy vault", name, state)
		}
	}

	// Events the operator's writer seals within a minute, later than the
	// vault's setting.
	s.fundedPlayer()
	v.waitAlarm("seal_overdue")
	prom.waitAlert(t, "TresorVaultSealOverdue", "firing")
	s.stop()
	prom.waitAlert(t, "TresorVaultSealOverdue", "")
	if st := v.vaultStatus(); hasAlarm(st, "seal_overdue") || st["last_seal_seq"].(float64) != st["verified_seq"].(float64) {
		t.Fatalf("after the closing seal: %v", st)
	}

	srv.Shutdown()
	v.waitAlarm("source_unreachable")
	prom.waitAlert(t, "TresorVaultSourceUnreachable", "firing")
	if !strings.Contains(v.logs.String(), "code=source_unreachable") {
		t.Fatalf("the alarm is not logged:\n%s", v.logs)
	}
	v.stop()
}

// readExportEvents reads the events of an export.
func readExportEvents(t *testing.T, file string) []eventstore.RecordedEvent {
	t.Helper()
	var events []eventstore.RecordedEvent
	if err := eventstore.ReadExport(bytes.NewReader(mustRead(t, file)), func(ev eventstore.RecordedEvent) error {
		events = append(events, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return events
}

// reappendAll writes events, whole appends that follow the stream's end,
// to st in batches a nats-server of stock limits takes: at most
// eventstore.BatchEventsMax events, ending where an append ends.
func reappendAll(t *testing.T, st *eventstore.NATSStore, events []eventstore.RecordedEvent) {
	t.Helper()
	ctx := context.Background()
	for first := 0; first < len(events); {
		end := min(first+eventstore.BatchEventsMax, len(events))
		for end > first && events[end-1].AppendRemaining != 0 {
			end--
		}
		if end == first {
			t.Fatalf("an append of more than %d events at sequence %d", eventstore.BatchEventsMax, events[first].Sequence)
		}
		if err := st.Reappend(ctx, events[first:end]); err != nil {
			t.Fatal(err)
		}
		first = end
	}
}

// TestVaultReportsAGap has a vault follow a stream whose first two
// sequences are missing, as a damaged disk leaves one: it raises
// sequence_gap naming the first missing sequence, logs it, and copies
// nothing past it.
func TestVaultReportsAGap(t *testing.T) {
	t.Parallel()
	data := simulateStream(t, "20")
	file := filepath.Join(t.TempDir(), "stream.ndjson")
	exportFile(t, "--data", data, "--out", file)
	events := readExportEvents(t, file)
	for i := range events {
		events[i].Sequence += 2
	}
	url := externalNATS(t)
	js := jetStreamAt(t, url)
	cfg := eventstore.TresorStreamConfig("TRESOR", "tresor.>", 1, 2*time.Minute)
	cfg.FirstSeq = 3
	if _, err := js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	st, err := eventstore.Connect(context.Background(), url, eventstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reappendAll(t, st, events)

	pub := hex.EncodeToString(sealPublicKey(t, filepath.Join(data, "keys", "seal.ed25519")))
	v := startVault(t, t.TempDir(), url, pub, "--inbox-prefix", "_INBOX")
	v.waitAlarm("sequence_gap")
	st2 := v.vaultStatus()
	gap := st2["violations"].([]any)[0].(map[string]any)
	if gap["code"] != "sequence_gap" || gap["sequence"].(float64) != 1 || st2["verified_seq"].(float64) != 0 {
		t.Fatalf("status: %v", st2)
	}
	if !regexp.MustCompile(`alarm: the source cannot be copied past this position; copying stopped" sequence=1 code=sequence_gap`).MatchString(v.logs.String()) {
		t.Fatalf("the gap is not logged with its position:\n%s", v.logs)
	}
	v.stop()
}

// jetStreamAt connects to the NATS at url for the test's length.
func jetStreamAt(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestVaultWaitsForAnUnreachableSource starts a vault while the operator's
// NATS does not answer: it serves its status with source_unreachable (and
// its metric) rather than exit, and once the server comes up on that
// address it follows and verifies the whole stream.
func TestVaultWaitsForAnUnreachableSource(t *testing.T) {
	t.Parallel()
	data := simulateStream(t, "20")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pub := hex.EncodeToString(sealPublicKey(t, filepath.Join(data, "keys", "seal.ed25519")))
	v := startVault(t, t.TempDir(), "nats://"+addr, pub, "--inbox-prefix", "_INBOX", "--unreachable-after", "1s")
	v.waitAlarm("source_unreachable")
	if up := v.metric("tresor_vault_source_up"); up != 0 {
		t.Fatalf("tresor_vault_source_up %v while nothing listens", up)
	}
	if !strings.Contains(v.metrics(), `tresor_vault_violations{code="source_unreachable"} 1`) {
		t.Fatalf("no source_unreachable in the metrics:\n%s", v.metrics())
	}
	if !regexp.MustCompile(`alarm: the source is unreachable" sequence=1 code=source_unreachable`).MatchString(v.logs.String()) {
		t.Fatalf("the alarm is not logged with its position:\n%s", v.logs)
	}

	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: filepath.Join(data, "jetstream"), ListenAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	last := lastSequence(t, srv.ClientURL())
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		st := v.vaultStatus()
		if st["verified_seq"].(float64) != float64(last) || len(st["violations"].([]any)) != 0 {
			return fmt.Errorf("status %v, the source ends at %d", st, last)
		}
		return nil
	})
	if up := v.metric("tresor_vault_source_up"); up != 1 {
		t.Fatalf("tresor_vault_source_up %v once the source answers", up)
	}
	v.stop()
}

// waitWriter waits until serve on a NATS cluster holds the writer lease:
// a node restarted while its previous process's lease lives on is ready
// (it reads and forwards) before it writes.
func (s *server) waitWriter() {
	s.tb.Helper()
	eventstoretest.Eventually(s.tb, 30*time.Second, func() error {
		if role := s.clusterRole(); role != "writer" {
			return fmt.Errorf("role %q", role)
		}
		return nil
	})
}

// TestVaultFollowsASealKeyRotation has the vault follow the operator across
// a seal-key rotation (serve restarted with a seal-next key file), given
// only the operator's first public key: it verifies every event, the
// rotation and the seals under the new key included, finds nothing, and
// cosigns every seal, under both keys.
func TestVaultFollowsASealKeyRotation(t *testing.T) {
	_, operator, regulator := regulatorServer(t)
	opData, vaultData := t.TempDir(), t.TempDir()
	pub := writeClusterKeys(t, opData)
	s := startServe(t, opData, "--nats", operator)
	op := s.token("operator", "")
	s.must(201, call{"POST", "/v1/emissions", op, "", `{"price":"1.00","blocks":1}`})
	playOnce(s, op, "p-1")
	v := startVault(t, vaultData, regulator, pub)
	s.stop()
	placeKey(t, filepath.Join(opData, "keys", "seal-next.ed25519"), ed25519.SeedSize)
	s = startServe(t, opData, "--nats", operator)
	s.waitWriter()
	playOnce(s, op, "p-2")
	stopAndCatchUp(t, s, v, operator)
	if st := v.vaultStatus(); len(st["violations"].([]any)) != 0 || len(st["forks"].([]any)) != 0 {
		t.Fatalf("status across the rotation: %v\n%s", st, v.logs)
	}
	types, file := exportTypes(t, "--data", vaultData)
	if types[eventstore.SealKeyRotatedType] != 1 {
		t.Fatalf("the vault's copy holds %d seal-key rotations, want 1: %v", types[eventstore.SealKeyRotatedType], types)
	}
	checkCosignatures(t, v, vaultData, file)
	var answer struct {
		Cosignatures []vault.Cosignature `json:"cosignatures"`
	}
	if _, body := v.get("/v1/vault/cosignatures", nil); json.Unmarshal([]byte(body), &answer) != nil {
		t.Fatalf("cosignatures: %s", body)
	}
	operatorKeys := map[string]bool{}
	for _, c := range answer.Cosignatures {
		operatorKeys[c.OperatorKeyID] = true
	}
	if len(operatorKeys) != 2 {
		t.Fatalf("cosigned seals under %d operator keys, want the first and the next: %v", len(operatorKeys), operatorKeys)
	}
	v.stop()
}

// TestVaultBatchesFitAStockNATS has a vault copy into the regulator's own
// nats-server of stock limits (--vault-nats), which refuses whole an
// atomic batch of more than its max_batch_size of 1 000 messages. Catching
// up thousands of events of appends of several events, it sends no batch
// larger: it verifies them all and its copy exports byte for byte as the
// source.
func TestVaultBatchesFitAStockNATS(t *testing.T) {
	t.Parallel()
	data := simulateStream(t, "1000")
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: filepath.Join(data, "jetstream"), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	source := srv.ClientURL()
	last := lastSequence(t, source)
	if last <= 5*eventstore.BatchEventsMax {
		t.Fatalf("the source ends at %d: too short to need several batches", last)
	}
	stock := "nats://" + startAuthServer(t, "").Addr().String()
	pub := hex.EncodeToString(sealPublicKey(t, filepath.Join(data, "keys", "seal.ed25519")))
	v := startVault(t, t.TempDir(), source, pub, "--inbox-prefix", "_INBOX", "--vault-nats", stock)
	eventstoretest.Eventually(t, 60*time.Second, func() error {
		if st := v.vaultStatus(); st["verified_seq"].(float64) != float64(last) || len(st["violations"].([]any)) != 0 {
			return fmt.Errorf("status %v, the source ends at %d", st, last)
		}
		return nil
	})
	v.stop()
	dir := t.TempDir()
	exportFile(t, "--nats", source, "--out", filepath.Join(dir, "source.ndjson"))
	exportFile(t, "--nats", stock, "--out", filepath.Join(dir, "copy.ndjson"))
	if !bytes.Equal(mustRead(t, filepath.Join(dir, "source.ndjson")), mustRead(t, filepath.Join(dir, "copy.ndjson"))) {
		t.Fatal("the copy on the stock server does not export as the source")
	}
}
