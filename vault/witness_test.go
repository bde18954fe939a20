package vault_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/vault"
)

// Where the vault of TestWitnessCoversTheWholePlay cosigned chain heads:
// the later first, since a verifier looks for the first head at or after
// a sequence, not the first listed.
const (
	cosignedEarly = 40
	cosignedLate  = 90
)

// TestWitnessCoversTheWholePlay: a settled play is witnessed only by a
// cosignature at or after its settlement (the first such); covered up to
// its stake only, or not at all, it says so and what to do; a play in
// progress passes on its stake and says its outcome is not witnessed yet;
// a document whose sequences contradict its status fails.
func TestWitnessCoversTheWholePlay(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := key.Public().(ed25519.PublicKey)
	cosignatures := signedCosignatures(t, key, cosignedLate, cosignedEarly)
	keyID := eventstore.KeyID(pub)
	settled := func(stake, settlement uint64) projections.PlayView {
		return projections.PlayView{Status: projections.StatusSettled, Seq: stake, SettledSeq: settlement}
	}
	inProgress := func(stake uint64) projections.PlayView {
		return projections.PlayView{Status: projections.StatusInProgress, Seq: stake}
	}
	for name, c := range map[string]struct {
		play         projections.PlayView
		cosignatures []vault.Cosignature
		status       audit.CheckStatus
		detail       []string
	}{
		"settled, its settlement covered": {settled(25, 35), cosignatures, audit.CheckPass, []string{
			"the regulator's vault (key " + keyID + ") verified the stream up to sequence 40, this play's stake at 25 and its settlement at 35 included",
			"from the stake to the prize"}},
		"settled by the system, covered by the later head": {projections.PlayView{Status: projections.StatusCompletedBySystem, Seq: 25, SettledSeq: 60},
			cosignatures, audit.CheckPass, []string{"up to sequence 90, this play's stake at 25 and its settlement at 60 included"}},
		"settled, only its stake covered": {settled(50, 95), cosignatures, audit.CheckSkip, []string{
			"verified the stream up to sequence 90, this play's stake at 50 included, not its settlement at 95",
			"not witnessed yet; verify again after the operator's next seal"}},
		"settled, nothing covered": {settled(95, 97), cosignatures, audit.CheckSkip, []string{
			"no cosignature of the regulator's vault (key " + keyID + ") covers sequence 97 (its settlement) yet: the last covers up to 90"}},
		"settled, no cosignature at all":    {settled(25, 35), nil, audit.CheckSkip, []string{"yet: none covers sequence 35 (its settlement)"}},
		"settled, its settlement not named": {settled(25, 0), cosignatures, audit.CheckSkip, []string{"names no settlement sequence"}},
		"in progress, its stake covered": {inProgress(50), cosignatures, audit.CheckPass, []string{
			"verified the stream up to sequence 90, this play's stake at 50 included", "its settlement is not witnessed yet"}},
		"in progress, its stake not covered": {inProgress(95), cosignatures, audit.CheckSkip, []string{
			"covers sequence 95 (its stake) yet: the last covers up to 90"}},
		"no sequence":                      {projections.PlayView{Status: projections.StatusSettled}, cosignatures, audit.CheckSkip, []string{"names no stream sequence"}},
		"in progress with a settlement":    {projections.PlayView{Status: projections.StatusInProgress, Seq: 25, SettledSeq: 35}, cosignatures, audit.CheckFail, []string{"in progress, yet"}},
		"a settlement not after its stake": {settled(35, 35), cosignatures, audit.CheckFail, []string{"settlement at sequence 35 is not after its stake at 35"}},
		"a settlement before its stake":    {settled(35, 25), cosignatures, audit.CheckFail, []string{"not after its stake"}},
	} {
		got := vault.Witness(c.cosignatures, pub, c.play)
		if got.Name != vault.CheckWitness || got.Status != c.status {
			t.Errorf("%s: %s %s, want %s", name, got.Name, got.Status, c.status)
		}
		for _, want := range c.detail {
			if !strings.Contains(got.Detail, want) {
				t.Errorf("%s: %q does not say %q", name, got.Detail, want)
			}
		}
	}
}

// signedCosignatures returns cosignatures of key at the sequences given,
// as ReadCosignatures reads and verifies them from the vault's answer.
func signedCosignatures(t *testing.T, key ed25519.PrivateKey, sequences ...uint64) []vault.Cosignature {
	t.Helper()
	pub := key.Public().(ed25519.PublicKey)
	var lines []string
	for _, seq := range sequences {
		c := vault.Cosignature{Chain: "s0", Sequence: seq, ChainSeq: seq, Hash: strings.Repeat("ab", 32), KeyID: eventstore.KeyID(pub)}
		msg, err := c.CosignedBytes()
		if err != nil {
			t.Fatal(err)
		}
		c.Signature = hex.EncodeToString(ed25519.Sign(key, msg))
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	out, err := vault.ReadCosignatures([]byte(strings.Join(lines, "\n")), pub)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
