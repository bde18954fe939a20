package settlement

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/fdj/tresor/domain"
)

// MasterKeySize is the size of the writers' master key (AES-256).
const MasterKeySize = 32

// sealAAD binds a sealed seed to its purpose and format version, so that a
// ciphertext of another kind can never be opened as a seed.
const sealAAD = "tresor/v1/seed"

// Sealer seals block seeds under the writers' master key with AES-256-GCM.
// A seed is secret until its block closes: BlockOpened carries only its
// sealed form, and only a writer holding the master key can open it to
// rebuild the deck after a restart. While the master key rotates, a Sealer
// holds the new key and the old: it seals under the new one and opens
// under either (Reseal moves a seed from the old to the new).
type Sealer struct {
	aeads   []cipher.AEAD // the sealing key's first
	keyIDs  []string      // aeads' ids, in the same order
	keyID   string
	snapKey []byte
}

// snapshotKeyLabel derives the key that authenticates snapshots from the
// master key: one secret to keep, two uses that never share a key.
const snapshotKeyLabel = "tresor/v1/snapshot-hmac"

// keyIDLabel derives a master key's public name, so that the stream can
// say which key sealed its seeds without revealing anything of it.
const keyIDLabel = "tresor/v1/master-key-id"

// NewSealer returns a Sealer for a 32-byte master key.
func NewSealer(key []byte) (*Sealer, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	id := MasterKeyID(key)
	return &Sealer{aeads: []cipher.AEAD{aead}, keyIDs: []string{id}, keyID: id, snapKey: derive(key, snapshotKeyLabel)}, nil
}

// Rotating returns a Sealer that seals under next and still opens what
// s opens; snapshots are authenticated under next, so that they stay
// valid once the old key is gone.
func (s *Sealer) Rotating(next []byte) (*Sealer, error) {
	aead, err := newAEAD(next)
	if err != nil {
		return nil, err
	}
	id := MasterKeyID(next)
	return &Sealer{aeads: append([]cipher.AEAD{aead}, s.aeads...), keyIDs: append([]string{id}, s.keyIDs...), keyID: id,
		snapKey: derive(next, snapshotKeyLabel)}, nil
}

// MasterKeyID names a master key: 16 hex digits of an HMAC of it.
func MasterKeyID(key []byte) string { return hex.EncodeToString(derive(key, keyIDLabel)[:8]) }

// KeyID names the key the Sealer seals under.
func (s *Sealer) KeyID() string { return s.keyID }

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != MasterKeySize {
		return nil, fmt.Errorf("master key: %d bytes, want %d", len(key), MasterKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	return aead, nil
}

func derive(key []byte, label string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(label))
	return mac.Sum(nil)
}

// Seal encrypts a seed: a random 12-byte nonce followed by the ciphertext
// and its tag. The seed's hash is bound as additional data, so a sealed
// seed moved to another block's BlockOpened fails to open.
func (s *Sealer) Seal(seed domain.Seed) ([]byte, error) {
	aead := s.aeads[0]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(seed)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal seed: %w", err)
	}
	h := seed.Hash()
	return aead.Seal(nonce, nonce, seed[:], aad(h)), nil
}

// ErrUnseal is returned when a sealed seed does not open with the master
// key or does not match its block's commitment.
var ErrUnseal = errors.New("cannot unseal block seed")

// Unseal opens a sealed seed and checks it against the seed hash published
// in its block's commitment.
func (s *Sealer) Unseal(sealed []byte, seedHash [32]byte) (domain.Seed, error) {
	seed, _, err := s.unseal(sealed, seedHash)
	return seed, err
}

// Reseal opens a sealed seed and, when only an older key opens it, seals
// it again under the sealing key; moved says it did.
func (s *Sealer) Reseal(sealed []byte, seedHash [32]byte) (resealed []byte, moved bool, err error) {
	seed, k, err := s.unseal(sealed, seedHash)
	if err != nil || k == 0 {
		return sealed, false, err
	}
	resealed, err = s.Seal(seed)
	return resealed, err == nil, err
}

// unseal opens sealed with the first key that does and returns which.
func (s *Sealer) unseal(sealed []byte, seedHash [32]byte) (domain.Seed, int, error) {
	var seed domain.Seed
	n := s.aeads[0].NonceSize()
	if len(sealed) < n {
		return seed, 0, fmt.Errorf("%w: %d bytes is too short", ErrUnseal, len(sealed))
	}
	var plain []byte
	var err error
	k := 0
	for ; k < len(s.aeads); k++ {
		if plain, err = s.aeads[k].Open(nil, sealed[:n], sealed[n:], aad(seedHash)); err == nil {
			break
		}
	}
	if err != nil {
		return seed, 0, fmt.Errorf("%w: wrong master key or altered ciphertext: %v", ErrUnseal, err)
	}
	if len(plain) != len(seed) {
		return seed, 0, fmt.Errorf("%w: %d bytes, want %d", ErrUnseal, len(plain), len(seed))
	}
	copy(seed[:], plain)
	if got := seed.Hash(); got != seedHash {
		return seed, 0, fmt.Errorf("%w: seed hash %x, commitment says %x", ErrUnseal, got, seedHash)
	}
	return seed, k, nil
}

// SnapshotKey returns the key that authenticates snapshots (HMAC-SHA256),
// derived from the master key: only a holder of the master key can write a
// snapshot the writer accepts.
func (s *Sealer) SnapshotKey() []byte { return s.snapKey }

func aad(seedHash [32]byte) []byte { return append([]byte(sealAAD), seedHash[:]...) }

// wrapAAD binds a wrapped data key to its purpose, so that no other
// ciphertext of the master key (a sealed seed) opens as one.
const wrapAAD = "tresor/v1/wrap/"

// Wrap seals a person's data key under the sealing key (personal.Wrapper):
// a random nonce, then the ciphertext and its tag; aad names the key.
func (s *Sealer) Wrap(key, aad []byte) ([]byte, string, error) {
	aead := s.aeads[0]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(key)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, "", fmt.Errorf("wrap data key: %w", err)
	}
	return aead.Seal(nonce, nonce, key, append([]byte(wrapAAD), aad...)), s.keyID, nil
}

// Unwrap opens a wrapped data key with the first master key that does, and
// names it: a rotation rewraps those the previous key opened.
func (s *Sealer) Unwrap(wrapped, aad []byte) ([]byte, string, error) {
	n := s.aeads[0].NonceSize()
	if len(wrapped) < n {
		return nil, "", fmt.Errorf("unwrap data key: %d bytes is too short", len(wrapped))
	}
	var err error
	for k, aead := range s.aeads {
		var key []byte
		if key, err = aead.Open(nil, wrapped[:n], wrapped[n:], append([]byte(wrapAAD), aad...)); err == nil {
			return key, s.keyIDs[k], nil
		}
	}
	return nil, "", fmt.Errorf("unwrap data key: wrong master key or altered ciphertext: %w", err)
}
