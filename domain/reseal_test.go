package domain

import (
	"bytes"
	"testing"
)

func TestResealSeeds(t *testing.T) {
	const keyID = "0123456789abcdef"
	sealed := []byte("sealed under the new master key")
	for _, tc := range []struct {
		name  string
		cmd   ResealSeeds
		want  []string // blocks in the event; nil: nothing recorded
		wantE error
	}{
		{"an open block", ResealSeeds{MasterKeyID: keyID, Seeds: []ResealedSeed{{Block: "E0001-B001", SealedSeed: sealed}}}, []string{"E0001-B001"}, nil},
		{"nothing to reseal", ResealSeeds{MasterKeyID: keyID}, nil, nil},
		{"an unknown block", ResealSeeds{MasterKeyID: keyID, Seeds: []ResealedSeed{{Block: "E0009-B001", SealedSeed: sealed}}}, nil, ErrInvalidRequest},
		{"a block twice", ResealSeeds{MasterKeyID: keyID, Seeds: []ResealedSeed{{Block: "E0001-B001", SealedSeed: sealed}, {Block: "E0001-B001", SealedSeed: sealed}}}, nil, ErrInvalidRequest},
		{"an empty sealed seed", ResealSeeds{MasterKeyID: keyID, Seeds: []ResealedSeed{{Block: "E0001-B001"}}}, nil, ErrInvalidRequest},
		{"a key id that is not one", ResealSeeds{MasterKeyID: "secret", Seeds: []ResealedSeed{{Block: "E0001-B001", SealedSeed: sealed}}}, nil, ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// given an open block of 1 € units
			w := funded(t)
			// when its seed is resealed
			if tc.wantE != nil {
				refused(t, w, tc.cmd, tc.wantE)
				return
			}
			evs := accepted(t, w, tc.cmd)
			// then the event names the block and the ledger holds the new sealed seed
			if tc.want == nil {
				if len(evs) != 0 {
					t.Fatalf("recorded %v", types(evs))
				}
				return
			}
			e, ok := evs[0].(*SeedsResealed)
			if len(evs) != 1 || !ok || e.MasterKeyID != keyID || len(e.Seeds) != 1 || e.Seeds[0].Block != tc.want[0] {
				t.Fatalf("events %+v", evs)
			}
			if got := w.l.Blocks["E0001-B001"].SealedSeed; !bytes.Equal(got, sealed) {
				t.Fatalf("the ledger's sealed seed %q", got)
			}
		})
	}
}
