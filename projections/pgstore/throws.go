package pgstore

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
)

// throwSize is the length of one throw in plays.throws. A fixed binary
// layout rather than JSON: appending a throw is a bytea concatenation and
// costs PostgreSQL no parsing, which is a third of a batch's time with
// jsonb. Layout: throw number (1 byte), by_system (1), time as Unix
// microseconds (8, big-endian), direction code (1), counter (1), pawn row
// (1), pawn column (1), chest index (1, 255 when none), symbol code (1).
const throwSize = 16

// noChestByte encodes domain.NoChest.
const noChestByte = 0xff

func encodeThrows(ts []projections.Throw) ([]byte, error) {
	out := make([]byte, 0, throwSize*len(ts))
	for _, t := range ts {
		r := t.Result
		if t.Throw < 1 || t.Throw > domain.ThrowCount || !r.Direction.Valid() || r.Steps < 0 || r.Steps > 255 ||
			!r.Pawn.OnMap() || r.Chest < domain.NoChest || r.Chest >= domain.ChestCount {
			return nil, fmt.Errorf("%w: throw %d %+v does not fit the throw encoding", projections.ErrInvalid, t.Throw, r)
		}
		chest := byte(noChestByte)
		if r.Chest != domain.NoChest {
			chest = byte(r.Chest)
		}
		var by byte
		if t.BySystem {
			by = 1
		}
		out = append(out, byte(t.Throw), by)
		out = binary.BigEndian.AppendUint64(out, uint64(t.At.UnixMicro()))
		out = append(out, byte(r.Direction), byte(r.Steps), byte(r.Pawn.Row), byte(r.Pawn.Col), chest, byte(r.Symbol))
	}
	return out, nil
}

func decodeThrows(b []byte) ([]projections.Throw, error) {
	if len(b)%throwSize != 0 {
		return nil, fmt.Errorf("throws: %d bytes is not a whole number of %d-byte throws", len(b), throwSize)
	}
	out := make([]projections.Throw, len(b)/throwSize)
	for i := range out {
		x := b[i*throwSize:]
		chest := int(x[14])
		if x[14] == noChestByte {
			chest = domain.NoChest
		}
		out[i] = projections.Throw{
			Throw: int(x[0]), BySystem: x[1] == 1,
			At: time.UnixMicro(int64(binary.BigEndian.Uint64(x[2:10]))).UTC(),
			Result: domain.ThrowResult{Direction: domain.Direction(x[10]), Steps: int(x[11]),
				Pawn: domain.Cell{Row: int(x[12]), Col: int(x[13])}, Chest: chest, Symbol: domain.Symbol(x[15])},
		}
	}
	return out, nil
}
