package settlement

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
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
// rebuild the deck after a restart.
type Sealer struct {
	aead    cipher.AEAD
	snapKey []byte
}

// snapshotKeyLabel derives the key that authenticates snapshots from the
// master key: one secret to keep, two uses that never share a key.
const snapshotKeyLabel = "tresor/v1/snapshot-hmac"

// NewSealer returns a Sealer for a 32-byte master key.
func NewSealer(key []byte) (*Sealer, error) {
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
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(snapshotKeyLabel))
	return &Sealer{aead: aead, snapKey: mac.Sum(nil)}, nil
}

// Seal encrypts a seed: a random 12-byte nonce followed by the ciphertext
// and its tag. The seed's hash is bound as additional data, so a sealed
// seed moved to another block's BlockOpened fails to open.
func (s *Sealer) Seal(seed domain.Seed) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(seed)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal seed: %w", err)
	}
	h := seed.Hash()
	return s.aead.Seal(nonce, nonce, seed[:], aad(h)), nil
}

// ErrUnseal is returned when a sealed seed does not open with the master
// key or does not match its block's commitment.
var ErrUnseal = errors.New("cannot unseal block seed")

// Unseal opens a sealed seed and checks it against the seed hash published
// in its block's commitment.
func (s *Sealer) Unseal(sealed []byte, seedHash [32]byte) (domain.Seed, error) {
	var seed domain.Seed
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return seed, fmt.Errorf("%w: %d bytes is too short", ErrUnseal, len(sealed))
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], aad(seedHash))
	if err != nil {
		return seed, fmt.Errorf("%w: wrong master key or altered ciphertext: %v", ErrUnseal, err)
	}
	if len(plain) != len(seed) {
		return seed, fmt.Errorf("%w: %d bytes, want %d", ErrUnseal, len(plain), len(seed))
	}
	copy(seed[:], plain)
	if got := seed.Hash(); got != seedHash {
		return seed, fmt.Errorf("%w: seed hash %x, commitment says %x", ErrUnseal, got, seedHash)
	}
	return seed, nil
}

// SnapshotKey returns the key that authenticates snapshots (HMAC-SHA256),
// derived from the master key: only a holder of the master key can write a
// snapshot the writer accepts.
func (s *Sealer) SnapshotKey() []byte { return s.snapKey }

func aad(seedHash [32]byte) []byte { return append([]byte(sealAAD), seedHash[:]...) }
