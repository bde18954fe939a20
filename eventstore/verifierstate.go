package eventstore

import (
	"cmp"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"slices"
)

// VerifierState is what a Verifier remembers, so that an incremental audit
// can save it at the end of a run and resume from it on the next
// (docs/audit.md, "The state file"). Hashes are lowercase hex.
type VerifierState struct {
	// FromStart is true when every chain was verified from position 1.
	FromStart bool `json:"from_start"`
	// Chains holds every chain seen, sorted by name.
	Chains []ChainHeads `json:"chains"`
	// Events, Seals and Skipped are the counts of VerifyStats.
	Events  uint64 `json:"events"`
	Seals   uint64 `json:"seals"`
	Skipped uint64 `json:"skipped"`
}

// ChainHeads is one chain's head and the heads before it that a later seal
// may still name (a seal points at most recentMax positions back).
type ChainHeads struct {
	Chain string    `json:"chain"`
	Head  SavedHead `json:"head"`
	// Recent are the chain's last heads, ascending, the head last.
	Recent []SavedHead `json:"recent"`
	// Anchor is the sealed head the chain must start at, when an audit
	// from a seal has not reached it yet.
	Anchor *SavedHead `json:"anchor,omitempty"`
	// Keys are the chain's seal keys once one rotated, the current one
	// named by CurrentKey; none means the operator's first key alone.
	// The seals each key made are not kept: a revocation after a resume
	// names the seals of its run only.
	Keys       []SavedSealKey `json:"keys,omitempty"`
	CurrentKey string         `json:"current_key,omitempty"`
}

// SavedSealKey is one key of a chain's keyring as a state file writes it.
type SavedSealKey struct {
	PublicKey   string `json:"public_key"`
	RetiredAt   uint64 `json:"retired_at,omitempty"`
	RevokedFrom uint64 `json:"revoked_from,omitempty"`
}

// SavedHead is a Head as a state file writes it.
type SavedHead struct {
	Sequence uint64 `json:"sequence"`
	ChainSeq uint64 `json:"chain_seq"`
	Hash     string `json:"hash"`
}

func saveHead(h Head) SavedHead {
	return SavedHead{Sequence: h.Sequence, ChainSeq: h.ChainSeq, Hash: h.Hash.String()}
}

// Head returns the saved head, or an error for a malformed hash.
func (s SavedHead) Head() (Head, error) {
	h, err := ParseHash(s.Hash)
	return Head{Sequence: s.Sequence, ChainSeq: s.ChainSeq, Hash: h}, err
}

// State returns what the verifier remembers.
func (v *Verifier) State() VerifierState {
	st := VerifierState{FromStart: v.fromStart, Events: v.stats.Events, Seals: v.stats.Seals, Skipped: v.stats.Skipped}
	for name, cs := range v.chains {
		c := ChainHeads{Chain: name, Head: saveHead(cs.head)}
		if cs.anchor != nil {
			a := saveHead(*cs.anchor)
			c.Anchor = &a
		}
		// The ring holds the last recentMax positions: the ones still
		// there are those within recentMax of the head.
		first := cs.head.ChainSeq - min(cs.head.ChainSeq, recentMax-1)
		for pos := max(first, 1); pos <= cs.head.ChainSeq && cs.head.ChainSeq > 0; pos++ {
			if r := cs.recent[pos%recentMax]; r.ChainSeq == pos {
				c.Recent = append(c.Recent, saveHead(r))
			}
		}
		if cs.keys != nil && len(cs.keys.keys) > 1 {
			c.CurrentKey = cs.keys.current
			for _, k := range cs.keys.keys {
				c.Keys = append(c.Keys, SavedSealKey{PublicKey: hex.EncodeToString(k.pub), RetiredAt: k.retiredAt, RevokedFrom: k.revokedFrom})
			}
			slices.SortFunc(c.Keys, func(a, b SavedSealKey) int { return cmp.Compare(a.PublicKey, b.PublicKey) })
		}
		st.Chains = append(st.Chains, c)
	}
	slices.SortFunc(st.Chains, func(a, b ChainHeads) int { return cmp.Compare(a.Chain, b.Chain) })
	return st
}

// ResumeVerifier returns a verifier that goes on from a saved state, with
// the operator's seal key pub. A state that contradicts itself (a chain
// twice, a malformed hash, a recent head out of its chain's range) is an
// error: it was not written by State.
func ResumeVerifier(st VerifierState, pub ed25519.PublicKey) (*Verifier, error) {
	v := &Verifier{pub: pub, fromStart: st.FromStart, chains: map[string]*chainState{},
		stats: VerifyStats{Events: st.Events, Seals: st.Seals, Skipped: st.Skipped}}
	for _, c := range st.Chains {
		if _, dup := v.chains[c.Chain]; dup || c.Chain == "" {
			return nil, fmt.Errorf("verifier state: chain %q twice or unnamed", c.Chain)
		}
		head, err := c.Head.Head()
		if err != nil {
			return nil, fmt.Errorf("verifier state: chain %s head: %w", c.Chain, err)
		}
		cs := &chainState{head: head}
		for _, r := range c.Recent {
			h, err := r.Head()
			if err != nil || h.ChainSeq == 0 || h.ChainSeq > head.ChainSeq || head.ChainSeq-h.ChainSeq >= recentMax {
				return nil, fmt.Errorf("verifier state: chain %s: recent head at %d of a chain at %d (%v)", c.Chain, h.ChainSeq, head.ChainSeq, err)
			}
			cs.recent[h.ChainSeq%recentMax] = h
		}
		if c.Anchor != nil {
			a, err := c.Anchor.Head()
			if err != nil {
				return nil, fmt.Errorf("verifier state: chain %s anchor: %w", c.Chain, err)
			}
			cs.anchor = &a
		}
		if cs.keys, err = resumeKeyring(c); err != nil {
			return nil, err
		}
		v.chains[c.Chain] = cs
	}
	return v, nil
}

// resumeKeyring rebuilds a chain's saved keyring, nil when it has none.
func resumeKeyring(c ChainHeads) (*keyring, error) {
	if len(c.Keys) == 0 {
		return nil, nil
	}
	ring := &keyring{current: c.CurrentKey, keys: map[string]*sealKey{}}
	for _, k := range c.Keys {
		pub, err := hex.DecodeString(k.PublicKey)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("verifier state: chain %s: seal key %q", c.Chain, k.PublicKey)
		}
		ring.keys[KeyID(pub)] = &sealKey{pub: pub, retiredAt: k.RetiredAt, revokedFrom: k.RevokedFrom}
	}
	if k := ring.keys[ring.current]; k == nil || k.retiredAt != 0 {
		return nil, fmt.Errorf("verifier state: chain %s: current seal key %q is not one of its keys in service", c.Chain, c.CurrentKey)
	}
	return ring, nil
}
