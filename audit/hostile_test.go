package audit_test

import (
	"encoding/json"

	"testing"

	"github.com/fdj/tresor/eventstore"
)

// rechain is an insider's rewrite without a store: events (seals dropped)
// renumbered and re-hashed into one valid chain.
func rechain(events []eventstore.RecordedEvent) []eventstore.RecordedEvent {
	var out []eventstore.RecordedEvent
	var prev eventstore.Hash
	for _, ev := range events {
		if ev.Type == eventstore.SealType {
			continue
		}
		ev.Sequence = uint64(len(out) + 1)
		ev.ChainSeq = ev.Sequence
		ev.PrevHash = prev
		ev.Hash = eventstore.ComputeHash(&ev)
		prev = ev.Hash
		out = append(out, ev)
	}
	return out
}

// hostileValues replace one payload member at a time: out-of-range
// numbers, wrong types, other ids.
var hostileValues = []any{-1, 0, 4294967295, 1e18, "", "E0001-B001-U000000", nil, []any{}, 99}

// Every member of the payload of the first event of each type replaced by
// hostile values, the chain made valid again: the auditor reports, it never
// panics.
func TestHostileStreamsNeverCrashTheAuditor(t *testing.T) {
	events := rechain(played(t))
	if r := auditEvents(t, events); !r.OK {
		t.Fatalf("rechained stream: %+v", r.Violations)
	}
	caught, tried := 0, 0
	seen := map[string]bool{}
	for i, ev := range events {
		if seen[ev.Type] {
			continue
		}
		seen[ev.Type] = true
		var payload map[string]any
		if err := json.Unmarshal(ev.Payload, &payload); err != nil {
			t.Fatal(err)
		}
		for key, was := range payload {
			for _, v := range hostileValues {
				payload[key] = v
				p, err := json.Marshal(payload)
				if err != nil {
					t.Fatal(err)
				}
				tampered := append([]eventstore.RecordedEvent(nil), events...)
				tampered[i].Payload = p
				tried++
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("%s %s=%v: panic %v", ev.Type, key, v, r)
						}
					}()
					if r := auditEvents(t, rechain(tampered)); !r.OK {
						caught++
					}
				}()
			}
			payload[key] = was
		}
	}
	t.Logf("%d of %d hostile payloads reported (the others changed nothing checked: ids, keys, flags)", caught, tried)
	if caught < tried/2 {
		t.Fatalf("only %d of %d hostile payloads reported", caught, tried)
	}
}
