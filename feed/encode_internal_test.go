package feed

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
)

// The hand-written payloads are byte for byte what encoding/json gives
// (a --from replay must give the same bytes as the first run), and the
// ordinary ones take the hand-written path.
func TestPayloadsAreJSONMarshal(t *testing.T) {
	at := time.Date(2026, 12, 3, 19, 20, 27, 603100589, time.UTC)
	h := Header{Kind: KindPostings, Seq: 130, EventID: "VHiU4SkkKLZxqj2ugRWM0w", EventType: domain.TypeStakePlaced, At: at}
	lines := []Line{{Account: "player.p-1", Side: Debit, Amount: 100}, {Account: "block.E0001-B001.sales", Side: Credit, Amount: 100}}
	ordinary := []payload{
		&Postings{Header: h, Player: "p-1", Play: "E0001-B001-U000001", Block: "E0001-B001", Lines: lines},
		&Postings{Header: Header{Kind: KindPostings, Seq: math.MaxUint64, EventID: "x", EventType: domain.TypeFundsDeposited, At: at.Truncate(time.Second)},
			Player: "p-2", Lines: []Line{{Account: "house.cash", Side: Debit, Amount: domain.AmountMax}, {Account: "player.p-2", Side: Credit, Amount: 5}}},
		&Postings{Header: Header{Kind: KindPostings, Seq: 7, EventID: "a", EventType: domain.TypeAdjustmentApproved, At: at},
			Player: "p-3", Adjustment: "A12", Lines: []Line{{Account: "house.goodwill", Side: Debit, Amount: 500}, {Account: "player.p-3", Side: Credit, Amount: 500}}},
		&PlaySettled{Header: Header{Kind: KindPlaySettled, Seq: 1, EventID: "e", EventType: domain.TypePlaySettled, At: at.Add(time.Millisecond)},
			Play: "E0001-B001-U000009", Player: "p", Block: "E0001-B001", Unit: 9, Stake: 50, Tier: domain.ChandelierX1, Prize: 50},
		&PlaySettled{Header: Header{Kind: KindPlaySettled, EventID: "e", At: time.Time{}}, Unit: math.MaxUint32, Tier: domain.TierNone, BySystem: true},
	}
	unusual := []payload{
		&Postings{Header: h, Player: "p<1>&", Lines: lines},
		&Postings{Header: h, Player: "joueur é", Lines: lines},
		&Postings{Header: h, Player: "q\"uote\\", Lines: lines},
		&Postings{Header: h, Player: "tab\t", Lines: lines},
		&Postings{Header: h, Player: "p", Adjustment: "A<1>", Lines: lines},
		&Postings{Header: h},
		&Postings{Header: Header{At: time.Date(10_000, 1, 1, 0, 0, 0, 0, time.UTC)}, Lines: lines},
		&PlaySettled{Header: h, Tier: domain.TierCount},
		&PlaySettled{Header: h, Block: "\x7f"},
	}
	for i, p := range append(ordinary, unusual...) {
		want, werr := json.Marshal(p)
		got, ok := p.appendJSON([]byte("prefix"))
		switch {
		case i < len(ordinary) && !ok:
			t.Errorf("%s: not written by hand", want)
		case ok && (werr != nil || string(got) != "prefix"+string(want)):
			t.Errorf("by hand %s\njson    %s (%v)", got, want, werr)
		}
		b := &builder{}
		body, err := b.encode(p)
		if (err != nil) != (werr != nil) || string(body) != string(want) {
			t.Errorf("encode %s (%v), want %s (%v)", body, err, want, werr)
		}
	}
}

// Payloads share a slab, and one never runs into the next.
func TestPayloadsDoNotOverlap(t *testing.T) {
	b := &builder{}
	var bodies [][]byte
	var want []string
	for i := range 1000 {
		p := &PlaySettled{Header: Header{Kind: KindPlaySettled, Seq: uint64(i), EventID: "e", At: time.Unix(int64(i), 0).UTC()},
			Play: "E0001-B001-U000009", Player: "p", Block: "E0001-B001", Unit: uint32(i), Tier: domain.TierNone}
		body, err := b.encode(p)
		if err != nil {
			t.Fatal(err)
		}
		bodies, want = append(bodies, body), append(want, string(body))
	}
	for i := range bodies {
		bodies[i] = append(bodies[i], "garbage"...) // must not reach the next payload
	}
	for i := range bodies {
		if got := string(bodies[i][:len(want[i])]); got != want[i] {
			t.Fatalf("payload %d became %s, want %s", i, got, want[i])
		}
	}
}
