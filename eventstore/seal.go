package eventstore

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// The store's own Seal event. Its type is registered in every Registry.
const (
	SealType          = "eventstore.Seal"
	SealSchemaVersion = 1
	// SealKind is the aggregate kind of seals; the '_' prefix is reserved
	// so that no domain aggregate can collide with it.
	SealKind = "_seal"
)

// sealTag opens the signed bytes of a seal, so that a seal signature can
// never be replayed as a signature of anything else.
const sealTag = "tresor-seal-v1"

// Seal is the payload of a Seal event: a signed statement of a chain's head
// at a past position. It lets an auditor start verification at the seal
// instead of the first event, and proves who wrote the log up to there.
type Seal struct {
	// Chain is the sealed chain.
	Chain string `json:"chain"`
	// Sequence is the stream sequence of the sealed head.
	Sequence uint64 `json:"sequence"`
	// ChainSeq is the sealed head's position in the chain, which is also
	// the number of events the chain held (the count).
	ChainSeq uint64 `json:"chain_seq"`
	// Hash is the sealed head's hash, lowercase hex.
	Hash string `json:"hash"`
	// KeyID is the first 8 bytes of SHA-256 of the public key, hex: it
	// names the key without carrying it.
	KeyID string `json:"key_id"`
	// Signature is Ed25519 over SignedBytes, hex.
	Signature string `json:"signature"`
}

// SignedBytes is what the Ed25519 signature covers (docs/events.md).
func (s *Seal) SignedBytes() ([]byte, error) {
	return signedHead(sealTag, s.Chain, s.Sequence, s.ChainSeq, s.Hash)
}

// TaggedBytes is the canonical encoding of the sealed head after tag:
// SignedBytes with another tag is what a witness signs of the same head
// (docs/vault.md), so that neither signature can pass for the other.
func (s *Seal) TaggedBytes(tag string) ([]byte, error) {
	return signedHead(tag, s.Chain, s.Sequence, s.ChainSeq, s.Hash)
}

// signedHead opens the signed bytes of a statement about a chain's head:
// the statement's tag, the chain and the head's position and hash.
func signedHead(tag, chain string, seq, chainSeq uint64, hash string) ([]byte, error) {
	h, err := ParseHash(hash)
	if err != nil {
		return nil, err
	}
	b := appendStringField(nil, tag)
	b = appendStringField(b, chain)
	b = appendUintField(b, seq)
	b = appendUintField(b, chainSeq)
	return appendField(b, h[:]), nil
}

// KeyID names a public key in seals.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// newSeal signs head of chain with key and returns the Seal event to
// append.
func newSeal(chain string, head Head, key ed25519.PrivateKey) (Event, error) {
	s := Seal{Chain: chain, Sequence: head.Sequence, ChainSeq: head.ChainSeq, Hash: head.Hash.String(),
		KeyID: KeyID(key.Public().(ed25519.PublicKey))}
	msg, err := s.SignedBytes()
	if err != nil {
		return Event{}, fmt.Errorf("seal chain %s: %w", chain, err)
	}
	s.Signature = hex.EncodeToString(ed25519.Sign(key, msg))
	payload, err := json.Marshal(s)
	if err != nil {
		return Event{}, fmt.Errorf("seal chain %s: %w", chain, err)
	}
	return Event{Type: SealType, SchemaVersion: SealSchemaVersion, Aggregate: Aggregate{Kind: SealKind, ID: chain}, Payload: payload}, nil
}

// ParseSeal reads the Seal payload of a Seal event and checks its
// signature with pub. It returns an *IntegrityError for a malformed or
// badly signed seal.
func ParseSeal(ev *RecordedEvent, pub ed25519.PublicKey) (Seal, error) {
	bad := func(what, want, found string) (Seal, error) {
		return Seal{}, &IntegrityError{Sequence: ev.Sequence, Subject: ev.Chain + "." + ev.Aggregate.String(), What: what, Expected: want, Found: found}
	}
	var s Seal
	if ev.Type != SealType {
		return bad("seal type", SealType, ev.Type)
	}
	if err := json.Unmarshal(ev.Payload, &s); err != nil {
		return bad("seal payload", "JSON seal", err.Error())
	}
	if s.Chain != ev.Chain {
		return bad("seal chain", ev.Chain, s.Chain)
	}
	if len(pub) != ed25519.PublicKeySize {
		return bad("seal verification key", "Ed25519 public key", fmt.Sprintf("%d bytes", len(pub)))
	}
	if s.KeyID != KeyID(pub) {
		return bad("seal key_id", KeyID(pub), s.KeyID)
	}
	msg, err := s.SignedBytes()
	if err != nil {
		return bad("seal hash", "64 hex digits", s.Hash)
	}
	sig, err := hex.DecodeString(s.Signature)
	if err != nil || !ed25519.Verify(pub, msg, sig) {
		return bad("seal signature", "valid Ed25519 signature by key "+KeyID(pub), s.Signature)
	}
	return s, nil
}

// recentMax is how far back (in chain positions) a seal may point: the
// committer seals its last acknowledged head, at most two batches behind.
const recentMax = 4 * BatchEventsMax

// chainState is what the verifier remembers of one chain.
type chainState struct {
	head   Head
	recent [recentMax]Head // recent[chainSeq % recentMax]
	// anchor, when set, is the sealed head the chain must start at.
	anchor *Head
	// keys are the chain's seal keys once it rotated or sealed; nil
	// means the verifier's first key alone.
	keys *keyring
}

// VerifyStats counts what a Verifier checked.
type VerifyStats struct {
	// Events checked (hash and linkage), seals included.
	Events uint64
	// Seals whose signature and head were checked.
	Seals uint64
	// Skipped events: chains without an anchor when starting at a seal, and
	// events before an anchor.
	Skipped uint64
}

// Verifier checks hash chains and seals over events fed in stream order:
// each event's hash, its link to the previous event of its chain, gap-free
// chain positions, and every seal's signature and sealed head. It works
// from the first event of the stream (NewVerifier) or from any seal
// (StartAt), and is what an auditor re-implements from docs/events.md.
type Verifier struct {
	pub       ed25519.PublicKey
	fromStart bool
	chains    map[string]*chainState
	stats     VerifyStats
}

// NewVerifier verifies from the first event of the stream: every chain
// must begin at position 1 with a zero previous hash. pub is the operator's
// seal key; with nil, chains are checked and any seal is reported as an
// error, since it cannot be verified.
func NewVerifier(pub ed25519.PublicKey) *Verifier {
	return &Verifier{pub: pub, fromStart: true, chains: map[string]*chainState{}}
}

// StartAt makes a verifier that starts at a seal: it checks the seal's
// signature and returns the verifier and the stream sequence to read from
// (the sealed head). Only the sealed chain is verified; more chains can be
// anchored with Anchor. It returns an *IntegrityError for a bad seal.
func StartAt(seal RecordedEvent, pub ed25519.PublicKey) (*Verifier, uint64, error) {
	v := &Verifier{pub: pub, chains: map[string]*chainState{}}
	from, err := v.Anchor(seal)
	return v, from, err
}

// Anchor adds a seal as the trusted starting point of its chain and
// returns the stream sequence of the sealed head. It returns an
// *IntegrityError for a bad seal.
func (v *Verifier) Anchor(seal RecordedEvent) (uint64, error) {
	if err := hashMismatch(&seal, ComputeHash(&seal)); err != nil {
		return 0, err
	}
	s, err := ParseSeal(&seal, v.pub)
	if err != nil {
		return 0, err
	}
	h, _ := ParseHash(s.Hash)
	v.chains[s.Chain] = &chainState{anchor: &Head{Sequence: s.Sequence, ChainSeq: s.ChainSeq, Hash: h}}
	return s.Sequence, nil
}

// Stats reports what was checked so far.
func (v *Verifier) Stats() VerifyStats { return v.stats }

// hashMismatch reports an event whose stated hash is not the one computed.
func hashMismatch(ev *RecordedEvent, computed Hash) error {
	if computed != ev.Hash {
		return &IntegrityError{Sequence: ev.Sequence, Subject: ev.Chain + "." + ev.Aggregate.String(), What: "hash",
			Expected: ev.Hash.String(), Found: computed.String()}
	}
	return nil
}

// Check verifies the next event in stream order. Raw events are needed
// (a store opened without Registry, or an export): upcast payloads no
// longer match their hashes. It returns an *IntegrityError naming the first
// violation of the event. Verification goes on from the event as stored
// (its stated hash and position become the chain's head), so that an
// auditor feeding a whole stream hears of one altered event once or twice,
// not again at every later event of its chain.
func (v *Verifier) Check(ev RecordedEvent) error {
	return v.CheckComputed(ev, ComputeHash(&ev))
}

// CheckComputed is Check for an event whose hash the caller computed
// already (ComputeHash(&ev)): an auditor hashes events on every core and
// links them in order on one.
func (v *Verifier) CheckComputed(ev RecordedEvent, computed Hash) error {
	cs, err := v.check(&ev, computed)
	if cs != nil {
		v.record(cs, &ev)
	}
	return err
}

// check returns the first violation of ev and the state of its chain when
// ev moves that chain's head (nil for a skipped event).
func (v *Verifier) check(ev *RecordedEvent, computed Hash) (*chainState, error) {
	bad := func(what string, want, found any) error {
		return &IntegrityError{Sequence: ev.Sequence, Subject: ev.Chain + "." + ev.Aggregate.String(), What: what,
			Expected: fmt.Sprint(want), Found: fmt.Sprint(found)}
	}
	hashErr := hashMismatch(ev, computed)
	cs := v.chains[ev.Chain]
	switch {
	case cs == nil && !v.fromStart:
		v.stats.Skipped++
		return nil, hashErr
	case cs == nil:
		cs = &chainState{}
		// A copy of the name: an event's strings may share a reader's
		// buffer (ReadExportHashed), which the verifier must not keep.
		v.chains[strings.Clone(ev.Chain)] = cs
		if hashErr != nil {
			return cs, hashErr
		}
		if ev.ChainSeq != 1 || !ev.PrevHash.IsZero() {
			return cs, bad("chain start", "chain_seq 1 with zero prev_hash", fmt.Sprintf("chain_seq %d prev_hash %s", ev.ChainSeq, ev.PrevHash))
		}
	case cs.anchor != nil:
		a := *cs.anchor
		if ev.ChainSeq < a.ChainSeq {
			v.stats.Skipped++
			return nil, hashErr
		}
		cs.anchor = nil
		if hashErr != nil {
			return cs, hashErr
		}
		if ev.ChainSeq > a.ChainSeq || ev.Sequence != a.Sequence || ev.Hash != a.Hash {
			return cs, bad("sealed head", fmt.Sprintf("seq %d chain_seq %d hash %s", a.Sequence, a.ChainSeq, a.Hash),
				fmt.Sprintf("seq %d chain_seq %d hash %s", ev.Sequence, ev.ChainSeq, ev.Hash))
		}
		return cs, nil
	default:
		switch {
		case hashErr != nil:
			return cs, hashErr
		case ev.PrevHash != cs.head.Hash:
			return cs, bad("prev_hash", cs.head.Hash, ev.PrevHash)
		case ev.ChainSeq != cs.head.ChainSeq+1:
			return cs, bad("chain_seq", cs.head.ChainSeq+1, ev.ChainSeq)
		case ev.Sequence <= cs.head.Sequence:
			return cs, bad("stream sequence", fmt.Sprintf("> %d", cs.head.Sequence), ev.Sequence)
		}
	}
	if ev.Aggregate.Kind == SealKeyKind {
		return cs, v.checkKeyEvent(cs, ev)
	}
	if ev.Type == SealType && ev.Aggregate.Kind == SealKind {
		s, err := v.checkSealKey(cs, ev)
		if err != nil {
			return cs, err
		}
		if s.ChainSeq == 0 || s.ChainSeq > cs.head.ChainSeq || cs.head.ChainSeq-s.ChainSeq >= recentMax {
			return cs, bad("seal position", fmt.Sprintf("1..%d", cs.head.ChainSeq), s.ChainSeq)
		}
		if r := cs.recent[s.ChainSeq%recentMax]; r.ChainSeq != s.ChainSeq || r.Sequence != s.Sequence || r.Hash.String() != s.Hash {
			return cs, bad("sealed head", fmt.Sprintf("seq %d hash %s", r.Sequence, r.Hash), fmt.Sprintf("seq %d hash %s", s.Sequence, s.Hash))
		}
		v.stats.Seals++
	}
	return cs, nil
}

func (v *Verifier) record(cs *chainState, ev *RecordedEvent) {
	cs.head = Head{Sequence: ev.Sequence, ChainSeq: ev.ChainSeq, Hash: ev.Hash}
	cs.recent[ev.ChainSeq%recentMax] = cs.head
	v.stats.Events++
}

// VerifyStore reads store from sequence from to its last event through v
// and returns the first violation. The store must be opened without a
// Registry so that events are raw.
func VerifyStore(ctx context.Context, store Store, v *Verifier, from uint64) (VerifyStats, error) {
	_, err := store.ReadFrom(ctx, from, v.Check)
	if err != nil {
		return v.stats, fmt.Errorf("verify stream from %d: %w", from, err)
	}
	return v.stats, nil
}

// sealMark is where a chain's last Seal stands (pos) and the position of
// the head it sealed (sealedAt); zeros for a chain that has none.
type sealMark struct{ pos, sealedAt uint64 }

// lastSeal reads the chain's last Seal. A committer counts from it, not
// from the head it starts on: a writer killed before its closing seal
// leaves a tail no seal covers, and a successor that took its head for
// sealed would leave it so (SealEvery counted from zero in every process,
// no closing seal without new events), until an audit reads the chain as
// cut short. Only the positions are read: the signature is the audit's to
// check, and a seal made with a key since rotated is still a seal.
func (s *NATSStore) lastSeal(ctx context.Context, chain string) (sealMark, error) {
	m, err := s.lastMsg(ctx, s.subj.event(chain, Aggregate{Kind: SealKind, ID: chain}))
	if err != nil || m == nil {
		return sealMark{}, err
	}
	ev, err := s.subj.decode(m.Subject, m.Sequence, m.Header, m.Data)
	if err != nil {
		return sealMark{}, fmt.Errorf("read last seal of chain %s: %w", chain, err)
	}
	var seal Seal
	if err := json.Unmarshal(ev.Payload, &seal); err != nil || ev.Type != SealType || seal.ChainSeq >= ev.ChainSeq {
		return sealMark{}, &IntegrityError{Sequence: ev.Sequence, Subject: m.Subject, What: "last seal",
			Expected: "a Seal of an earlier position", Found: fmt.Sprintf("%s of position %d at %d", ev.Type, seal.ChainSeq, ev.ChainSeq)}
	}
	return sealMark{pos: ev.ChainSeq, sealedAt: seal.ChainSeq}, nil
}
