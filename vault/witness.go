package vault

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
)

// CheckWitness names the check of a play against the vault's cosignatures
// in `tresor verify-play` (docs/verify-play.md): never rename it.
const CheckWitness = "witness"

// CosignaturesMaxBytes bounds a cosignatures document read by a verifier.
const CosignaturesMaxBytes = 64 << 20

// ReadCosignatures reads cosignatures as the vault publishes them: GET
// /v1/vault/cosignatures's answer (the vault's, or the operator's mirror)
// or the vault's cosignatures.ndjson, one a line. Every one must be
// signed by pub: a document holding another key's is refused whole, since
// it is not the witness the verifier was given.
func ReadCosignatures(data []byte, pub ed25519.PublicKey) ([]Cosignature, error) {
	var answer cosignaturesAnswer
	var all []Cosignature
	if err := json.Unmarshal(data, &answer); err == nil && answer.Cosignatures != nil {
		if answer.PublicKey != "" && answer.KeyID != eventstore.KeyID(pub) {
			return nil, fmt.Errorf("cosignatures of the key %s, not of the vault's key %s", answer.KeyID, eventstore.KeyID(pub))
		}
		all = answer.Cosignatures
	} else {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for line := 1; sc.Scan(); line++ {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var c Cosignature
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				return nil, fmt.Errorf("line %d: neither the vault's answer nor a cosignature a line: %w", line, err)
			}
			all = append(all, c)
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	for i := range all {
		if err := all[i].Verify(pub); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// Witness checks a play, as its document tells it (audit.ReadPlays),
// against cosignatures ReadCosignatures verified. The vault verifies the
// stream in order, so a cosignature of a head at a sequence or later says
// the regulator's vault checked every event up to it. The stake (the
// document's seq) fixes the play's unit and so its outcome; the settlement
// (settled_seq, the last event of the play's life: its PlaySettled, or its
// PrizePaid for a winner) is the outcome shown and the prize paid. So a
// settled play passes only once a cosignature covers its settlement; a
// play in progress passes on its stake and says its outcome is not
// witnessed yet. None there yet is said plainly: the vault cosigns at the
// operator's next seal.
func Witness(cosignatures []Cosignature, pub ed25519.PublicKey, play projections.PlayView) audit.PlayCheck {
	w := witness{keyID: eventstore.KeyID(pub), stake: play.Seq, settlement: play.SettledSeq, inProgress: play.Status == projections.StatusInProgress}
	status, detail := w.check(cosignatures)
	return audit.PlayCheck{Name: CheckWitness, Status: status, Detail: detail}
}

// witness is what Witness looks for: the vault's key id and the play's
// sequences as its document names them (0 for none).
type witness struct {
	keyID             string
	stake, settlement uint64
	inProgress        bool
}

// check returns the witness's status and detail.
func (w witness) check(cosignatures []Cosignature) (audit.CheckStatus, string) {
	switch {
	case w.stake == 0:
		return audit.CheckSkip, "the document names no stream sequence to look for in the vault's cosignatures"
	case w.inProgress && w.settlement != 0:
		return audit.CheckFail, fmt.Sprintf("the play is in progress, yet its document names a settlement at sequence %d", w.settlement)
	case w.settlement != 0 && w.settlement <= w.stake:
		return audit.CheckFail, fmt.Sprintf("the document's settlement at sequence %d is not after its stake at %d", w.settlement, w.stake)
	case !w.inProgress && w.settlement == 0:
		return audit.CheckSkip, "the play is settled but its document names no settlement sequence (settled_seq: a document served before it was named, " +
			"or from read models not rebuilt since): its outcome cannot be looked for in the vault's cosignatures"
	}
	stake, latest := covering(cosignatures, w.stake)
	if w.inProgress {
		if stake == nil {
			return audit.CheckSkip, w.uncovered(w.stake, "its stake", latest)
		}
		return audit.CheckPass, w.verified(stake, fmt.Sprintf("this play's stake at %d included", w.stake)) +
			": it saw the same history up to the stake, which fixes the outcome; the play is in progress, so its settlement is not witnessed yet: verify again once it is settled"
	}
	settled, _ := covering(cosignatures, w.settlement)
	switch {
	case settled != nil:
		return audit.CheckPass, w.verified(settled, fmt.Sprintf("this play's stake at %d and its settlement at %d included", w.stake, w.settlement)) +
			": it saw the same history, from the stake to the prize"
	case stake != nil:
		return audit.CheckSkip, fmt.Sprintf("the regulator's vault (key %s) verified the stream up to sequence %d, this play's stake at %d included, not its settlement at %d: "+
			"the outcome and prize shown are not witnessed yet; verify again after the operator's next seal", w.keyID, stake.Sequence, w.stake, w.settlement)
	default:
		return audit.CheckSkip, w.uncovered(w.settlement, "its settlement", latest)
	}
}

// verified says that the vault verified the stream up to the head c
// names, what (the play's sequences) included.
func (w witness) verified(c *Cosignature, what string) string {
	return fmt.Sprintf("the regulator's vault (key %s) verified the stream up to sequence %d, %s, and cosigned chain %s's head there (position %d, hash %s)",
		w.keyID, c.Sequence, what, c.Chain, c.ChainSeq, c.Hash)
}

// uncovered says that no cosignature covers seq, the play's event named
// by what, yet; latest is the last cosignature, nil for none.
func (w witness) uncovered(seq uint64, what string, latest *Cosignature) string {
	if latest == nil {
		return fmt.Sprintf("no cosignature of the regulator's vault (key %s) yet: none covers sequence %d (%s); verify again after the operator's next seal", w.keyID, seq, what)
	}
	return fmt.Sprintf("no cosignature of the regulator's vault (key %s) covers sequence %d (%s) yet: the last covers up to %d; verify again after the operator's next seal",
		w.keyID, seq, what, latest.Sequence)
}

// covering returns the first cosignature of a head at or after seq (nil
// for none) and the last cosignature (nil when there is none).
func covering(cosignatures []Cosignature, seq uint64) (first, latest *Cosignature) {
	for i := range cosignatures {
		c := &cosignatures[i]
		if c.Sequence >= seq && (first == nil || c.Sequence < first.Sequence) {
			first = c
		}
		if latest == nil || c.Sequence > latest.Sequence {
			latest = c
		}
	}
	return first, latest
}

// Mirror returns GET /v1/vault/cosignatures's answer as the vault gives
// it, from file: the vault's cosignatures.ndjson as the operator fetches
// it, read at each call (it grows), with the vault's key pub the regulator
// published. Verifiers check every signature; the mirror only relays them
// (a line cut short by a copy in progress ends the file; a missing file is
// no cosignature yet).
func Mirror(file string, pub ed25519.PublicKey) func() ([]byte, error) {
	return func() ([]byte, error) {
		b, err := os.ReadFile(file)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("the vault's cosignatures: %w", err)
		}
		var kept []Cosignature
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var c Cosignature
			if json.Unmarshal(sc.Bytes(), &c) != nil {
				break
			}
			kept = append(kept, c)
		}
		kept = kept[max(0, len(kept)-cosignaturesMax):]
		return json.Marshal(cosignaturesAnswer{KeyID: eventstore.KeyID(pub), PublicKey: hex.EncodeToString(pub), Cosignatures: append([]Cosignature{}, kept...)})
	}
}
