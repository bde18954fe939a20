package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestRestoreFromTheVaultsCopy loses the operator's ledger (every stream
// of its NATS account deleted) after a vault followed it under load, and
// brings it back with `tresor restore --from-vault` from the regulator's
// copy: the restored stream exports byte for byte as the copy, audits
// clean, and serve on it continues the chain.
func TestRestoreFromTheVaultsCopy(t *testing.T) {
	_, operator, regulator := regulatorServer(t)
	opData, vaultData := t.TempDir(), t.TempDir()
	pub := writeClusterKeys(t, opData)
	s := startServe(t, opData, "--nats", operator)
	players := []string{"p0", "p1"}
	op := fundPlayers(s, players)
	v := startVault(t, vaultData, regulator, pub)
	var never atomic.Bool
	stop := make(chan struct{})
	load := stakeLoad(s, players, &never, stop)
	eventstoretest.Eventually(t, 30*time.Second, verified(v, 200))
	close(stop)
	if _, err := load(); err != nil {
		t.Fatal(err)
	}
	last := stopAndCatchUp(t, s, v, operator)
	v.stop()

	deleteStreams(t, operator)
	if _, stderr, code := run(t, "audit", "--nats", operator, "--public-key", pub); code == 0 {
		t.Fatalf("the audit of a lost ledger passes: %s", stderr)
	}
	out := mustRun(t, "restore", "--from-vault", vaultData, "--nats", operator, "--replicas", "1", "--public-key", pub)
	if !strings.Contains(out, fmt.Sprintf("restored %d events, sequences 1 to %d (the whole of the vault's copy", last, last)) {
		t.Fatalf("restore from the vault: %s", out)
	}
	dir := t.TempDir()
	ofVault, restored := filepath.Join(dir, "vault.ndjson"), filepath.Join(dir, "restored.ndjson")
	exportFile(t, "--data", vaultData, "--out", ofVault)
	exportFile(t, "--nats", operator, "--out", restored)
	if !bytes.Equal(mustRead(t, ofVault), mustRead(t, restored)) {
		t.Fatal("the restored ledger exports otherwise than the vault's copy")
	}
	if r := auditReport(t, 0, "--nats", operator, "--public-key", pub); !r.OK || r.Events != int(last) {
		t.Fatalf("audit of the restored ledger: %+v", r)
	}

	s = startServe(t, opData, "--nats", operator)
	s.waitWriter()
	var dep struct {
		Seq uint64 `json:"seq"`
	}
	body := s.must(200, call{"POST", "/v1/players/p0/deposits", op, "after-restore", `{"amount":"1.00"}`})
	if b, err := json.Marshal(body); err != nil || json.Unmarshal(b, &dep) != nil || dep.Seq <= last {
		t.Fatalf("a deposit on the restored ledger: %v", body)
	}
	s.stop()
	if r := auditReport(t, 0, "--nats", operator, "--public-key", pub); !r.OK || r.Events <= int(last) {
		t.Fatalf("audit after serve continued the restored ledger: %+v", r)
	}
}
