package eventstore

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// The store's own key events, registered in every Registry beside Seal.
// They live in the chain they concern, under their own aggregate, so that
// a committer finds a chain's last rotation with one read.
const (
	SealKeyRotatedType          = "eventstore.SealKeyRotated"
	SealKeyRotatedSchemaVersion = 1
	SealKeyRevokedType          = "eventstore.SealKeyRevoked"
	SealKeyRevokedSchemaVersion = 1
	// SealKeyKind is the aggregate kind of key events; its id is the chain.
	SealKeyKind = "_sealkey"
)

// The tags open the signed bytes of each kind of key event, so that no
// signature of one kind can be replayed as another.
const (
	rotationTag   = "tresor-seal-key-rotation-v1"
	revocationTag = "tresor-seal-key-revocation-v1"
)

// RevocationReasonMax bounds the reason a revocation carries.
const RevocationReasonMax = 500

// SealKeyRotated hands a chain's seals over to a new key. It names the
// chain's head just before it and is signed by the key it retires (the
// chain of trust from the first key) and by the new key (which proves the
// new key is held). From the rotation's own position on, only the new key
// seals the chain; a seal by the retired key after it is a violation.
type SealKeyRotated struct {
	Chain    string `json:"chain"`
	Sequence uint64 `json:"sequence"`
	ChainSeq uint64 `json:"chain_seq"`
	Hash     string `json:"hash"`
	// KeyID names the retiring key, which signs Signature.
	KeyID string `json:"key_id"`
	// NewPublicKey is the new Ed25519 public key, hex; NewKeyID its id.
	NewPublicKey string `json:"new_public_key"`
	NewKeyID     string `json:"new_key_id"`
	// Signature and NewSignature are Ed25519 over SignedBytes by the
	// retiring key and by the new one, hex.
	Signature    string `json:"signature"`
	NewSignature string `json:"new_signature"`
}

// SignedBytes is what both signatures of a rotation cover.
func (r *SealKeyRotated) SignedBytes() ([]byte, error) {
	b, err := signedHead(rotationTag, r.Chain, r.Sequence, r.ChainSeq, r.Hash)
	if err != nil {
		return nil, err
	}
	return appendStringField(b, r.NewPublicKey), nil
}

// SealKeyRevoked withdraws trust from a retired key's seals from a chain
// position on, because the key is known to be compromised: those seals no
// longer count as proof. It names the chain's head just before it and is
// signed by the chain's current key.
type SealKeyRevoked struct {
	Chain    string `json:"chain"`
	Sequence uint64 `json:"sequence"`
	ChainSeq uint64 `json:"chain_seq"`
	Hash     string `json:"hash"`
	// RevokedKeyID names the revoked key; FromChainSeq the first chain
	// position whose seals by it no longer count.
	RevokedKeyID string `json:"revoked_key_id"`
	FromChainSeq uint64 `json:"from_chain_seq"`
	Reason       string `json:"reason"`
	// KeyID names the signing (current) key; Signature is Ed25519 over
	// SignedBytes, hex.
	KeyID     string `json:"key_id"`
	Signature string `json:"signature"`
}

// SignedBytes is what a revocation's signature covers.
func (r *SealKeyRevoked) SignedBytes() ([]byte, error) {
	b, err := signedHead(revocationTag, r.Chain, r.Sequence, r.ChainSeq, r.Hash)
	if err != nil {
		return nil, err
	}
	b = appendStringField(b, r.RevokedKeyID)
	b = appendUintField(b, r.FromChainSeq)
	return appendStringField(b, r.Reason), nil
}

// newRotation builds the rotation of chain at head from key to next.
func newRotation(chain string, head Head, key, next ed25519.PrivateKey) (Event, error) {
	nextPub := next.Public().(ed25519.PublicKey)
	r := SealKeyRotated{Chain: chain, Sequence: head.Sequence, ChainSeq: head.ChainSeq, Hash: head.Hash.String(),
		KeyID: KeyID(key.Public().(ed25519.PublicKey)), NewPublicKey: hex.EncodeToString(nextPub), NewKeyID: KeyID(nextPub)}
	msg, err := r.SignedBytes()
	if err != nil {
		return Event{}, fmt.Errorf("rotate the seal key of chain %s: %w", chain, err)
	}
	r.Signature = hex.EncodeToString(ed25519.Sign(key, msg))
	r.NewSignature = hex.EncodeToString(ed25519.Sign(next, msg))
	return keyEvent(chain, SealKeyRotatedType, SealKeyRotatedSchemaVersion, r)
}

// newRevocation builds the revocation, signed by key, of the key named
// revoked from chain position from.
func newRevocation(chain string, head Head, key ed25519.PrivateKey, rv Revocation) (Event, error) {
	r := SealKeyRevoked{Chain: chain, Sequence: head.Sequence, ChainSeq: head.ChainSeq, Hash: head.Hash.String(),
		RevokedKeyID: rv.KeyID, FromChainSeq: rv.FromChainSeq, Reason: rv.Reason, KeyID: KeyID(key.Public().(ed25519.PublicKey))}
	msg, err := r.SignedBytes()
	if err != nil {
		return Event{}, fmt.Errorf("revoke a seal key of chain %s: %w", chain, err)
	}
	r.Signature = hex.EncodeToString(ed25519.Sign(key, msg))
	return keyEvent(chain, SealKeyRevokedType, SealKeyRevokedSchemaVersion, r)
}

func keyEvent(chain, typ string, version uint32, payload any) (Event, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("%s of chain %s: %w", typ, chain, err)
	}
	return Event{Type: typ, SchemaVersion: version, Aggregate: Aggregate{Kind: SealKeyKind, ID: chain}, Payload: b}, nil
}

// Revocation asks a committer to revoke a retired seal key of its chain.
type Revocation struct {
	// KeyID names the revoked key.
	KeyID string
	// FromChainSeq is the first chain position whose seals by the key no
	// longer count (1 for all of them).
	FromChainSeq uint64
	// Reason says why, for the audit's readers (at most
	// RevocationReasonMax bytes).
	Reason string
}

// SealRef names one seal: where it stands and the key that made it.
type SealRef struct {
	Sequence uint64 `json:"sequence"`
	ChainSeq uint64 `json:"chain_seq"`
	KeyID    string `json:"key_id"`
}

// sealKey is one key of a chain's keyring.
type sealKey struct {
	pub ed25519.PublicKey
	// retiredAt is the chain position of the rotation that retired the
	// key, 0 while it is current.
	retiredAt uint64
	// revokedFrom is the first position whose seals by it no longer
	// count, 0 when it is not revoked.
	revokedFrom uint64
	// seals are the key's latest seals this verifier saw, for a
	// revocation to name, at most sealRefsMax; forgottenTo is the chain
	// position of the newest one it let go of to stay within that bound.
	seals       []SealRef
	forgottenTo uint64
}

// sealRefsMax bounds the seals a verifier keeps per key: two years of a
// seal a minute; a key is rotated sooner than that.
const sealRefsMax = 1 << 20

// remember keeps a seal of the key, letting the older half go when the
// list is full.
func (k *sealKey) remember(ref SealRef) {
	if len(k.seals) == sealRefsMax {
		k.forgottenTo = k.seals[sealRefsMax/2-1].ChainSeq
		k.seals = append(k.seals[:0], k.seals[sealRefsMax/2:]...)
	}
	k.seals = append(k.seals, ref)
}

// keyring is what a verifier knows of one chain's seal keys. A chain
// without a rotation has none: its key is the verifier's first key.
type keyring struct {
	current string // key id
	keys    map[string]*sealKey
}

func newKeyring(first ed25519.PublicKey) *keyring {
	id := KeyID(first)
	return &keyring{current: id, keys: map[string]*sealKey{id: {pub: first}}}
}

// currentKey returns the key that seals the chain now.
func (v *Verifier) currentKey(cs *chainState) ed25519.PublicKey {
	if cs.keys == nil {
		return v.pub
	}
	return cs.keys.keys[cs.keys.current].pub
}

// ring returns the chain's keyring, made from the first key on its first
// use.
func (v *Verifier) ring(cs *chainState) *keyring {
	if cs.keys == nil {
		cs.keys = newKeyring(v.pub)
	}
	return cs.keys
}

// RevokedSealsError reports the seals a revocation withdrew: they were
// valid when made and no longer count. It is an *IntegrityError too (What
// "seal revoked"), so that every reader of verifier errors reports it.
type RevokedSealsError struct {
	IntegrityError
	// Seals are the revoked key's seals this verifier saw from the
	// revocation's position to the key's retirement.
	Seals []SealRef
}

// Unwrap lets errors.As find the IntegrityError.
func (e *RevokedSealsError) Unwrap() error { return &e.IntegrityError }

// checkKeyEvent checks a rotation or a revocation against the chain's
// head (cs.head is the event just before ev) and applies it.
func (v *Verifier) checkKeyEvent(cs *chainState, ev *RecordedEvent) error {
	k := keyCheck{v: v, cs: cs, ev: ev}
	if len(v.pub) != ed25519.PublicKeySize {
		return k.bad("seal key event", "a verifier with the operator's first public key", "none")
	}
	switch ev.Type {
	case SealKeyRotatedType:
		return k.rotation()
	case SealKeyRevokedType:
		return k.revocation()
	}
	return k.bad("seal key event type", SealKeyRotatedType+" or "+SealKeyRevokedType, ev.Type)
}

// keyCheck is one key event being checked.
type keyCheck struct {
	v  *Verifier
	cs *chainState
	ev *RecordedEvent
}

func (k keyCheck) bad(what, want, found string) error {
	return &IntegrityError{Sequence: k.ev.Sequence, Subject: k.ev.Chain + "." + k.ev.Aggregate.String(), What: what, Expected: want, Found: found}
}

// head checks the parts every key event shares: the chain's previous
// event as its head, and the chain's current key as its signer.
func (k keyCheck) head(chain string, seq, chainSeq uint64, hash, keyID string) error {
	h := k.cs.head
	switch cur := KeyID(k.v.currentKey(k.cs)); {
	case chain != k.ev.Chain:
		return k.bad("seal key chain", k.ev.Chain, chain)
	case seq != h.Sequence || chainSeq != h.ChainSeq || hash != h.Hash.String():
		return k.bad("seal key head", fmt.Sprintf("seq %d chain_seq %d hash %s", h.Sequence, h.ChainSeq, h.Hash),
			fmt.Sprintf("seq %d chain_seq %d hash %s", seq, chainSeq, hash))
	case keyID != cur:
		return k.bad("seal key_id", cur, keyID)
	}
	return nil
}

func (k keyCheck) verify(pub ed25519.PublicKey, msg []byte, sig, who string) error {
	b, err := hex.DecodeString(sig)
	if err != nil || !ed25519.Verify(pub, msg, b) {
		return k.bad("seal key signature", "valid Ed25519 signature by "+who+" key "+KeyID(pub), sig)
	}
	return nil
}

// rotation checks a SealKeyRotated and makes its new key current.
func (k keyCheck) rotation() error {
	var r SealKeyRotated
	if err := json.Unmarshal(k.ev.Payload, &r); err != nil {
		return k.bad("seal key payload", "JSON SealKeyRotated", err.Error())
	}
	if err := k.head(r.Chain, r.Sequence, r.ChainSeq, r.Hash, r.KeyID); err != nil {
		return err
	}
	next, err := hex.DecodeString(r.NewPublicKey)
	if err != nil || len(next) != ed25519.PublicKeySize || r.NewKeyID != KeyID(next) {
		return k.bad("seal key new key", "an Ed25519 public key and its key id", r.NewPublicKey+" "+r.NewKeyID)
	}
	ring := k.v.ring(k.cs)
	if ring.keys[r.NewKeyID] != nil {
		return k.bad("seal key new key", "a key this chain never used", "key "+r.NewKeyID+" again")
	}
	msg, _ := r.SignedBytes()
	if err := k.verify(k.v.currentKey(k.cs), msg, r.Signature, "the retiring"); err != nil {
		return err
	}
	if err := k.verify(next, msg, r.NewSignature, "the new"); err != nil {
		return err
	}
	ring.keys[ring.current].retiredAt = k.ev.ChainSeq
	ring.keys[r.NewKeyID] = &sealKey{pub: next}
	ring.current = r.NewKeyID
	return nil
}

// revocation checks a SealKeyRevoked and names the seals it withdraws.
func (k keyCheck) revocation() error {
	var r SealKeyRevoked
	if err := json.Unmarshal(k.ev.Payload, &r); err != nil {
		return k.bad("seal key payload", "JSON SealKeyRevoked", err.Error())
	}
	if err := k.head(r.Chain, r.Sequence, r.ChainSeq, r.Hash, r.KeyID); err != nil {
		return err
	}
	msg, _ := r.SignedBytes()
	if err := k.verify(k.v.currentKey(k.cs), msg, r.Signature, "the current"); err != nil {
		return err
	}
	key := k.v.ring(k.cs).keys[r.RevokedKeyID]
	if key == nil || key.retiredAt == 0 || r.FromChainSeq == 0 || r.FromChainSeq > key.retiredAt {
		return k.bad("seal key revoked key", "a retired key of this chain and a position before its retirement",
			fmt.Sprintf("key %s from %d", r.RevokedKeyID, r.FromChainSeq))
	}
	if key.revokedFrom == 0 || r.FromChainSeq < key.revokedFrom {
		key.revokedFrom = r.FromChainSeq
	}
	var withdrawn []SealRef
	for _, s := range key.seals {
		if s.ChainSeq >= r.FromChainSeq {
			withdrawn = append(withdrawn, s)
		}
	}
	older := r.FromChainSeq <= key.forgottenTo
	if len(withdrawn) == 0 && !older {
		return nil
	}
	found := fmt.Sprintf("%d seals no longer count, at stream sequences %s", len(withdrawn), sealSequences(withdrawn))
	if older {
		found += fmt.Sprintf(", and those up to chain position %d, which this audit no longer holds", key.forgottenTo)
	}
	bad := k.bad("seal revoked", fmt.Sprintf("no seal of key %s from chain position %d to its retirement at %d (%s)",
		r.RevokedKeyID, r.FromChainSeq, key.retiredAt, r.Reason), found).(*IntegrityError)
	return &RevokedSealsError{Seals: withdrawn, IntegrityError: *bad}
}

// sealListMax bounds the seals a violation names; the count says the rest.
const sealListMax = 20

func sealSequences(seals []SealRef) string {
	var b strings.Builder
	for i, s := range seals {
		if i == sealListMax {
			fmt.Fprintf(&b, " and %d more", len(seals)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, s.Sequence)
	}
	return b.String()
}

// checkSealKey checks the key of a seal at ev: the chain's current key,
// or else a violation naming what the key is. It returns the parsed seal.
func (v *Verifier) checkSealKey(cs *chainState, ev *RecordedEvent) (Seal, error) {
	cur := v.currentKey(cs)
	s, err := ParseSeal(ev, cur)
	if err == nil {
		ring := v.ring(cs)
		k := ring.keys[ring.current]
		k.remember(SealRef{Sequence: ev.Sequence, ChainSeq: ev.ChainSeq, KeyID: s.KeyID})
		return s, nil
	}
	if cs.keys == nil {
		return s, err
	}
	var named Seal
	if json.Unmarshal(ev.Payload, &named) != nil {
		return s, err
	}
	old := cs.keys.keys[named.KeyID]
	if old == nil || old.retiredAt == 0 {
		return s, err
	}
	if _, perr := ParseSeal(ev, old.pub); perr != nil {
		return s, err
	}
	return s, &IntegrityError{Sequence: ev.Sequence, Subject: ev.Chain + "." + ev.Aggregate.String(), What: "seal key retired",
		Expected: fmt.Sprintf("a seal by key %s, current since chain position %d", cs.keys.current, old.retiredAt),
		Found:    fmt.Sprintf("a seal by key %s, retired at chain position %d, made at position %d", named.KeyID, old.retiredAt, ev.ChainSeq)}
}

// ErrSealKeyRetired reports a committer given only seal keys its chain
// has retired: it refuses to start rather than sign with one.
var ErrSealKeyRetired = errors.New("eventstore: the seal key is retired")

// SealKeyHistory is what a chain's key events say of its seal keys, by
// key id. Their signatures are the audit's to check: a committer needs
// only which key is current, a backup which keys are the chain's.
type SealKeyHistory struct {
	// First is the key the chain's seals started with and Current the
	// one sealing now; both "" before any rotation (the operator's first
	// key, which the stream names only in its seals).
	First, Current string
	// Retired maps each retired key to the chain position of its
	// retirement; Revoked each revoked key to the first position whose
	// seals by it no longer count.
	Retired, Revoked map[string]uint64
}

// Has reports whether the chain ever rotated to or from the key id.
func (h SealKeyHistory) Has(id string) bool {
	_, retired := h.Retired[id]
	return retired || id == h.Current
}

// SealKeys reads the chain's key events.
func (s *NATSStore) SealKeys(ctx context.Context, chain string) (SealKeyHistory, error) {
	ks := SealKeyHistory{Retired: map[string]uint64{}, Revoked: map[string]uint64{}}
	evs, err := s.keyEvents(ctx, chain)
	if err != nil {
		return ks, fmt.Errorf("read the seal keys of chain %s: %w", chain, err)
	}
	for _, ev := range evs {
		if ev.Type == SealKeyRevokedType {
			var r SealKeyRevoked
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				return ks, fmt.Errorf("read the seal key revocation at %d of chain %s: %w", ev.Sequence, chain, err)
			}
			if from, ok := ks.Revoked[r.RevokedKeyID]; !ok || r.FromChainSeq < from {
				ks.Revoked[r.RevokedKeyID] = r.FromChainSeq
			}
			continue
		}
		if ev.Type != SealKeyRotatedType {
			continue
		}
		var r SealKeyRotated
		if err := json.Unmarshal(ev.Payload, &r); err != nil {
			return ks, fmt.Errorf("read the seal key rotation at %d of chain %s: %w", ev.Sequence, chain, err)
		}
		if ks.First == "" {
			ks.First = r.KeyID
		}
		ks.Retired[r.KeyID] = ev.ChainSeq
		ks.Current = r.NewKeyID
	}
	return ks, nil
}

// keyEvents reads the chain's key events with an ordered consumer, which
// a read-only user (a backup's) may create, where the direct get that
// LoadAggregate starts with is not granted to it.
func (s *NATSStore) keyEvents(ctx context.Context, chain string) ([]RecordedEvent, error) {
	subject := s.subj.event(chain, Aggregate{Kind: SealKeyKind, ID: chain})
	ictx, cancel := s.reqCtx(ctx)
	info, err := s.stream.Info(ictx, jetstream.WithSubjectFilter(subject))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("count the messages on %s: %w", subject, err)
	}
	n := info.State.Subjects[subject]
	if n > uint64(s.cfg.AggregateEventsMax) {
		return nil, fmt.Errorf("%s holds %d events, more than %d: %w", subject, n, s.cfg.AggregateEventsMax, ErrInvalid)
	}
	var out []RecordedEvent
	if n == 0 {
		return out, nil
	}
	err = s.consume(ctx, readSpec{filter: subject, bounded: true}, func(ev RecordedEvent) (bool, error) {
		out = append(out, ev)
		return uint64(len(out)) >= n, nil
	})
	return out, err
}

// pick returns the key of cfg that seals the chain now: SealKey before
// any rotation; after one, whichever of SealKey and SealKeyNext the last
// rotation named. Holding only retired keys is ErrSealKeyRetired.
func (ks SealKeyHistory) pick(cfg *CommitterConfig) (ed25519.PrivateKey, error) {
	if ks.Current == "" {
		return cfg.SealKey, nil
	}
	for _, k := range []ed25519.PrivateKey{cfg.SealKey, cfg.SealKeyNext} {
		if k != nil && KeyID(k.Public().(ed25519.PublicKey)) == ks.Current {
			return k, nil
		}
	}
	given := KeyID(cfg.SealKey.Public().(ed25519.PublicKey))
	if at, ok := ks.Retired[given]; ok {
		return nil, fmt.Errorf("%w: key %s retired at chain position %d; the chain's key is now %s", ErrSealKeyRetired, given, at, ks.Current)
	}
	return nil, fmt.Errorf("%w: key %s is not the chain's, which is now %s", ErrSealKeyRetired, given, ks.Current)
}

// keyOp is a rotation or a revocation waiting for its turn in a
// committer's loop. Its event names the head just before it, so it goes
// only once nothing is in flight.
type keyOp struct {
	next   ed25519.PrivateKey // a rotation's new key
	revoke Revocation         // or a revocation
}

// event builds the op's event after head, signed by key.
func (op *keyOp) event(chain string, head Head, key ed25519.PrivateKey) (Event, error) {
	if op.next != nil {
		return newRotation(chain, head, key, op.next)
	}
	return newRevocation(chain, head, key, op.revoke)
}

// check refuses an op the chain's audit would flag: a rotation to a key
// the chain used, a revocation of a key not retired or from after its
// retirement.
func (ks SealKeyHistory) check(op *keyOp, key ed25519.PrivateKey) error {
	cur := KeyID(key.Public().(ed25519.PublicKey))
	if op.next != nil {
		next := KeyID(op.next.Public().(ed25519.PublicKey))
		if _, used := ks.Retired[next]; used || next == cur {
			return fmt.Errorf("rotate to seal key %s: the chain used it already: %w", next, ErrInvalid)
		}
		return nil
	}
	r := op.revoke
	at, ok := ks.Retired[r.KeyID]
	switch {
	case !ok:
		return fmt.Errorf("revoke seal key %s: not a retired key of the chain (rotate first): %w", r.KeyID, ErrInvalid)
	case r.FromChainSeq == 0 || r.FromChainSeq > at:
		return fmt.Errorf("revoke seal key %s from position %d: want 1..%d, its retirement: %w", r.KeyID, r.FromChainSeq, at, ErrInvalid)
	case len(r.Reason) == 0 || len(r.Reason) > RevocationReasonMax:
		return fmt.Errorf("revoke seal key %s: a reason of 1..%d bytes: %w", r.KeyID, RevocationReasonMax, ErrInvalid)
	}
	return nil
}

// SealKey returns the key that seals chain as of the events verified so
// far: the first key until a rotation.
func (v *Verifier) SealKey(chain string) ed25519.PublicKey {
	if cs := v.chains[chain]; cs != nil {
		return v.currentKey(cs)
	}
	return v.pub
}

// revoked reports whether the chain's key events already withdraw what r
// asks to: the key revoked from r's position or an earlier one.
func (ks SealKeyHistory) revoked(r Revocation) bool {
	from, ok := ks.Revoked[r.KeyID]
	return ok && from <= r.FromChainSeq
}
