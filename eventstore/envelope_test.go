package eventstore_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// vectorEvent is the worked example of docs/events.md.
func vectorEvent() eventstore.RecordedEvent {
	return eventstore.RecordedEvent{
		Event: eventstore.Event{ID: "ev-1", Type: "StakePlaced", SchemaVersion: 1,
			Aggregate: eventstore.Aggregate{Kind: "account", ID: "p42"}, CorrelationID: "c-9",
			Payload: json.RawMessage(`{"cents":200}`)},
		Chain: "s0", ChainSeq: 1, RecordedAt: time.Date(2026, 12, 2, 17, 0, 0, 123456789, time.UTC),
	}
}

// TestCanonicalVector pins the canonical encoding and hash quoted in
// docs/events.md: changing either breaks every stored chain.
func TestCanonicalVector(t *testing.T) {
	ev := vectorEvent()
	enc := hex.EncodeToString(eventstore.AppendCanonical(nil, &ev))
	const wantEnc = "0000000f 747265736f722d6576656e742d7631" + // "tresor-event-v1"
		"00000004 65762d31" + // id "ev-1"
		"0000000b 5374616b65506c61636564" + // type "StakePlaced"
		"00000008 0000000000000001" + // schema version 1
		"00000002 7330" + // chain "s0"
		"00000008 0000000000000001" + // chain_seq 1
		"00000007 6163636f756e74" + // aggregate kind "account"
		"00000003 703432" + // aggregate id "p42"
		"00000008 18ed7e6557f96d15" + // recorded_at 2026-12-02T17:00:00.123456789Z in Unix ns
		"00000003 632d39" + // correlation id "c-9"
		"00000000" + // causation id ""
		"00000020 0000000000000000000000000000000000000000000000000000000000000000" + // prev_hash (first event)
		"0000000d 7b2263656e7473223a3230307d" // payload {"cents":200}
	if enc != compact(wantEnc) {
		t.Fatalf("canonical encoding\n got %s\nwant %s", enc, compact(wantEnc))
	}
	const wantHash = "1379bf09e4152b088cd137ccfe66eba917bf1fcc6646e1bab16a60ab01f5c23c"
	if got := eventstore.ComputeHash(&ev).String(); got != wantHash {
		t.Fatalf("hash %s, want %s", got, wantHash)
	}
	// The append marker is transport metadata, outside the hash: the same
	// event in the middle of an append hashes the same.
	ev.AppendRemaining = 2
	if got := eventstore.ComputeHash(&ev).String(); got != wantHash {
		t.Fatalf("hash of the event followed by 2 of its append %s, want %s", got, wantHash)
	}
}

func compact(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			out = append(out, s[i])
		}
	}
	return string(out)
}

// TestSealSignedBytes checks that a seal verifies with its key only.
func TestSealSignedBytes(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	s := eventstore.Seal{Chain: "s0", Sequence: 7, ChainSeq: 5, Hash: vectorEvent().PrevHash.String()}
	msg, err := s.SignedBytes()
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(pub, msg, ed25519.Sign(key, msg)) {
		t.Fatal("seal signature does not verify")
	}
}
