package domain

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"time"
)

// The ledger remembers client keys in two places, one queue in the order
// they expire: first those of the snapshot it started from (packed), read
// in place from the snapshot's bytes, oldest first; then those recorded
// since (keys and keyQueue). A start from a snapshot thus allocates
// nothing per key it remembers: it indexes them, one pass without
// allocation, and decodes one only when a command names it.

// keyKinds numbers the kinds of client key in a packed key.
var keyKinds = [...]KeyKind{KeyDeposit, KeyWithdrawal, KeyStake, KeyEmission, KeyRevocation}

// packedKeys are the keys a ledger decoded from a snapshot remembers, as
// the snapshot wrote them (packKeys): the strings they share, then the
// keys in the order they expire. Keys expire by moving head past them.
type packedKeys struct {
	strs []string
	// b holds the keys; head is the offset of the oldest not yet expired,
	// and live the number of keys from it to the end.
	b    []byte
	head int
	live int
	// base is the time (Unix ns) keys' times are written from.
	base int64
	// slots index the keys by player, kind and key: open addressing, a
	// power of two of them, each 0 (free) or the key's hash in the high
	// 32 bits and 1 + its offset in b in the low 32. An expired key's slot
	// stays, behind head: a lookup skips it.
	slots []uint64
	seed  maphash.Seed
}

// packedKey is one key of packedKeys as it is written, its strings by
// index (player: 1 + the ledger's interned player, 0 for none) and its
// client key and play in place.
type packedKey struct {
	player, kind, request   uint64
	key                     []byte
	at                      int64
	play                    []byte // when playBlock is 0
	playBlock               uint64 // 1 + the string of the play's block, 0 when play is written plainly
	playUnit                uint32
	balance                 int64
	emission, opened, throw uint64
	ban                     uint64
}

// keyReader reads a packed key's fields; its first error sticks.
type keyReader struct {
	b   []byte
	off int
	err error
}

func (r *keyReader) u() uint64 {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail()
		return 0
	}
	r.off += n
	return v
}

// i reads what binary.AppendVarint wrote: a zigzag unsigned varint.
func (r *keyReader) i() int64 {
	v := r.u()
	return int64(v>>1) ^ -int64(v&1)
}

func (r *keyReader) bytes() []byte {
	n := r.u()
	if n > uint64(len(r.b)-r.off) {
		r.fail()
		return nil
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s
}

func (r *keyReader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: keys: malformed", ErrSnapshotFormat)
	}
	r.off = len(r.b)
}

// read reads the key at r.off; r.off is then the next key's.
func (r *keyReader) read() packedKey {
	var k packedKey
	k.player, k.kind, k.key, k.request = r.u(), r.u(), r.bytes(), r.u()
	k.at = r.i()
	if k.playBlock = r.u(); k.playBlock == 0 {
		k.play = r.bytes()
	} else {
		k.playUnit = uint32(r.u())
	}
	k.balance = r.i()
	k.emission, k.opened, k.throw, k.ban = r.u(), r.u(), r.u(), r.u()
	return k
}

// slotHash places a key in the slots, from the hash of its client key
// (maphash.Bytes and maphash.String agree on the same bytes).
func slotHash(keyHash, player, kind uint64) uint64 {
	return keyHash ^ bits.RotateLeft64((player<<2|kind)*0x9e3779b97f4a7c15, 31)
}

// unpackKeys indexes the keys packKeys wrote, b, kept in place: it checks
// every key against the ledger's players and the shared strings, so that
// a lookup never meets a malformed one.
func unpackKeys(l *Ledger, b []byte) error {
	if len(b) >= 1<<32-1 {
		return fmt.Errorf("%w: keys: %d bytes", ErrSnapshotFormat, len(b))
	}
	r := keyReader{b: b}
	nstrs := r.u()
	if nstrs > uint64(len(b)) {
		r.fail()
	}
	p := packedKeys{strs: make([]string, 0, nstrs), seed: maphash.MakeSeed()}
	for range nstrs {
		p.strs = append(p.strs, string(r.bytes()))
	}
	p.base = r.i()
	n := r.u()
	if n > uint64(len(b)) {
		r.fail()
	}
	p.head, p.live = r.off, int(n)
	p.slots = make([]uint64, max(1, 1<<bits.Len64(n+n/2)))
	mask := uint64(len(p.slots) - 1)
	strs, players := uint64(len(p.strs)), uint64(len(l.players))
	for range n {
		if r.err != nil {
			break
		}
		off := r.off
		k := r.read()
		if k.player > players || k.kind >= uint64(len(keyKinds)) || k.request >= strs || k.playBlock > strs ||
			k.emission >= strs || k.opened >= strs || k.ban >= strs {
			r.fail()
			break
		}
		h := slotHash(maphash.Bytes(p.seed, k.key), k.player, k.kind)
		i := h & mask
		for p.slots[i] != 0 {
			i = (i + 1) & mask
		}
		p.slots[i] = h&^(1<<32-1) | uint64(off+1)
	}
	if r.err == nil && r.off != len(b) {
		r.err = fmt.Errorf("%w: keys: %d bytes after the last", ErrSnapshotFormat, len(b)-r.off)
	}
	if r.err != nil {
		return r.err
	}
	p.b = b
	l.packed = p
	return nil
}

// find returns the offset of a key not yet expired, or -1.
func (p *packedKeys) find(l *Ledger, player string, kind KeyKind, key string) int {
	if p.live == 0 {
		return -1
	}
	pi := uint64(0)
	if player != "" {
		i, ok := l.playerIdx[player]
		if !ok {
			return -1
		}
		pi = uint64(i) + 1
	}
	ki := uint64(0)
	for ki < uint64(len(keyKinds)) && keyKinds[ki] != kind {
		ki++
	}
	h := slotHash(maphash.String(p.seed, key), pi, ki)
	mask := uint64(len(p.slots) - 1)
	for i := h & mask; p.slots[i] != 0; i = (i + 1) & mask {
		s := p.slots[i]
		off := int(s&(1<<32-1)) - 1
		if s&^(1<<32-1) != h&^(1<<32-1) || off < p.head {
			continue
		}
		r := keyReader{b: p.b, off: off}
		k := r.read()
		if k.player == pi && k.kind == ki && string(k.key) == key {
			return off
		}
	}
	return -1
}

// record decodes the key at off into what a retry is answered with.
func (p *packedKeys) record(l *Ledger, off int) (idemKey, *KeyRecord) {
	r := keyReader{b: p.b, off: off}
	k := r.read()
	id := idemKey{kind: keyKinds[k.kind], key: string(k.key)}
	if k.player > 0 {
		id.player = l.players[k.player-1]
	}
	rec := &KeyRecord{Request: p.strs[k.request], At: time.Unix(0, p.base+k.at).UTC(), Balance: Amount(k.balance),
		Emission: p.strs[k.emission], OpenedBlock: p.strs[k.opened], Throw: int(k.throw), Ban: p.strs[k.ban]}
	if k.playBlock == 0 {
		rec.Play = string(k.play)
	} else {
		rec.Play = PlayID(p.strs[k.playBlock-1], k.playUnit)
	}
	return id, rec
}

// expire moves head past the keys recorded at or before cut (Unix ns), in
// order, up to the first recorded after it.
func (p *packedKeys) expire(cut int64) {
	for p.live > 0 {
		r := keyReader{b: p.b, off: p.head}
		if k := r.read(); p.base+k.at > cut {
			return
		}
		p.head, p.live = r.off, p.live-1
	}
	// None left: the snapshot's bytes can go.
	*p = packedKeys{}
}

// Key returns what the ledger remembers of a client key of a player and a
// kind of command, or nil.
func (l *Ledger) Key(player string, kind KeyKind, key string) *KeyRecord {
	if r := l.keys[idemKey{player, kind, key}]; r != nil {
		return r
	}
	if off := l.packed.find(l, player, kind, key); off >= 0 {
		_, r := l.packed.record(l, off)
		return r
	}
	return nil
}

// remember records a client key; keys older than the window are forgotten
// in the order they came.
func (l *Ledger) remember(player string, kind KeyKind, key string, r *KeyRecord) {
	if key == "" {
		return
	}
	k := idemKey{player, kind, key}
	l.keys[k] = r
	l.keyQueue = append(l.keyQueue, k)
}

// expireKeys forgets keys recorded more than the window before t: the
// snapshot's first, then, once none of them is left, those recorded since.
func (l *Ledger) expireKeys(t time.Time) {
	cut := t.Add(-l.window())
	l.packed.expire(cut.UnixNano())
	if l.packed.live > 0 {
		return
	}
	i := 0
	for i < len(l.keyQueue) {
		r := l.keys[l.keyQueue[i]]
		if r != nil && r.At.After(cut) {
			break
		}
		delete(l.keys, l.keyQueue[i])
		i++
	}
	if i > 0 {
		l.keyQueue = append(l.keyQueue[:0], l.keyQueue[i:]...)
	}
}

// eachKey calls f with every key remembered, in the order they expire.
func (l *Ledger) eachKey(f func(idemKey, *KeyRecord)) {
	r := keyReader{b: l.packed.b, off: l.packed.head}
	for range l.packed.live {
		off := r.off
		r.read()
		f(l.packed.record(l, off))
	}
	for _, k := range l.keyQueue {
		if rec := l.keys[k]; rec != nil {
			f(k, rec)
		}
	}
}

// packKeys appends to e.out the keys still remembered, in the order they
// expire: the strings they share (requests, emissions, blocks, bans), the
// time the keys' times are written from, their count, then for each its
// player (1 + its interned index, 0 for none), kind (its index in
// keyKinds), client key, request, time, play (1 + its block's string then
// its unit, or 0 then the id as it is, for an id PlayID did not write),
// balance, emission, opened block, throw and ban. Strings are written as
// their index, in the order first met; client keys, unique, as they are.
//
// The keys of the snapshot the ledger started from are copied field by
// field from their packed form, never decoded into records: the same
// bytes as the records would give (their strings interned in the same
// order), without an allocation per key.
func (e *LedgerEncoder) packKeys(l *Ledger) error {
	if e.strs == nil {
		e.strs = map[string]uint64{}
	}
	clear(e.strs)
	e.table, e.body, e.keys, e.keysBase = e.table[:0], e.body[:0], 0, 0
	e.remap = slices.Grow(e.remap[:0], len(l.packed.strs))[:len(l.packed.strs)]
	clear(e.remap)
	e.copyPackedKeys(&l.packed)
	if err := e.addKeys(l); err != nil {
		return err
	}
	e.out = binary.AppendUvarint(e.out, uint64(len(e.strs)))
	e.out = append(e.out, e.table...)
	e.out = binary.AppendVarint(e.out, e.keysBase)
	e.out = binary.AppendUvarint(e.out, uint64(e.keys))
	e.out = append(e.out, e.body...)
	return nil
}

// copyPackedKeys writes the keys still live of the snapshot the ledger
// started from, field by field.
func (e *LedgerEncoder) copyPackedKeys(p *packedKeys) {
	r := keyReader{b: p.b, off: p.head}
	for i := range p.live {
		e.step(i)
		k := r.read()
		e.u(k.player)
		e.u(k.kind)
		plain(e, k.key)
		e.u(e.packedStr(p, k.request))
		e.at(p.base + k.at)
		switch {
		case k.playBlock > 0 && p.strs[k.playBlock-1] != "" && k.playUnit <= playUnitMax:
			e.u(e.packedStr(p, k.playBlock-1) + 1)
			e.u(uint64(k.playUnit))
		case k.playBlock > 0:
			// An id ParsePlayID would not read back: as it is.
			e.u(0)
			plain(e, PlayID(p.strs[k.playBlock-1], k.playUnit))
		default:
			e.play(string(k.play))
		}
		e.body = binary.AppendVarint(e.body, k.balance)
		e.u(e.packedStr(p, k.emission))
		e.u(e.packedStr(p, k.opened))
		e.u(k.throw)
		e.u(e.packedStr(p, k.ban))
	}
}

// addKeys writes the keys remembered since the ledger started, in the
// order they expire.
func (e *LedgerEncoder) addKeys(l *Ledger) error {
	for i, k := range l.keyQueue {
		r := l.keys[k]
		if r == nil {
			continue
		}
		e.step(i)
		player, ok := uint64(0), k.player == ""
		if !ok {
			var idx uint32
			idx, ok = l.playerIdx[k.player]
			player = uint64(idx) + 1
		}
		kind := uint64(0)
		for kind < uint64(len(keyKinds)) && keyKinds[kind] != k.kind {
			kind++
		}
		if !ok || kind == uint64(len(keyKinds)) {
			return fmt.Errorf("encode ledger: key %q of %s %q: unknown player or kind", k.key, k.kind, k.player)
		}
		e.u(player)
		e.u(kind)
		plain(e, k.key)
		e.u(e.str(r.Request))
		e.at(r.At.UnixNano())
		e.play(r.Play)
		e.body = binary.AppendVarint(e.body, int64(r.Balance))
		e.u(e.str(r.Emission))
		e.u(e.str(r.OpenedBlock))
		e.u(uint64(r.Throw))
		e.u(e.str(r.Ban))
	}
	return nil
}

// str interns a shared string of the keys and returns its index.
func (e *LedgerEncoder) str(s string) uint64 {
	i, ok := e.strs[s]
	if !ok {
		i = uint64(len(e.strs))
		e.strs[s] = i
		e.table = binary.AppendUvarint(e.table, uint64(len(s)))
		e.table = append(e.table, s...)
	}
	return i
}

// packedStr interns the string i of the packed keys p, once.
func (e *LedgerEncoder) packedStr(p *packedKeys, i uint64) uint64 {
	if e.remap[i] == 0 {
		e.remap[i] = e.str(p.strs[i]) + 1
	}
	return e.remap[i] - 1
}

// plain writes bytes or a string as they are, after their length.
func plain[T string | []byte](e *LedgerEncoder, b T) {
	e.body = binary.AppendUvarint(e.body, uint64(len(b)))
	e.body = append(e.body, b...)
}

func (e *LedgerEncoder) u(v uint64) { e.body = binary.AppendUvarint(e.body, v) }

// at writes a key's time, the first key's being the base.
func (e *LedgerEncoder) at(t int64) {
	if e.keys == 0 {
		e.keysBase = t
	}
	e.keys++
	e.body = binary.AppendVarint(e.body, t-e.keysBase)
}

// playUnitMax is the largest unit PlayID writes in the six digits
// ParsePlayID reads back.
const playUnitMax = 999_999

// play writes a key's play: an id ParsePlayID reads (six digits after the
// last -U) is the one PlayID writes of its block and unit.
func (e *LedgerEncoder) play(id string) {
	if block, unit, ok := ParsePlayID(id); ok {
		e.body = binary.AppendUvarint(e.body, e.str(block)+1)
		e.body = binary.AppendUvarint(e.body, uint64(unit))
		return
	}
	e.body = binary.AppendUvarint(e.body, 0)
	e.body = binary.AppendUvarint(e.body, uint64(len(id)))
	e.body = append(e.body, id...)
}
