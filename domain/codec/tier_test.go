package codec_test

import (
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/domain/codec"
)

// A payload that does not say its tier decodes to no tier at all, by the
// fast path as by the domain's: an error, never the tier whose code is
// zero.
func TestAnEventWithoutItsTierIsRefusedByBothPaths(t *testing.T) {
	const salt = `"0000000000000000000000000000000000000000000000000000000000000001"`
	for _, tc := range []struct {
		name, typ, payload string
	}{
		{"a unit without a tier", domain.TypeUnitAssigned, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","proof":{"unit":0,"salt":` + salt + `,"path":[]}}`},
		{"a unit with a null tier", domain.TypeUnitAssigned, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","proof":{"unit":0,"tier":null,"salt":` + salt + `,"path":[]}}`},
		{"a unit without a proof", domain.TypeUnitAssigned, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001"}`},
		{"a settlement without a tier", domain.TypePlaySettled, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","unit":0,"prize":"10000.00"}`},
		{"a settlement with a null tier", domain.TypePlaySettled, `{"play":"E0001-B001-U000000","player":"p1","block":"E0001-B001","unit":0,"tier":null,"prize":"10000.00"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// when the payload is decoded, by the fast path and the slow
			fast, ok := codec.FastDecodeEvent(tc.typ, []byte(tc.payload))
			e, err := domain.DecodeEvent(tc.typ, []byte(tc.payload))
			// then both refuse it
			if ok || err == nil {
				t.Fatalf("decoded: fast %+v (%v), slow %+v (%v)", fast, ok, e, err)
			}
		})
	}
}
