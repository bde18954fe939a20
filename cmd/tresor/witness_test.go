package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/fdj/tresor/eventstore"
)

// witnessRun is a serve relaying the cosignatures of a vault that
// followed it while two plays were made, one settled and one left in
// progress, then stopped; another play was made after the vault's last
// cosignature.
type witnessRun struct {
	s                        *server
	p42                      string
	covered, late, uncovered string // the plays' ids
	file                     string // the vault's cosignatures.ndjson
	vaultKey, keyID          string
}

// newWitnessRun has the regulator's vault follow the operator's serve
// while a play is made and another staked, and cosign its closing seal,
// then restarts serve relaying the vault's cosignatures and makes a play
// past them. The late play, its stake covered, is left in progress.
func newWitnessRun(t *testing.T) *witnessRun {
	t.Helper()
	_, operator, regulator := regulatorServer(t)
	opData, vaultData := t.TempDir(), t.TempDir()
	pub := writeClusterKeys(t, opData)
	s := startServe(t, opData, "--nats", operator)
	_, p42 := s.fundedPlayer()
	w := &witnessRun{p42: p42, file: filepath.Join(vaultData, "cosignatures.ndjson")}
	w.covered = settledPlay(s, p42, "k1")
	w.late = s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "k3", `{"stake":"1.00"}`})["play_id"].(string)
	v := startVault(t, vaultData, regulator, pub)
	stopAndCatchUp(t, s, v, operator) // the closing seal covers both plays' stakes, and the first one's settlement
	v.stop()
	w.vaultKey = hex.EncodeToString(ed25519.NewKeyFromSeed(mustRead(t, filepath.Join(vaultData, "keys", "vault.ed25519"))).Public().(ed25519.PublicKey))
	w.keyID = eventstore.KeyID(mustHex(t, w.vaultKey))
	w.s = startServe(t, opData, "--nats", operator, "--vault-cosignatures", w.file, "--vault-key", w.vaultKey)
	w.s.waitWriter()
	w.uncovered = settledPlay(w.s, p42, "k2")
	return w
}

// settleLate makes the late play's four throws, after the vault's last
// cosignature: its settlement is past it.
func (w *witnessRun) settleLate() { throwAll(w.s, w.p42, w.late) }

// doc reads a play's document as of the last write through serve
// (min_seq).
func (w *witnessRun) doc(id string) string {
	return w.s.getText(fmt.Sprintf("/v1/players/p-42/plays/%s?min_seq=%d", id, w.s.written.Load()), w.p42)
}

// TestVerifyPlayShowsTheVaultsWitness checks plays with the real `tresor
// verify-play` against the vault's cosignatures, relayed by serve
// (--vault-cosignatures) and as the vault's own file: the play the vault
// covered to its settlement shows its witness; a play covered up to its
// stake passes while in progress, saying its outcome is not witnessed
// yet, and is no longer witnessed once settled past the cosignatures; a
// play made after the last cosignature says none covers it yet; the
// cosignatures checked with another key, or one altered, are refused.
func TestVerifyPlayShowsTheVaultsWitness(t *testing.T) {
	w := newWitnessRun(t)
	s, vaultKey, keyID, file := w.s, w.vaultKey, w.keyID, w.file
	dir := t.TempDir()
	save := saver(t, dir)
	covered := save("covered.json", w.doc(w.covered))
	uncovered := save("uncovered.json", w.doc(w.uncovered))
	pending := save("pending.json", w.doc(w.late))
	w.settleLate()
	late := save("late.json", w.doc(w.late))
	mirror := s.url + "/v1/vault/cosignatures"
	verify := func(want int, args ...string) string {
		t.Helper()
		out, errOut, code := run(t, append([]string{"verify-play"}, args...)...)
		if code != want {
			t.Fatalf("verify-play %v: exit %d, want %d\n%s%s", args, code, want, out, errOut)
		}
		return out + errOut
	}
	for _, from := range []string{mirror, file} {
		for _, c := range []struct{ name, file, status, says string }{
			{"the covered play", covered, "pass", "the regulator's vault (key " + keyID + ") verified the stream up to sequence"},
			{"the covered play", covered, "pass", "and its settlement at"},
			{"the play in progress", pending, "pass", "its settlement is not witnessed yet"},
			{"the play settled past the last cosignature", late, "skip", "included, not its settlement at"},
			{"the play past the last cosignature", uncovered, "skip", "no cosignature of the regulator's vault (key " + keyID + ") covers sequence"},
		} {
			if out := verify(0, "--file", c.file, "--vault-key", vaultKey, "--cosignatures", from); !strings.Contains(out, c.status+"  witness") || !strings.Contains(out, c.says) {
				t.Errorf("%s, cosignatures from %s: want %s saying %q:\n%s", c.name, from, c.status, c.says, out)
			}
		}
	}

	other := hex.EncodeToString(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey))
	for _, from := range []string{mirror, file} {
		if out := verify(1, "--file", covered, "--vault-key", other, "--cosignatures", from); !strings.Contains(out, "refused") {
			t.Errorf("cosignatures checked with another key, from %s:\n%s", from, out)
		}
	}
	b := mustRead(t, file)
	i := strings.Index(string(b), `"hash":"`) + len(`"hash":"`)
	b[i] = map[bool]byte{true: '1', false: '0'}[b[i] == '0'] // another hex digit of a head's hash
	altered := filepath.Join(dir, "altered.ndjson")
	if err := os.WriteFile(altered, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := verify(1, "--file", covered, "--vault-key", vaultKey, "--cosignatures", altered); !strings.Contains(out, "not signed by key "+keyID) {
		t.Errorf("an altered cosignature:\n%s", out)
	}
	s.stop()
}

// settledPlay stakes 1.00 as the player of token and throws four times;
// it returns the play's id.
func settledPlay(s *server, token, key string) string {
	s.tb.Helper()
	play := s.must(201, call{"POST", "/v1/players/p-42/plays", token, key, `{"stake":"1.00"}`})
	id := play["play_id"].(string)
	throwAll(s, token, id)
	return id
}

// throwAll makes a play's four throws.
func throwAll(s *server, token, id string) {
	s.tb.Helper()
	for range 4 {
		s.must(200, call{"POST", "/v1/players/p-42/plays/" + id + "/throws", token, "", ""})
	}
}

// mustHex decodes a public key in hex.
func mustHex(t *testing.T, s string) ed25519.PublicKey {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBrowserHistoryShowsTheVaultsWitness: the history page's Verify shows
// the witness of the regulator's vault from the cosignatures serve relays:
// on the play in progress whose stake it covered, a pass that says the
// outcome is not witnessed yet, and once that play is settled past the
// cosignatures, a skip; on the play it covered to its settlement, a pass;
// on the later play, that none covers it yet.
func TestBrowserHistoryShowsTheVaultsWitness(t *testing.T) {
	ctx := browser(t)
	w := newWitnessRun(t)
	w.doc(w.uncovered) // the page reads from the last write on
	do(t, ctx, "open the history", chromedp.Navigate(w.s.url+"/history#token="+w.p42), chromedp.WaitVisible(chromedp.CSS("[data-play-id]")))
	verify := func(id, want, says string) {
		t.Helper()
		row := fmt.Sprintf(`[data-play-id=%q]`, id)
		do(t, ctx, "verify "+id, chromedp.Click(chromedp.CSS(row+" button.verify")), chromedp.WaitReady(chromedp.CSS(row+"[data-verified]")))
		out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row+" .verdict")))
		if attr(t, ctx, row, "data-verified") != "valid" || count(t, ctx, row+fmt.Sprintf(` [data-check="witness"][data-status=%q]`, want)) != 1 {
			t.Fatalf("play %s: want valid with the witness %s:\n%s", id, want, out)
		}
		if !strings.Contains(out, "regulator's vault (key "+w.keyID+")") || !strings.Contains(out, says) {
			t.Errorf("play %s: the witness does not name the vault's key %s or say %q:\n%s", id, w.keyID, says, out)
		}
	}
	verify(w.late, "pass", "its settlement is not witnessed yet")
	w.settleLate()
	w.doc(w.late)
	verify(w.late, "skip", "included, not its settlement at")
	verify(w.covered, "pass", "and its settlement at")
	verify(w.uncovered, "skip", "covers sequence")
	screenshot(t, ctx, "history-witness")
	w.s.stop()
}
