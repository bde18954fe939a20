package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/settlement"
)

// A vault whose copy ends inside an append (its embedded server stores
// the copy's events as plain messages, and a crash can fall between two
// of them) verifies what the copy holds before it, follows the source
// from the append's first event, checks the events it holds against the
// source's and completes the append: the copy then exports as the source
// and audits clean.
func TestVaultCompletesAnAppendCutShort(t *testing.T) {
	t.Parallel()
	source, sealKey := simulatedSource(t, 30)
	pub := hex.EncodeToString(sealPublicKey(t, sealKey))
	ctx := eventstoretest.Ctx(t, 60*time.Second)
	src, err := eventstore.Connect(ctx, source, eventstore.Config{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var events []eventstore.RecordedEvent
	if err := src.ReadStored(ctx, 1, lastSequence(t, source), func(ev eventstore.RecordedEvent) error {
		events = append(events, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The first append of three events or more after the first event:
	// the copy gets the events before it, and its first two.
	cut := -1
	for i := 1; i < len(events) && cut < 0; i++ {
		if events[i].AppendRemaining >= 2 && events[i-1].AppendRemaining == 0 {
			cut = i
		}
	}
	if cut < 0 || cut > eventstore.BatchEventsMax {
		t.Fatalf("no append of three events within the first %d of the stream", eventstore.BatchEventsMax)
	}
	vaultData := t.TempDir()
	cp, err := connectStream(ctx, &Config{Data: vaultData, Replicas: 1}, eventstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.store.Reappend(ctx, events[:cut]); err != nil {
		t.Fatal(err)
	}
	eventstoretest.AppendStored(t, cp.embedded, src, events[cut].Sequence, events[cut].Sequence+1)
	cp.Close()

	v := startVault(t, vaultData, source, pub)
	last := events[len(events)-1].Sequence
	eventstoretest.Eventually(t, 30*time.Second, verified(v, float64(last)))
	for _, line := range []string{
		fmt.Sprintf(`"vault: the copy ends inside an append, to complete from the source" first_seq=%d copy_last=%d`, events[cut].Sequence, events[cut].Sequence+1),
		fmt.Sprintf(`"vault: the append cut short at the copy's end is completed from the source" first_seq=%d copy_held=2`, events[cut].Sequence),
	} {
		if !strings.Contains(v.logs.String(), line) {
			t.Fatalf("no line %s in the vault's log:\n%s", line, v.logs)
		}
	}
	st := v.vaultStatus()
	if len(st["violations"].([]any)) != 0 || len(st["forks"].([]any)) != 0 {
		t.Fatalf("status after completing the append: %v", st)
	}
	v.stop()
	sameAsSource(t, vaultData, source, pub, last)
}

// A vault killed with -9 at random moments while it catches up, and
// started again each time, ends with a copy that exports as the source and
// audits clean: whatever a kill cut, it completes from the source, and
// nothing is verified twice or skipped. Where the kills land is left to
// chance, a copy cut inside an append among them;
// TestVaultCompletesAnAppendCutShort is that case made certain.
// While the last start copies the rest, an export of the live copy ends at
// a whole append, and a second vault on the same data directory is
// refused.
func TestVaultKilledWhileCatchingUp(t *testing.T) {
	t.Parallel()
	source, sealKey := simulatedSource(t, 2000)
	pub := hex.EncodeToString(sealPublicKey(t, sealKey))
	last := lastSequence(t, source)
	vaultData := t.TempDir()
	torn := 0
	for range 4 {
		// Killed once a batch is in the copy, while the next ones are
		// stored: most often in the middle of an append.
		v := startVault(t, vaultData, source, pub)
		copied := v.metric("tresor_vault_copied_events_total")
		eventstoretest.Eventually(t, 30*time.Second, func() error {
			if n := v.metric("tresor_vault_copied_events_total"); n == copied {
				return fmt.Errorf("%v events copied", n)
			}
			return nil
		})
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		v.kill()
		if strings.Contains(v.logs.String(), "the copy ends inside an append") {
			torn++
		}
	}
	// The last start copies what the kills left, while the copy is read
	// and a second vault tried on it.
	v := startVault(t, vaultData, source, pub)
	live := filepath.Join(t.TempDir(), "live.ndjson")
	exportFile(t, "--data", vaultData, "--out", live)
	lines := strings.Split(strings.TrimSpace(string(mustRead(t, live))), "\n")
	if tail := lines[len(lines)-1]; strings.Contains(tail, `"append_remaining"`) {
		t.Fatalf("an export of the copy being written ends inside an append: %s", tail)
	}
	if _, stderr, code := runWithin(t, 30*time.Second, "vault", "--source", source, "--data", vaultData, "--http", "127.0.0.1:0",
		"--public-key", pub); code == 0 || !strings.Contains(stderr, "is in use by pid") {
		t.Fatalf("a second vault on the data directory of a running one: exit %d: %s", code, stderr)
	}
	eventstoretest.Eventually(t, 60*time.Second, verified(v, float64(last)))
	if strings.Contains(v.logs.String(), "the copy ends inside an append") {
		torn++
	}
	st := v.vaultStatus()
	if len(st["violations"].([]any)) != 0 || len(st["forks"].([]any)) != 0 || st["last_seal_seq"].(float64) != float64(last) {
		t.Fatalf("status after the kills: %v\n%s", st, v.logs)
	}
	v.stop()
	sameAsSource(t, vaultData, source, pub, last)
	t.Logf("%d of 5 starts found the copy ending inside an append", torn)
}

// simulatedSource runs a nats-server with a client listener and no users
// (the vault's reading rights are tested beside the operator's elsewhere)
// holding a stream of plays simulated plays; it returns its URL and the
// seal key file.
func simulatedSource(t *testing.T, plays int) (url, sealKey string) {
	t.Helper()
	srv, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	sealKey = writeKey(t, ed25519.SeedSize)
	if _, stderr, code := run(t, "simulate", "--nats", srv.ClientURL(), "--master-key-file", writeKey(t, settlement.MasterKeySize),
		"--seal-key-file", sealKey, "--plays", strconv.Itoa(plays), "--players", strconv.Itoa(min(plays, 50)), "--quiet"); code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	return srv.ClientURL(), sealKey
}

// sameAsSource checks that the vault's copy in vaultData exports as the
// source does and audits clean up to last; it returns the source's export.
func sameAsSource(t *testing.T, vaultData, source, pub string, last uint64) (ofSource string) {
	t.Helper()
	dir := t.TempDir()
	ofVault, ofSource := filepath.Join(dir, "vault.ndjson"), filepath.Join(dir, "source.ndjson")
	exportFile(t, "--data", vaultData, "--out", ofVault)
	exportFile(t, "--nats", source, "--inbox-prefix", "_INBOX_regulator", "--out", ofSource)
	if string(mustRead(t, ofVault)) != string(mustRead(t, ofSource)) {
		t.Fatal("the vault's copy exports otherwise than the operator's stream")
	}
	if r := auditReport(t, 0, "--data", vaultData, "--public-key", pub); !r.OK || r.Events != int(last) {
		t.Fatalf("audit of the vault's copy: %+v", r)
	}
	return ofSource
}
