package audit_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/settlement"
)

// The operator's later seal keys: the first is operatorKey.
var (
	secondKey = ed25519.NewKeyFromSeed([]byte("operator-seal-key-number-two-22!"))
	thirdKey  = ed25519.NewKeyFromSeed([]byte("operator-seal-key-number-three3!"))
)

// rotated writes the played stream again through the real committer,
// rotating the seal key twice on the way (to secondKey a third of the way
// in, to thirdKey two thirds in), and returns the store, raw.
func rotated(tb testing.TB) *eventstore.NATSStore {
	tb.Helper()
	s := startServer(tb, nil)
	c, err := s.store.NewCommitter(ctx(tb), settlement.Chain, eventstore.CommitterConfig{SealKey: operatorKey, SealEvery: sealEvery})
	if err != nil {
		tb.Fatal(err)
	}
	var facts []eventstore.RecordedEvent
	for _, ev := range played(tb) {
		if ev.Type != eventstore.SealType {
			facts = append(facts, ev)
		}
	}
	// The rotations fall between two of the played stream's appends: an
	// audit cut at a rotation must not find a stake without its unit.
	boundary := func(i int) int {
		for i < len(facts) && facts[i-1].AppendRemaining != 0 {
			i++
		}
		return i
	}
	third, twoThirds := boundary(len(facts)/3), boundary(2*len(facts)/3)
	for i, part := range [][]eventstore.RecordedEvent{facts[:third], facts[third:twoThirds], facts[twoThirds:]} {
		if i > 0 {
			if _, err := c.RotateSealKey(ctx(tb), []ed25519.PrivateKey{secondKey, thirdKey}[i-1]); err != nil {
				tb.Fatal(err)
			}
		}
		submitAll(tb, c, part)
	}
	if err := c.Close(); err != nil {
		tb.Fatal(err)
	}
	return s.raw(tb)
}

// submitAll commits events (minus their seals) one by one on c, keeping
// their ids and times.
func submitAll(tb testing.TB, c eventstore.Committer, events []eventstore.RecordedEvent) {
	tb.Helper()
	for _, ev := range events {
		if ev.Type == eventstore.SealType {
			continue
		}
		e := ev.Event
		e.At = ev.RecordedAt
		if r := <-c.Submit(ctx(tb), eventstore.AppendRequest{Events: []eventstore.Event{e}}); r.Err != nil {
			tb.Fatal(r.Err)
		}
	}
}

// sealKeys counts a stream's seals by key id.
func sealKeys(tb testing.TB, events []eventstore.RecordedEvent) map[string]int {
	tb.Helper()
	keys := map[string]int{}
	for _, ev := range events {
		if ev.Type == eventstore.SealType {
			var s eventstore.Seal
			if err := json.Unmarshal(ev.Payload, &s); err != nil {
				tb.Fatal(err)
			}
			keys[s.KeyID]++
		}
	}
	return keys
}

// A stream whose seal key rotated twice audits clean from the first
// public key alone, every seal of the three keys verified.
func TestAuditFollowsSealKeyRotations(t *testing.T) {
	store := rotated(t)
	r := auditStore(t, store)
	if !r.OK {
		t.Fatalf("audit across two rotations: %+v", r.Violations)
	}
	keys := sealKeys(t, eventstoretest.ReadAll(t, store))
	if len(keys) != 3 || r.Seals != uint64(keys[eventstore.KeyID(operatorPub)]+keys[eventstore.KeyID(secondKey.Public().(ed25519.PublicKey))]+
		keys[eventstore.KeyID(thirdKey.Public().(ed25519.PublicKey))]) {
		t.Fatalf("%d seals verified, by keys %v: want every seal of the three keys", r.Seals, keys)
	}
}

// appendForged links ev after the last event of events, as a writer
// holding the key it names would.
func appendForged(events []eventstore.RecordedEvent, ev eventstore.RecordedEvent) []eventstore.RecordedEvent {
	last := events[len(events)-1]
	ev.Sequence, ev.ChainSeq, ev.PrevHash, ev.Chain = last.Sequence+1, last.ChainSeq+1, last.Hash, last.Chain
	ev.Hash = eventstore.ComputeHash(&ev)
	return append(events, ev)
}

// forgedSeal is a seal of the stream's head signed with key: a valid
// seal, had the key not been retired.
func forgedSeal(tb testing.TB, events []eventstore.RecordedEvent, key ed25519.PrivateKey) eventstore.RecordedEvent {
	tb.Helper()
	last := events[len(events)-1]
	s := eventstore.Seal{Chain: last.Chain, Sequence: last.Sequence, ChainSeq: last.ChainSeq, Hash: last.Hash.String(),
		KeyID: eventstore.KeyID(key.Public().(ed25519.PublicKey))}
	msg, err := s.SignedBytes()
	if err != nil {
		tb.Fatal(err)
	}
	s.Signature = hex.EncodeToString(ed25519.Sign(key, msg))
	p, err := json.Marshal(s)
	if err != nil {
		tb.Fatal(err)
	}
	ev := last
	ev.ID, ev.Type, ev.SchemaVersion, ev.Payload = last.ID+"-seal", eventstore.SealType, eventstore.SealSchemaVersion, p
	ev.Aggregate = eventstore.Aggregate{Kind: eventstore.SealKind, ID: last.Chain}
	ev.CorrelationID, ev.CausationID = "", ""
	return ev
}

// Someone holding a retired key (kept past its retirement, or stolen)
// seals what came after: the seal verifies with that key, and the audit
// names it a seal by a retired key, nothing else.
func TestASealByARetiredKeyAfterItsRetirementIsCaught(t *testing.T) {
	events := eventstoretest.ReadAll(t, rotated(t))
	for _, key := range []ed25519.PrivateKey{operatorKey, secondKey} {
		forged := appendForged(events, forgedSeal(t, events, key))
		r := auditEvents(t, forged)
		v := wantCode(t, r, audit.CodeSealKeyRetired)
		if r.ViolationsTotal != 1 || v.Sequence != forged[len(forged)-1].Sequence ||
			!strings.Contains(v.Found, eventstore.KeyID(key.Public().(ed25519.PublicKey))) {
			t.Fatalf("seal by the retired key %s: %+v", eventstore.KeyID(key.Public().(ed25519.PublicKey)), r.Violations)
		}
	}
	// The current key's seal at the same place is a seal like any other.
	if r := auditEvents(t, appendForged(events, forgedSeal(t, events, thirdKey))); !r.OK {
		t.Fatalf("seal by the current key: %+v", r.Violations)
	}
}

// A rotation made without the current key (an insider handing the seals
// to a key of their own) is refused, and so is every seal of their key.
func TestARotationNotSignedByTheCurrentKeyIsCaught(t *testing.T) {
	events := played(t)
	store := startServer(t, nil).store
	c, err := store.NewCommitter(ctx(t), settlement.Chain, eventstore.CommitterConfig{SealKey: insiderKey, SealEvery: sealEvery})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RotateSealKey(ctx(t), secondKey); err != nil {
		t.Fatal(err)
	}
	submitAll(t, c, events)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	r := auditStore(t, store)
	if v := wantCode(t, r, audit.CodeSealInvalid); v.Sequence != 1 || r.Seals != 0 {
		t.Fatalf("rotation by the insider's key: %d seals verified, first violation %+v", r.Seals, v)
	}
}

// A key known to be compromised is revoked from a position: the audit
// names the seals that no longer count.
func TestARevokedKeysSealsNoLongerCount(t *testing.T) {
	store := rotated(t)
	c, err := store.NewCommitter(ctx(t), settlement.Chain, eventstore.CommitterConfig{SealKey: thirdKey, SealEvery: sealEvery})
	if err != nil {
		t.Fatal(err)
	}
	id2 := eventstore.KeyID(secondKey.Public().(ed25519.PublicKey))
	if _, err := c.RevokeSealKey(ctx(t), eventstore.Revocation{KeyID: id2, FromChainSeq: 1, Reason: "found on a lost laptop"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	events := eventstoretest.ReadAll(t, store)
	r := auditEvents(t, events)
	v := wantCode(t, r, audit.CodeSealRevoked)
	n := sealKeys(t, events)[id2]
	if r.ViolationsTotal != 1 || n == 0 || !strings.HasPrefix(v.Found, strconv.Itoa(n)+" seals no longer count") {
		t.Fatalf("revocation of %d seals: %+v", n, r.Violations)
	}
}

// An audit saved after the first rotation and resumed remembers the
// chain's keys: the retired key's seal after the cut is still caught.
func TestAResumedAuditRemembersRetiredKeys(t *testing.T) {
	events := eventstoretest.ReadAll(t, rotated(t))
	cut := 0
	for i, ev := range events {
		if ev.Type == eventstore.SealKeyRotatedType {
			cut = i + 1
			break
		}
	}
	a := newAuditor(t)
	for _, ev := range events[:cut] {
		a.Check(ev)
	}
	r, st := saveState(t, a, t.TempDir())
	if !r.OK || len(st.Verifier.Chains) != 1 || len(st.Verifier.Chains[0].Keys) != 2 {
		t.Fatalf("state after the rotation: violations %+v, verifier %+v", r.Violations, st.Verifier)
	}
	a, err := audit.Resume(auditConfig(t), st)
	if err != nil {
		t.Fatal(err)
	}
	forged := appendForged(events, forgedSeal(t, events, operatorKey))
	for _, ev := range forged[cut:] {
		a.Check(ev)
	}
	r = a.Finish()
	if v := wantCode(t, r, audit.CodeSealKeyRetired); r.ViolationsTotal != 1 || v.Sequence != forged[len(forged)-1].Sequence {
		t.Fatalf("resumed audit: %+v", r.Violations)
	}
}
