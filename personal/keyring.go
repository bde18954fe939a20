// Package personal keeps the data keys that seal personal fields at the
// source (crypto-shredding, docs/privacy.md): one AES-256 key per person,
// wrapped by the writers' master key and kept in a key-value store (a
// JetStream KV bucket), never on the stream. Destroying a person's key
// erases every field sealed under it, while the stream's bytes, and so
// every hash and seal over them, stay as they are.
package personal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// ErrNotFound is returned by a Store for a name it does not hold,
// ErrExists by Store.Create for a name it holds already, and ErrChanged
// by Store.Update for an entry changed or erased since the revision it
// was given: the answers of the JetStream bucket (eventstore.DataKeys),
// the Store of every process.
var (
	ErrNotFound = eventstore.ErrKeyNotFound
	ErrExists   = eventstore.ErrKeyExists
	ErrChanged  = eventstore.ErrKeyChanged
)

// Store holds the wrapped keys by name. Names are KV keys: "k.<key id>"
// for a data key, "p.<player>" and "s.<hmac of the subject>" for whose key
// it is, "index" for the key of those HMACs. Erase removes a name so that
// its bytes are overwritten, not only hidden. Get answers an entry's
// revision, which Update takes: an entry is only ever changed from the
// revision read, so that no change brings back an entry erased meanwhile.
type Store interface {
	Get(ctx context.Context, name string) (value []byte, rev uint64, err error)
	Create(ctx context.Context, name string, value []byte) error
	Update(ctx context.Context, name string, value []byte, rev uint64) error
	Erase(ctx context.Context, name string) error
	Names(ctx context.Context) ([]string, error)
}

// Wrapper wraps data keys under the master key (the writers' Sealer).
// Unwrap opens under the current key or, while it rotates, the previous
// one, and names the key that opened it.
type Wrapper interface {
	Wrap(key, aad []byte) (wrapped []byte, masterKeyID string, err error)
	Unwrap(wrapped, aad []byte) (key []byte, masterKeyID string, err error)
	KeyID() string
}

// Text a reader shows for a sealed field it cannot open for another reason
// than an erasure: the store did not answer, or the master key is not the
// one the key was wrapped under.
const UnavailableText = "[unavailable]"

// Limits of the in-memory caches: a writer with more persons than this
// drops its caches and reloads keys as they are needed.
const cacheMax = 100_000

// Labels that derive the keys of each use, so that no two uses share one.
const (
	wrapAAD    = "tresor/v1/data-key/"
	nonceLabel = "tresor/v1/personal-nonce"
	sealAAD    = "tresor/v1/personal/"
	indexName  = "index"
	// pseudonymLabel keeps a pseudonym apart from the store's name of the
	// same subject, under the same key.
	pseudonymLabel = "tresor/v1/pseudonym/"
)

// Keyring seals and opens personal fields. Sealing is deterministic (the
// nonce is an HMAC of the plaintext under a key derived from the data
// key, a synthetic IV as in AES-GCM-SIV): the same person's same text
// seals to the same bytes, so that the decider compares sealed subjects as
// it compared them in clear. It is safe for concurrent use.
type Keyring struct {
	store Store
	wrap  Wrapper

	mu     sync.Mutex
	keys   map[string]*dataKey     // by key id
	owners map[domain.Owner]string // whose key → its id
	erased map[string]bool         // key ids known erased
	index  []byte
}

// dataKey is one person's key, ready to use.
type dataKey struct {
	aead     cipher.AEAD
	nonceKey []byte
}

// entry is a wrapped key as stored. Owner, once the key's erasure is
// proposed (Erasable), is the name of the entry naming the key as its
// person's: an approval names only the key, and the subject a staff
// member's entry is named by never reaches the stream.
type entry struct {
	Wrapped     []byte `json:"wrapped"`
	MasterKeyID string `json:"master_key_id"`
	Owner       string `json:"owner,omitempty"`
}

// ownerEntry names a person's data key.
type ownerEntry struct {
	KeyID string `json:"key_id"`
}

// New returns a keyring over store, wrapping under w.
func New(store Store, w Wrapper) *Keyring {
	return &Keyring{store: store, wrap: w, keys: map[string]*dataKey{}, owners: map[domain.Owner]string{}, erased: map[string]bool{}}
}

// Seal implements domain.PersonalSealer.
func (k *Keyring) Seal(o domain.Owner, plain string) (string, error) {
	ctx := context.Background()
	id, err := k.keyFor(ctx, o, true)
	if err != nil {
		return "", err
	}
	dk, err := k.key(ctx, id)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, dk.nonceKey)
	mac.Write([]byte(plain))
	nonce := mac.Sum(nil)[:dk.aead.NonceSize()]
	out := dk.aead.Seal(nonce[:len(nonce):len(nonce)], nonce, []byte(plain), []byte(sealAAD+id))
	return domain.SealedPrefix + id + ":" + base64.RawURLEncoding.EncodeToString(out), nil
}

// KeyOf implements domain.PersonalSealer.
func (k *Keyring) KeyOf(o domain.Owner) (string, bool, error) {
	id, err := k.keyFor(context.Background(), o, false)
	if errors.Is(err, ErrNotFound) {
		return "", false, nil
	}
	return id, err == nil, err
}

// Open returns the plaintext of a sealed field: ErrErased when its key is
// gone, another error when it cannot tell.
func (k *Keyring) Open(ctx context.Context, sealed string) (string, error) {
	id := domain.SealedKeyID(sealed)
	if id == "" {
		return "", fmt.Errorf("open %.40q: not a sealed field", sealed)
	}
	dk, err := k.key(ctx, id)
	if err != nil {
		return "", err
	}
	raw, err := base64.RawURLEncoding.DecodeString(sealed[len(domain.SealedPrefix)+len(id)+1:])
	if err != nil || len(raw) < dk.aead.NonceSize() {
		return "", fmt.Errorf("open a field of key %s: malformed", id)
	}
	n := dk.aead.NonceSize()
	plain, err := dk.aead.Open(nil, raw[:n], raw[n:], []byte(sealAAD+id))
	if err != nil {
		return "", fmt.Errorf("open a field of key %s: %w", id, err)
	}
	return string(plain), nil
}

// Reveal is Open for a reader: the plaintext, domain.ErasedText for a
// field whose key is gone, UnavailableText when it cannot tell.
func (k *Keyring) Reveal(ctx context.Context, sealed string) string {
	plain, err := k.Open(ctx, sealed)
	switch {
	case err == nil:
		return plain
	case errors.Is(err, ErrErased):
		return domain.ErasedText
	}
	return UnavailableText
}

// ErrErased is returned for a field whose data key was destroyed (or
// lost).
var ErrErased = errors.New("data key erased")

// Forget marks a key erased in this process: an erasure read from the
// stream, which makes every reader show its fields erased at once, even
// before the writer has destroyed the key in the store.
func (k *Keyring) Forget(keyID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forgetLocked(keyID)
}

func (k *Keyring) forgetLocked(keyID string) {
	delete(k.keys, keyID)
	for o, id := range k.owners {
		if id == keyID {
			delete(k.owners, o)
		}
	}
	if len(k.erased) >= cacheMax {
		clear(k.erased) // the store answers for those dropped
	}
	k.erased[keyID] = true
}

// Erasable records in a person's data key whose it is (o), so that
// Destroy, given only the key's id, finds the entry naming it as the
// person's. The writer calls it as an erasure is proposed: keys made
// before keys named their owners do not.
func (k *Keyring) Erasable(ctx context.Context, keyID string, o domain.Owner) error {
	name, err := k.ownerName(ctx, o)
	if err != nil {
		return err
	}
	for range changeTries {
		e, rev, err := k.readEntry(ctx, "k."+keyID)
		if errors.Is(err, ErrNotFound) || (err == nil && e.Owner == name) {
			return nil // destroyed already, or named
		}
		if err != nil {
			return fmt.Errorf("data key %s: %w", keyID, err)
		}
		e.Owner = name
		b, _ := json.Marshal(e)
		if err := k.store.Update(ctx, "k."+keyID, b, rev); !errors.Is(err, ErrChanged) {
			return err
		}
	}
	return fmt.Errorf("data key %s: changed %d times while it was being named: %w", keyID, changeTries, ErrChanged)
}

// changeTries bounds how often a change of an entry is made again when
// another process changed the entry between its reading and its change
// (a rewrap under a new master key, on another node).
const changeTries = 5

// Destroy erases a person's data key from the store: the entry naming it
// as the person's (named in the key's entry, or else o's), then the key.
// In that order a destruction cut short leaves the key, so that the next
// one, which looks for the key, finishes it; the entry of a person given
// a new key since is kept. Destroying a key already gone is no error, so
// that an erasure is retried safely.
func (k *Keyring) Destroy(ctx context.Context, keyID string, o domain.Owner) error {
	k.Forget(keyID)
	e, _, err := k.readEntry(ctx, "k."+keyID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("destroy data key %s: %w", keyID, err)
	}
	name := e.Owner
	if name == "" && o != (domain.Owner{}) {
		if name, err = k.ownerName(ctx, o); err != nil {
			return fmt.Errorf("destroy data key %s: %w", keyID, err)
		}
	}
	if name != "" {
		if err := k.eraseOwner(ctx, name, keyID); err != nil {
			return fmt.Errorf("destroy the entry naming data key %s: %w", keyID, err)
		}
	}
	if err := k.store.Erase(ctx, "k."+keyID); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("destroy data key %s: %w", keyID, err)
	}
	return nil
}

// Holds reports whether the store still holds a data key: an erasure whose
// key it holds is not finished.
func (k *Keyring) Holds(ctx context.Context, keyID string) (bool, error) {
	_, _, err := k.store.Get(ctx, "k."+keyID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// eraseOwner erases a person's entry if it names keyID.
func (k *Keyring) eraseOwner(ctx context.Context, name, keyID string) error {
	id, err := k.readOwner(ctx, name)
	if errors.Is(err, ErrNotFound) || (err == nil && id != keyID) {
		return nil
	}
	if err == nil {
		err = k.store.Erase(ctx, name)
	}
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// key returns a data key by id, from the cache or the store.
func (k *Keyring) key(ctx context.Context, id string) (*dataKey, error) {
	k.mu.Lock()
	dk, erased := k.keys[id], k.erased[id]
	k.mu.Unlock()
	if erased {
		return nil, ErrErased
	}
	if dk != nil {
		return dk, nil
	}
	raw, err := k.unwrapEntry(ctx, "k."+id)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrErased
	}
	if err != nil {
		return nil, err
	}
	if dk, err = newDataKey(raw); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.erased[id] {
		return nil, ErrErased
	}
	if len(k.keys) >= cacheMax {
		clear(k.keys)
	}
	k.keys[id] = dk
	return dk, nil
}

// keyFor returns the id of a person's key, creating the key when create
// is set and the person has none.
func (k *Keyring) keyFor(ctx context.Context, o domain.Owner, create bool) (string, error) {
	k.mu.Lock()
	id := k.owners[o]
	k.mu.Unlock()
	if id != "" {
		return id, nil
	}
	name, err := k.ownerName(ctx, o)
	if err != nil {
		return "", err
	}
	id, err = k.readOwner(ctx, name)
	if errors.Is(err, ErrNotFound) && create {
		id, err = k.create(ctx, name)
	}
	if err != nil {
		return "", err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.owners) >= cacheMax {
		clear(k.owners)
	}
	k.owners[o] = id
	return id, nil
}

// readOwner reads the id of the key a person's entry names.
func (k *Keyring) readOwner(ctx context.Context, name string) (string, error) {
	b, _, err := k.store.Get(ctx, name)
	if err != nil {
		return "", err
	}
	var oe ownerEntry
	if err := json.Unmarshal(b, &oe); err != nil {
		return "", fmt.Errorf("key entry %s: %w", name, err)
	}
	if !domain.ValidKeyID(oe.KeyID) {
		return "", fmt.Errorf("key entry %s: key id %q", name, oe.KeyID)
	}
	return oe.KeyID, nil
}

// create makes a person's data key: the key first, then the entry that
// names it as theirs, so that a person is never named with a key that is
// not there. A key made by a racing process (a writer taking over) wins
// through the owner's entry.
func (k *Keyring) create(ctx context.Context, name string) (string, error) {
	var raw [32]byte
	var idb [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	if _, err := rand.Read(idb[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(idb[:])
	if err := k.putWrapped(ctx, "k."+id, raw[:], name, 0); err != nil {
		return "", err
	}
	oe, _ := json.Marshal(ownerEntry{KeyID: id})
	err := k.store.Create(ctx, name, oe)
	if errors.Is(err, ErrExists) {
		if err := k.store.Erase(ctx, "k."+id); err != nil {
			return "", err
		}
		return k.readOwner(ctx, name)
	}
	if err != nil {
		return "", fmt.Errorf("record data key of %s: %w", name, err)
	}
	return id, nil
}

// putWrapped wraps raw under the master key and stores it at name, with
// the name of its owner's entry (owner, "" when not known): a new entry
// (rev 0), or in place of revision rev.
func (k *Keyring) putWrapped(ctx context.Context, name string, raw []byte, owner string, rev uint64) error {
	w, mk, err := k.wrap.Wrap(raw, []byte(wrapAAD+name))
	if err != nil {
		return fmt.Errorf("wrap %s: %w", name, err)
	}
	b, _ := json.Marshal(entry{Wrapped: w, MasterKeyID: mk, Owner: owner})
	if rev == 0 {
		err = k.store.Create(ctx, name, b)
	} else {
		err = k.store.Update(ctx, name, b, rev)
	}
	if err != nil {
		return fmt.Errorf("store %s: %w", name, err)
	}
	return nil
}

// unwrapEntry reads and unwraps the key stored at name.
func (k *Keyring) unwrapEntry(ctx context.Context, name string) ([]byte, error) {
	e, _, err := k.readEntry(ctx, name)
	if err != nil {
		return nil, err
	}
	raw, _, err := k.unwrapped(name, e)
	return raw, err
}

// readEntry reads the wrapped key stored at name, and its revision.
func (k *Keyring) readEntry(ctx context.Context, name string) (entry, uint64, error) {
	var e entry
	b, rev, err := k.store.Get(ctx, name)
	if err != nil {
		return e, 0, err
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, 0, fmt.Errorf("key entry %s: %w", name, err)
	}
	return e, rev, nil
}

// unwrapped unwraps an entry read at name, and names the master key that
// opened it.
func (k *Keyring) unwrapped(name string, e entry) ([]byte, string, error) {
	raw, mk, err := k.wrap.Unwrap(e.Wrapped, []byte(wrapAAD+name))
	if err != nil {
		return nil, "", fmt.Errorf("unwrap %s (wrapped under master key %s): %w", name, e.MasterKeyID, err)
	}
	return raw, mk, nil
}

// ownerName is the store's name of a person: the player's id, or an HMAC
// of the staff subject, so that no subject is ever written in clear.
func (k *Keyring) ownerName(ctx context.Context, o domain.Owner) (string, error) {
	switch {
	case o.Player != "" && o.Subject == "":
		return "p." + o.Player, nil
	case o.Subject != "" && o.Player == "":
		idx, err := k.indexKey(ctx)
		if err != nil {
			return "", err
		}
		mac := hmac.New(sha256.New, idx)
		mac.Write([]byte(o.Subject))
		return "s." + hex.EncodeToString(mac.Sum(nil)[:16]), nil
	}
	return "", fmt.Errorf("data key owner: want a player or a subject")
}

// Pseudonym implements domain.PersonalSealer: an HMAC of the subject under
// the index key, which no erasure destroys, so that a token revocation
// still refuses an erased subject's tokens without naming them.
func (k *Keyring) Pseudonym(subject string) (string, error) {
	idx, err := k.indexKey(context.Background())
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, idx)
	mac.Write([]byte(pseudonymLabel + subject))
	return domain.PseudonymPrefix + hex.EncodeToString(mac.Sum(nil)[:16]), nil
}

// indexKey returns the key of the subjects' HMACs, made on first use.
func (k *Keyring) indexKey(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	idx := k.index
	k.mu.Unlock()
	if idx != nil {
		return idx, nil
	}
	raw, err := k.unwrapEntry(ctx, indexName)
	if errors.Is(err, ErrNotFound) {
		var fresh [32]byte
		if _, err := rand.Read(fresh[:]); err != nil {
			return nil, err
		}
		err = k.putWrapped(ctx, indexName, fresh[:], "", 0)
		if errors.Is(err, ErrExists) {
			return k.indexKey(ctx)
		}
		raw = fresh[:]
	}
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.index = raw
	return raw, nil
}

// Rewrap wraps every key still wrapped under an older master key under the
// current one, and returns how many it moved: a master key rotation, which
// rewrites no event (the data keys, and so every sealed field, stay the
// same).
func (k *Keyring) Rewrap(ctx context.Context) (int, error) {
	names, err := k.store.Names(ctx)
	if err != nil {
		return 0, fmt.Errorf("list data keys: %w", err)
	}
	moved := 0
	for _, name := range names {
		if name != indexName && !strings.HasPrefix(name, "k.") {
			continue
		}
		ok, err := k.rewrap(ctx, name)
		if err != nil {
			return moved, err
		}
		if ok {
			moved++
		}
	}
	return moved, nil
}

// rewrap wraps the key at name under the current master key, unless it
// is under it already or gone, and reports whether it did. A key changed
// meanwhile (rewrapped by another node, named by an erasure's proposal) is
// read again; one erased meanwhile stays erased.
func (k *Keyring) rewrap(ctx context.Context, name string) (bool, error) {
	for range changeTries {
		e, rev, err := k.readEntry(ctx, name)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		raw, mk, err := k.unwrapped(name, e)
		if err != nil || mk == k.wrap.KeyID() {
			return false, err
		}
		if err := k.putWrapped(ctx, name, raw, e.Owner, rev); !errors.Is(err, ErrChanged) {
			return err == nil, err
		}
	}
	return false, fmt.Errorf("rewrap %s: changed %d times while it was being rewrapped: %w", name, changeTries, ErrChanged)
}

func newDataKey(raw []byte) (*dataKey, error) {
	if len(raw) != 32 {
		return nil, fmt.Errorf("data key: %d bytes, want 32", len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, raw)
	mac.Write([]byte(nonceLabel))
	return &dataKey{aead: aead, nonceKey: mac.Sum(nil)}, nil
}

// OfErasedKey reports whether the store's entry name, holding value,
// belongs to one of the erased data keys (by key id): the key itself
// ("k.<key id>"), or an entry naming it as a person's ("p.<player>",
// "s.<HMAC of the subject>"). A restore leaves such entries out and a
// replay of erasures destroys them, so that no copy of the bucket brings
// back a key whose erasure the stream records.
func OfErasedKey(name string, value []byte, erased map[string]bool) bool {
	if id, ok := strings.CutPrefix(name, "k."); ok {
		return erased[id]
	}
	if !strings.HasPrefix(name, "p.") && !strings.HasPrefix(name, "s.") {
		return false
	}
	var oe ownerEntry
	return json.Unmarshal(value, &oe) == nil && erased[oe.KeyID]
}

// DestroyErased erases from store every entry of the erased data keys
// (OfErasedKey) and returns how many it erased: an erasure applied again
// to a copy of the bucket older than it. An entry already gone is no
// error.
func DestroyErased(ctx context.Context, store Store, erased map[string]bool) (int, error) {
	if len(erased) == 0 {
		return 0, nil
	}
	names, err := store.Names(ctx)
	if err != nil {
		return 0, fmt.Errorf("list data keys: %w", err)
	}
	n := 0
	for _, name := range names {
		var value []byte
		if !strings.HasPrefix(name, "k.") {
			value, _, err = store.Get(ctx, name)
		}
		switch {
		case errors.Is(err, ErrNotFound):
			continue // erased meanwhile
		case err != nil:
			return n, err
		case !OfErasedKey(name, value, erased):
			continue
		}
		if err := store.Erase(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
			return n, fmt.Errorf("destroy data key entry %s: %w", name, err)
		}
		n++
	}
	return n, nil
}
