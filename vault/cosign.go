package vault

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"

	"github.com/fdj/tresor/eventstore"
)

// CosignTag opens the bytes a cosignature signs (docs/vault.md,
// "Cosignatures"): the sealed head encoded as the operator's seal encodes
// it, under another tag, so that a cosignature can never pass for a seal.
const CosignTag = "tresor-vault-cosignature-v1"

// cosignaturesMax bounds the cosignatures kept in memory and answered; the
// file keeps them all.
const cosignaturesMax = 10_000

// Cosignature is the vault's signature of a chain head that an operator's
// seal signed and the vault verified: the regulator's witness that it saw
// this history. Its keys are a contract (docs/vault.md): never rename one.
type Cosignature struct {
	// Chain, Sequence, ChainSeq and Hash are the sealed head, as the seal
	// names it: what the signature covers.
	Chain    string `json:"chain"`
	Sequence uint64 `json:"sequence"`
	ChainSeq uint64 `json:"chain_seq"`
	Hash     string `json:"hash"`
	// SealSequence is the stream sequence of the seal verified, and
	// OperatorKeyID the key that signed it (not signed by the vault).
	SealSequence  uint64 `json:"seal_sequence"`
	OperatorKeyID string `json:"operator_key_id"`
	// KeyID names the vault's key (eventstore.KeyID); Signature is Ed25519
	// over CosignedBytes, hex.
	KeyID     string `json:"key_id"`
	Signature string `json:"signature"`
}

// CosignedBytes is what a cosignature's signature covers.
func (c *Cosignature) CosignedBytes() ([]byte, error) {
	s := eventstore.Seal{Chain: c.Chain, Sequence: c.Sequence, ChainSeq: c.ChainSeq, Hash: c.Hash}
	return s.TaggedBytes(CosignTag)
}

// Verify checks the cosignature with the vault's public key.
func (c *Cosignature) Verify(pub ed25519.PublicKey) error {
	msg, err := c.CosignedBytes()
	if err != nil {
		return err
	}
	sig, err := hex.DecodeString(c.Signature)
	if err != nil || c.KeyID != eventstore.KeyID(pub) || !ed25519.Verify(pub, msg, sig) {
		return fmt.Errorf("cosignature of chain %s at %d: not signed by key %s", c.Chain, c.Sequence, eventstore.KeyID(pub))
	}
	return nil
}

// cosigner signs verified seals and appends them to the cosignature file,
// one JSON object a line, synced before the vault shows them.
type cosigner struct {
	key  ed25519.PrivateKey
	path string

	mu   sync.Mutex
	kept []Cosignature
}

// openCosigner reads the cosignatures of path (none when it does not
// exist yet).
func openCosigner(key ed25519.PrivateKey, path string) (*cosigner, error) {
	c := &cosigner{key: key, path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vault: the cosignatures: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var cs Cosignature
		if err := json.Unmarshal(sc.Bytes(), &cs); err != nil {
			// A line cut short by a crash is the last one: its seal is
			// cosigned again when the vault verifies it again.
			break
		}
		c.keep(cs)
	}
	return c, nil
}

// keep remembers cs, the oldest dropped past cosignaturesMax.
func (c *cosigner) keep(cs Cosignature) {
	if len(c.kept) == cosignaturesMax {
		c.kept = slices.Delete(c.kept, 0, 1)
	}
	c.kept = append(c.kept, cs)
}

// cosign signs the head that seal names and appends the cosignature,
// unless a seal at its sequence or later is cosigned already: seals are
// verified in stream order, and a vault resumed from a state older than
// its last cosignatures verifies their seals again.
func (c *cosigner) cosign(seal eventstore.Seal, sealSeq uint64) (Cosignature, error) {
	c.mu.Lock()
	if n := len(c.kept); n > 0 && c.kept[n-1].SealSequence >= sealSeq {
		c.mu.Unlock()
		return Cosignature{}, nil
	}
	c.mu.Unlock()
	cs := Cosignature{Chain: seal.Chain, Sequence: seal.Sequence, ChainSeq: seal.ChainSeq, Hash: seal.Hash, SealSequence: sealSeq,
		OperatorKeyID: seal.KeyID, KeyID: eventstore.KeyID(c.key.Public().(ed25519.PublicKey))}
	msg, err := cs.CosignedBytes()
	if err != nil {
		return cs, err
	}
	cs.Signature = hex.EncodeToString(ed25519.Sign(c.key, msg))
	line, err := json.Marshal(cs)
	if err != nil {
		return cs, err
	}
	f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return cs, fmt.Errorf("vault: the cosignatures: %w", err)
	}
	_, err = f.Write(append(line, '\n'))
	err = errors.Join(err, f.Sync(), f.Close())
	if err != nil {
		return cs, fmt.Errorf("vault: write a cosignature to %s: %w", c.path, err)
	}
	c.mu.Lock()
	c.keep(cs)
	c.mu.Unlock()
	return cs, nil
}

// cosignaturesAnswer is GET /v1/vault/cosignatures's answer.
type cosignaturesAnswer struct {
	KeyID        string        `json:"key_id"`
	PublicKey    string        `json:"public_key"`
	Cosignatures []Cosignature `json:"cosignatures"`
}

// serve answers the vault's key and its last cosignatures, oldest first.
func (c *cosigner) serve(w http.ResponseWriter, _ *http.Request) {
	pub := c.key.Public().(ed25519.PublicKey)
	c.mu.Lock()
	out := cosignaturesAnswer{KeyID: eventstore.KeyID(pub), PublicKey: hex.EncodeToString(pub), Cosignatures: slices.Clone(c.kept)}
	c.mu.Unlock()
	if out.Cosignatures == nil {
		out.Cosignatures = []Cosignature{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}
