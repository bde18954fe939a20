package codec_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/domain/codec"
	"github.com/fdj/tresor/projections/projectionstest"
)

// The fast decoder gives exactly the event domain.DecodeEvent gives for
// every payload it accepts: the payloads of a real stream, and each of
// them with every byte replaced, dropped or doubled.
func TestFastDecodeAgreesWithTheDomain(t *testing.T) {
	w := projectionstest.Standard(t, projectionstest.SmallRules(t))
	seen := map[string]int{}
	fast := 0
	for _, env := range w.Events {
		if env.Event == nil {
			continue
		}
		typ := env.Event.EventType()
		payload, err := json.Marshal(env.Event)
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := codec.FastDecodeEvent(typ, payload); ok {
			fast++
			if !reflect.DeepEqual(e, env.Event) {
				t.Fatalf("%s %s: fast %+v, want %+v", typ, payload, e, env.Event)
			}
		}
		// Mutate the first two events of each type byte by byte.
		if seen[typ]++; seen[typ] > 2 {
			continue
		}
		for i := range payload {
			for _, c := range []byte{'0', '9', '"', '\\', '-', '.', 'e', ' ', 'x', '}', ',', 0x80} {
				for _, p := range [][]byte{
					append(append(append([]byte{}, payload[:i]...), c), payload[i+1:]...),
					append(append(append([]byte{}, payload[:i]...), c), payload[i:]...),
					append(append([]byte{}, payload[:i]...), payload[i+1:]...),
				} {
					got, ok := codec.FastDecodeEvent(typ, p)
					if !ok {
						continue
					}
					want, err := domain.DecodeEvent(typ, p)
					if err != nil || !reflect.DeepEqual(got, want) {
						t.Fatalf("%s %s: fast %+v, domain %+v, %v", typ, p, got, want, err)
					}
				}
			}
		}
	}
	if fast < len(w.Events)/2 {
		t.Fatalf("only %d of %d payloads took the fast path", fast, len(w.Events))
	}
}

// FuzzFastDecode looks for a payload the fast decoder accepts and reads
// otherwise than the domain (go test -fuzz FuzzFastDecode ./domain).
func FuzzFastDecode(f *testing.F) {
	for _, env := range projectionstest.Standard(f, projectionstest.SmallRules(f)).Events {
		if env.Event == nil {
			continue
		}
		if p, err := json.Marshal(env.Event); err == nil {
			f.Add(env.Event.EventType(), p)
		}
	}
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		got, ok := codec.FastDecodeEvent(typ, payload)
		if !ok {
			return
		}
		want, err := domain.DecodeEvent(typ, payload)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %s: fast %+v, domain %+v, %v", typ, payload, got, want, err)
		}
	})
}
