package codec_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/domain/codec"
	"github.com/fdj/tresor/projections/projectionstest"
)

// checkAppendEventJSON checks that AppendEventJSON appends json.Marshal's
// bytes after what b holds, or fails as it does leaving b as it was.
func checkAppendEventJSON(t *testing.T, e domain.Event) (fast bool) {
	t.Helper()
	want, wantErr := json.Marshal(e)
	prefix := []byte("prefix")
	got, err := codec.AppendEventJSON(prefix, e)
	if (err != nil) != (wantErr != nil) || !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len(prefix):], want) {
		t.Fatalf("%T %+v:\n got %s (%v)\nwant %s (%v)", e, e, got, err, want, wantErr)
	}
	return wantErr == nil
}

// The payloads of a real stream are json.Marshal's, byte for byte.
func TestAppendEventJSONIsJSONMarshal(t *testing.T) {
	w := projectionstest.Standard(t, projectionstest.SmallRules(t))
	types := map[string]int{}
	for _, env := range w.Events {
		if env.Event != nil {
			checkAppendEventJSON(t, env.Event)
			types[env.Event.EventType()]++
		}
	}
	for _, typ := range []string{domain.TypeStakePlaced, domain.TypeUnitAssigned, domain.TypeThrowMade, domain.TypePlaySettled, domain.TypePrizePaid} {
		if types[typ] == 0 {
			t.Fatalf("the stream has no %s: %v", typ, types)
		}
	}
}

// Property: the play events of a real stream, each randomly altered
// (strings JSON must escape or that are not UTF-8, extreme numbers and
// amounts, invalid tiers, directions and symbols, no chest, empty or nil
// paths, by_system), still encode exactly as json.Marshal encodes them.
func TestAppendEventJSONAlteredEvents(t *testing.T) {
	w := projectionstest.Standard(t, projectionstest.SmallRules(t))
	var hot []domain.Event
	for _, env := range w.Events {
		switch env.Event.(type) {
		case *domain.StakePlaced, *domain.UnitAssigned, *domain.ThrowMade, *domain.PlaySettled, *domain.PrizePaid:
			hot = append(hot, env.Event)
		}
	}
	r := rand.New(rand.NewPCG(15, 2026))
	const n = 15_000
	errs := 0
	for range n {
		if !checkAppendEventJSON(t, alter(r, hot[r.IntN(len(hot))])) {
			errs++
		}
	}
	// The alterations must leave most events encodable, or the fast path
	// would hardly be exercised.
	if errs > n/4 {
		t.Fatalf("%d of %d altered events fail to encode", errs, n)
	}
}

// alter returns a copy of a play event with some of its fields changed at
// random.
func alter(r *rand.Rand, e domain.Event) domain.Event {
	str := func(s string) string {
		if r.IntN(3) > 0 {
			return s
		}
		pieces := []string{"", "a", "Z-9_", "\"", "\\", "<", ">", "&", "\n", "\x00", "\x7f", "é", "\u2028", "\xff", " ", "/", "'"}
		out := ""
		for range r.IntN(4) {
			out += pieces[r.IntN(len(pieces))]
		}
		return s + out
	}
	num := func(v int) int {
		switch r.IntN(6) {
		case 0:
			return -v
		case 1:
			return int(r.Int64()) - int(r.Int64())
		default:
			return v
		}
	}
	amount := func(a domain.Amount) domain.Amount {
		switch r.IntN(6) {
		case 0:
			return -a
		case 1:
			return domain.Amount(r.Int64() - r.Int64())
		case 2:
			return domain.Amount(r.IntN(1000) - 500)
		default:
			return a
		}
	}
	tier := func(t domain.Tier) domain.Tier {
		if r.IntN(8) == 0 {
			return domain.Tier(r.IntN(256))
		}
		return t
	}
	switch e := e.(type) {
	case *domain.StakePlaced:
		c := *e
		c.Play, c.Player, c.Block, c.Key = str(c.Play), str(c.Player), str(c.Block), str(c.Key)
		c.Stake, c.Balance = amount(c.Stake), amount(c.Balance)
		return &c
	case *domain.UnitAssigned:
		c := *e
		c.Play, c.Player, c.Block = str(c.Play), str(c.Player), str(c.Block)
		c.Proof.Unit = uint32(num(int(c.Proof.Unit)))
		c.Proof.Tier = tier(c.Proof.Tier)
		c.Proof.Salt[r.IntN(32)] = byte(r.IntN(256))
		switch r.IntN(5) {
		case 0:
			c.Proof.Path = nil
		case 1:
			c.Proof.Path = [][32]byte{}
		case 2:
			c.Proof.Path = c.Proof.Path[:r.IntN(len(c.Proof.Path)+1)]
		}
		return &c
	case *domain.ThrowMade:
		c := *e
		c.Play, c.Player = str(c.Play), str(c.Player)
		c.Throw, c.Result.Steps = num(c.Throw), num(c.Result.Steps)
		c.Result.Pawn.Row, c.Result.Pawn.Col = num(c.Result.Pawn.Row), num(c.Result.Pawn.Col)
		if r.IntN(8) == 0 {
			c.Result.Direction = domain.Direction(r.IntN(256))
		}
		switch r.IntN(4) {
		case 0:
			c.Result.Chest = domain.NoChest
		case 1:
			c.Result.Chest, c.Result.Symbol = num(r.IntN(domain.ChestCount)), domain.Symbol(r.IntN(7))
		}
		c.BySystem = r.IntN(2) == 0
		return &c
	case *domain.PlaySettled:
		c := *e
		c.Play, c.Player, c.Block = str(c.Play), str(c.Player), str(c.Block)
		c.Unit = uint32(num(int(c.Unit)))
		c.Tier, c.Prize = tier(c.Tier), amount(c.Prize)
		c.BySystem = r.IntN(2) == 0
		return &c
	case *domain.PrizePaid:
		c := *e
		c.Play, c.Player, c.Block = str(c.Play), str(c.Player), str(c.Block)
		c.Amount, c.Balance = amount(c.Amount), amount(c.Balance)
		return &c
	}
	panic("not a play event")
}

func BenchmarkAppendEventJSON(b *testing.B) {
	var events []domain.Event
	for _, env := range projectionstest.Standard(b, projectionstest.SmallRules(b)).Events {
		if env.Event != nil {
			events = append(events, env.Event)
		}
	}
	b.Run("json.Marshal", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := json.Marshal(events[i%len(events)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendEventJSON", func(b *testing.B) {
		var buf []byte
		for i := 0; b.Loop(); i++ {
			var err error
			if buf, err = codec.AppendEventJSON(buf[:0], events[i%len(events)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
