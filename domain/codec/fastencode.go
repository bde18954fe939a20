package codec

import (
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/fdj/tresor/domain"
)

// AppendEventJSON appends to b exactly the bytes json.Marshal(e) gives
// (and its error, b unchanged, when it fails). The events a play is made
// of (StakePlaced, UnitAssigned, ThrowMade, PlaySettled, PrizePaid: seven
// of every eight events of a busy stream) are written by hand, with no
// reflection and no allocation beyond b's growth, when every string in
// them is plain (printable ASCII that JSON does not escape); the others,
// and any with a string to escape or a value json.Marshal refuses, go
// through json.Marshal. The stored payloads are therefore the same bytes
// as before (TestAppendEventJSONIsJSONMarshal), and FastDecodeEvent reads
// them back. json.Marshal spent most of the writer's encoding time in
// reflection and in re-validating each nested MarshalJSON's output.
func AppendEventJSON(b []byte, e domain.Event) ([]byte, error) {
	w := jsonWriter{b: b, ok: true}
	switch e := e.(type) {
	case *domain.StakePlaced:
		w.playHead(e.Play, e.Player, e.Block)
		w.amount(`,"stake":`, e.Stake)
		w.lit(`,"idempotency_key":`)
		w.str(e.Key)
		w.amount(`,"balance_after":`, e.Balance)
		w.lit(`}`)
	case *domain.UnitAssigned:
		w.playHead(e.Play, e.Player, e.Block)
		w.lit(`,"proof":{"unit":`)
		w.uint(uint64(e.Proof.Unit))
		w.lit(`,"tier":`)
		w.tier(e.Proof.Tier)
		w.lit(`,"salt":`)
		w.hash(&e.Proof.Salt)
		w.lit(`,"path":[`)
		for i := range e.Proof.Path {
			if i > 0 {
				w.lit(`,`)
			}
			w.hash(&e.Proof.Path[i])
		}
		w.lit(`]}}`)
	case *domain.ThrowMade:
		w.lit(`{"play":`)
		w.str(e.Play)
		w.lit(`,"player":`)
		w.str(e.Player)
		w.lit(`,"throw":`)
		w.int(e.Throw)
		w.lit(`,"result":{"direction":`)
		w.ok = w.ok && e.Result.Direction.Valid()
		w.str(e.Result.Direction.String())
		w.lit(`,"steps":`)
		w.int(e.Result.Steps)
		w.lit(`,"pawn":{"row":`)
		w.int(e.Result.Pawn.Row)
		w.lit(`,"col":`)
		w.int(e.Result.Pawn.Col)
		w.lit(`},"chest":`)
		if e.Result.Chest == domain.NoChest {
			w.lit(`null,"symbol":null`)
		} else {
			w.int(e.Result.Chest)
			w.lit(`,"symbol":`)
			w.ok = w.ok && e.Result.Symbol.Known()
			w.str(e.Result.Symbol.String())
		}
		w.lit(`}`)
		w.bySystem(e.BySystem)
	case *domain.PlaySettled:
		w.playHead(e.Play, e.Player, e.Block)
		w.lit(`,"unit":`)
		w.uint(uint64(e.Unit))
		w.lit(`,"tier":`)
		w.tier(e.Tier)
		w.amount(`,"prize":`, e.Prize)
		w.bySystem(e.BySystem)
	case *domain.PrizePaid:
		w.playHead(e.Play, e.Player, e.Block)
		w.amount(`,"amount":`, e.Amount)
		w.amount(`,"balance_after":`, e.Balance)
		w.lit(`}`)
	default:
		w.ok = false
	}
	if w.ok {
		return w.b, nil
	}
	j, err := json.Marshal(e)
	if err != nil {
		return b, err
	}
	return append(b, j...), nil
}

// jsonWriter appends one payload; a value it cannot write as json.Marshal
// would clears ok, and the caller starts over with json.Marshal.
type jsonWriter struct {
	b  []byte
	ok bool
}

func (w *jsonWriter) lit(l string) { w.b = append(w.b, l...) }

// str writes a string that needs no escaping, and refuses the others:
// json.Marshal escapes quotes, backslashes, control characters, <, > and
// & (HTML-safe), and checks UTF-8.
func (w *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			w.ok = false
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *jsonWriter) int(n int)     { w.b = strconv.AppendInt(w.b, int64(n), 10) }
func (w *jsonWriter) uint(n uint64) { w.b = strconv.AppendUint(w.b, n, 10) }

// amount writes a member's key (with its comma) and an amount as a string.
func (w *jsonWriter) amount(key string, a domain.Amount) {
	w.b = append(w.b, key...)
	w.b = append(w.b, '"')
	w.b, _ = a.AppendText(w.b)
	w.b = append(w.b, '"')
}

func (w *jsonWriter) tier(t domain.Tier) {
	w.ok = w.ok && t.Valid()
	if w.ok {
		w.str(t.ID())
	}
}

func (w *jsonWriter) hash(h *[32]byte) {
	w.b = append(w.b, '"')
	w.b = hex.AppendEncode(w.b, h[:])
	w.b = append(w.b, '"')
}

// playHead writes {"play":…,"player":…,"block":… , the head shared by the
// events of a play.
func (w *jsonWriter) playHead(play, player, block string) {
	w.lit(`{"play":`)
	w.str(play)
	w.lit(`,"player":`)
	w.str(player)
	w.lit(`,"block":`)
	w.str(block)
}

// bySystem writes the optional by_system and closes the object.
func (w *jsonWriter) bySystem(v bool) {
	if v {
		w.lit(`,"by_system":true`)
	}
	w.lit(`}`)
}
