package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// LedgerFormatVersion is the version of EncodeLedger's format
// (docs/snapshots.md). A change to what the ledger holds or how it is
// written takes a new version: DecodeLedger refuses every other, and the
// writer then replays the stream, as it would without a snapshot.
//
// Version 2 packed the idempotency keys in binary (Keys): one per stake in
// the last 48 hours, they were most of version 1's bytes. Version 3 writes
// them after the JSON, raw, indexable in place (packKeys), so that a
// decode allocates nothing per key. Version 4 writes a play's unit as one
// object, null for a play whose UnitAssigned the ledger does not hold:
// version 3 wrote such a play as unit 0 of the tier whose code is zero,
// which a decode could not tell from a real one. Version 5 adds the
// suspensions of sales in force, which decide whether a stake is taken;
// version 6 each account's closure, which decides whether it moves;
// version 7 the adjustments pending or recently decided, and the settings'
// expiry of adjustments; version 8 the keys of token revocations (a fifth
// kind of key); version 9 the erasure of each account's personal data;
// version 10 the erasures pending or recently decided.
const LedgerFormatVersion = 10

// ErrSnapshotFormat is returned by DecodeLedger for an encoding it cannot
// trust: another format version, another rule set, or bytes that do not
// decode.
var ErrSnapshotFormat = errors.New("ledger snapshot")

// RuleSetID names a rule set in a snapshot: its version and a hash of all
// its values, so that a snapshot of blocks of 12 units is never loaded
// under the rules of 450 000, even when both call themselves 2015-07-13.
func RuleSetID(r *RuleSet) string {
	b, err := json.Marshal(r)
	if err != nil {
		// A rule set is plain values: it always encodes.
		panic(fmt.Sprintf("encode rule set: %v", err))
	}
	h := sha256.Sum256(b)
	return r.Version + "-" + hex.EncodeToString(h[:8])
}

// ledgerJSON is the encoded ledger: every field of Ledger that a decision
// depends on, in a deterministic order (slices sorted by id, keys in the
// order they expire). Decks and prepared blocks are not in it: they hold
// seeds, and the writer rebuilds them from the sealed seeds of the blocks.
type ledgerJSON struct {
	ledgerHead
	Accounts   []accountJSON   `json:"accounts"`
	Emissions  []Emission      `json:"emissions"`
	Blocks     []blockJSON     `json:"blocks"`
	OpenBlocks []openBlockJSON `json:"open_blocks"`
	Plays      []playJSON      `json:"plays"`
}

// ledgerHead is the first fields of a ledgerJSON, which the encoder writes
// in one piece.
type ledgerHead struct {
	Format            int           `json:"format"`
	RuleSet           string        `json:"rule_set"`
	Settings          Settings      `json:"settings"`
	IdempotencyWindow time.Duration `json:"idempotency_window_ns"`
	Now               int64         `json:"now"`
	Players           []string      `json:"players"`
	// Suspensions are few (SuspensionsActiveMax): they go in the head.
	Suspensions       []suspensionJSON `json:"suspensions"`
	SuspensionsIssued int              `json:"suspensions_issued"`
	// Adjustments are bounded (AdjustmentsKeptMax) and made by hand: they
	// go in the head too.
	Adjustments       []*Adjustment `json:"adjustments"`
	AdjustmentsIssued int           `json:"adjustments_issued"`
	// Erasures are bounded (ErasuresKeptMax) and made by hand too.
	Erasures       []*Erasure `json:"erasures"`
	ErasuresIssued int        `json:"erasures_issued"`
}

// suspensionJSON is a suspension of sales in force.
type suspensionJSON struct {
	ID     string     `json:"id"`
	Scope  SalesScope `json:"scope"`
	Reason string     `json:"reason"`
	At     int64      `json:"at"`
	By     *Actor     `json:"by"`
}

type accountJSON struct {
	Player        string      `json:"player"`
	Balance       Amount      `json:"balance"`
	Limits        []limitJSON `json:"limits"`
	SelfExcluded  bool        `json:"self_excluded"`
	ExcludedUntil int64       `json:"excluded_until"`
	Bans          []Ban       `json:"bans"`
	BansIssued    int         `json:"bans_issued"`
	ClosedAt      int64       `json:"closed_at"`
	ErasedAt      int64       `json:"erased_at,omitempty"`
	Deposits      rollingJSON `json:"deposits"`
	Stakes        rollingJSON `json:"stakes"`
}

type limitJSON struct {
	Kind           LimitKind `json:"kind"`
	Days           int       `json:"days"`
	Amount         Amount    `json:"amount"`
	Pending        Amount    `json:"pending"`
	PendingFrom    int64     `json:"pending_from"`
	PendingPresent bool      `json:"pending_present"`
}

// rollingJSON holds a rolling sum: its total before the movements kept,
// and the movements, packed (there are as many as stakes in 31 days): for
// each, as unsigned varints, the time since the previous one (Unix ns for
// the first) and its amount in cents (the difference of running totals).
type rollingJSON struct {
	Base      Amount `json:"base"`
	Movements []byte `json:"movements"`
}

// appendRolling appends w's movements to b: its encoding is the part of
// the bytes returned after b's.
func appendRolling(b []byte, w rolling) ([]byte, rollingJSON) {
	from := len(b)
	prevAt, prevCum := int64(0), w.base
	for i, at := range w.at {
		b = binary.AppendUvarint(b, uint64(at-prevAt))
		b = binary.AppendUvarint(b, uint64(w.cum[i]-prevCum))
		prevAt, prevCum = at, w.cum[i]
	}
	return b, rollingJSON{Base: w.base, Movements: b[from:len(b):len(b)]}
}

func decodeRolling(r rollingJSON) (rolling, error) {
	w := rolling{base: r.Base}
	at, cum := int64(0), r.Base
	for b := r.Movements; len(b) > 0; {
		dt, n := binary.Uvarint(b)
		if n <= 0 {
			return rolling{}, fmt.Errorf("%w: rolling sum: malformed movement", ErrSnapshotFormat)
		}
		da, m := binary.Uvarint(b[n:])
		if m <= 0 {
			return rolling{}, fmt.Errorf("%w: rolling sum: malformed movement", ErrSnapshotFormat)
		}
		b = b[n+m:]
		at, cum = at+int64(dt), cum+Amount(da)
		w.at, w.cum = append(w.at, at), append(w.cum, cum)
	}
	return w, nil
}

type blockJSON struct {
	ID         string         `json:"id"`
	Emission   string         `json:"emission"`
	Index      int            `json:"index"`
	Price      Amount         `json:"price"`
	Commitment Commitment     `json:"commitment"`
	SealedSeed []byte         `json:"sealed_seed"`
	State      BlockState     `json:"state"`
	Sold       int            `json:"sold"`
	InPlay     int            `json:"in_play"`
	Owners     []byte         `json:"owners"` // interned player of each sold unit, 4 bytes little-endian
	TierSold   [TierCount]int `json:"tier_sold"`
	Prizes     Amount         `json:"prizes"`
}

type openBlockJSON struct {
	Price Amount `json:"price"`
	Block string `json:"block"`
}

type playJSON struct {
	ID     string `json:"id"`
	Player string `json:"player"`
	Block  string `json:"block"`
	Stake  Amount `json:"stake"`
	// Unit is null for a play without its unit (Play.Unit).
	Unit         *unitJSON `json:"unit"`
	Throws       int       `json:"throws"`
	LastActivity int64     `json:"last_activity"`
}

// unitJSON is a play's unit. Its tier is a pointer so that a unit written
// without one is refused, not read as the tier whose code is zero.
type unitJSON struct {
	Index uint32 `json:"index"`
	Tier  *Tier  `json:"tier"`
	Salt  []byte `json:"salt"`
}

// encodePlay is a play as written.
func encodePlay(p *Play) playJSON {
	out := playJSON{ID: p.ID, Player: p.Player, Block: p.Block, Stake: p.Stake, Throws: p.Throws, LastActivity: unixNano(p.LastActivity)}
	if u := p.Unit; u != nil {
		out.Unit = &unitJSON{Index: u.Index, Tier: &u.Tier, Salt: u.Salt[:]}
	}
	return out
}

// decodePlay reads what encodePlay wrote.
func decodePlay(p playJSON) (*Play, error) {
	play := &Play{ID: p.ID, Player: p.Player, Block: p.Block, Stake: p.Stake, Throws: p.Throws, LastActivity: fromUnixNano(p.LastActivity)}
	u := p.Unit
	if u == nil {
		return play, nil
	}
	play.Unit = &AssignedUnit{Index: u.Index}
	switch {
	case u.Tier == nil || !u.Tier.Valid():
		return nil, fmt.Errorf("%w: play %s: unit %d without a tier", ErrSnapshotFormat, p.ID, u.Index)
	case len(u.Salt) != len(play.Unit.Salt):
		return nil, fmt.Errorf("%w: play %s: salt of %d bytes", ErrSnapshotFormat, p.ID, len(u.Salt))
	}
	play.Unit.Tier = *u.Tier
	copy(play.Unit.Salt[:], u.Salt)
	return play, nil
}

// unixNano and fromUnixNano write times as UTC nanoseconds, 0 for the zero
// time (no self-exclusion term, no pending raise).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// EncodeLedger writes the ledger's whole decision state, deterministically:
// the same ledger always gives the same bytes. They are a JSON object, a
// newline, then the keys still remembered, packed (packKeys).
func EncodeLedger(l *Ledger) ([]byte, error) {
	var e LedgerEncoder
	return e.Encode(l)
}

// LedgerEncoder writes what EncodeLedger writes, into buffers it keeps from
// one encoding to the next, and lets its caller pace it. A writer that
// takes a snapshot every few minutes beside its commands thus allocates
// next to nothing for it: EncodeLedger allocates several times the
// snapshot's size, and each such burst brings a garbage collection
// forward, under the commands. The zero value is ready; it is not safe for
// concurrent use.
type LedgerEncoder struct {
	// Pause, when set, is called between steps of the encoding (a few
	// hundred keys or accounts, tenths of a millisecond): the caller may
	// wait or yield there, so that the encoding takes no more than its
	// share of a processor. How to share the processor is the caller's
	// policy, not the ledger's: without Pause the encoding runs straight
	// through.
	Pause func()

	out, table, body []byte
	// json writes into out; scratch holds the binary fields of the
	// account or block being written.
	json    *json.Encoder
	scratch []byte
	// strs interns the keys' shared strings; remap is, for each string
	// of the snapshot the ledger started from, its index in strs plus
	// one (0: not met yet).
	strs  map[string]uint64
	remap []uint64
	// keys counts the keys written, keysBase is the first one's time,
	// which the others' are written from.
	keys     int
	keysBase int64
	// rules and ruleSetID: RuleSetID encodes the whole rule set, once.
	rules     *RuleSet
	ruleSetID string
}

// Encode encodes the ledger (see EncodeLedger). The bytes are the
// encoder's: valid until its next Encode.
//
// The JSON is what encoding/json writes for a ledgerJSON, but written a
// few hundred accounts or plays, or one block, at a time, with a pause
// between each. Written in one call, a busy ledger's JSON held a processor
// for milliseconds without a pause, longer when a collection met it, and
// the commands' goroutines waiting for that processor waited with it;
// written in steps, the longest stretch is short and the whole encoding
// is no slower.
func (e *LedgerEncoder) Encode(l *Ledger) ([]byte, error) {
	if e.rules != l.Rules {
		e.rules, e.ruleSetID = l.Rules, RuleSetID(l.Rules)
	}
	e.out = e.out[:0]
	e.json = json.NewEncoder((*appender)(&e.out))
	// The head is a JSON object of the first fields: written whole, then
	// opened again after its last field for the sections.
	head := ledgerHead{Format: LedgerFormatVersion, RuleSet: e.ruleSetID, Settings: l.Settings,
		IdempotencyWindow: l.IdempotencyWindow, Now: unixNano(l.Now), Players: l.players, SuspensionsIssued: l.suspensionsIssued,
		AdjustmentsIssued: l.adjustmentsIssued, ErasuresIssued: l.erasuresIssued}
	for _, id := range sortedKeys(l.Adjustments) {
		head.Adjustments = append(head.Adjustments, l.Adjustments[id])
	}
	for _, id := range sortedKeys(l.Erasures) {
		head.Erasures = append(head.Erasures, l.Erasures[id])
	}
	for _, id := range sortedKeys(l.Suspensions) {
		s := l.Suspensions[id]
		head.Suspensions = append(head.Suspensions, suspensionJSON{ID: s.ID, Scope: s.Scope, Reason: s.Reason, At: unixNano(s.At), By: s.By})
	}
	if err := e.json.Encode(head); err != nil {
		return nil, err
	}
	e.out = e.out[:len(e.out)-2] // the head's closing brace and newline
	err := section(e, "accounts", sortedKeys(l.Accounts), stepsBetweenPauses, func(id string) accountJSON { return e.account(l.Accounts[id]) })
	if err == nil {
		err = section(e, "emissions", l.emissionOrder, stepsBetweenPauses, func(id string) Emission { return *l.Emissions[id] })
	}
	if err == nil {
		// A sold-out block's owners are 1.8 MB: one block at a time.
		err = section(e, "blocks", sortedKeys(l.Blocks), 1, func(id string) blockJSON { return e.block(l.Blocks[id]) })
	}
	if err == nil {
		err = section(e, "open_blocks", sortedKeys(l.openBlock), stepsBetweenPauses, func(price Amount) openBlockJSON {
			return openBlockJSON{Price: price, Block: l.openBlock[price]}
		})
	}
	if err == nil {
		err = section(e, "plays", sortedKeys(l.Plays), stepsBetweenPauses, func(id string) playJSON { return encodePlay(l.Plays[id]) })
	}
	if err != nil {
		return nil, err
	}
	// json.Encoder ends what it writes with a newline, and so does the JSON.
	e.out = append(e.out, "}\n"...)
	if err := e.packKeys(l); err != nil {
		return nil, err
	}
	return e.out, nil
}

// section writes a field of ledgerJSON holding one element for each id, in
// their order, as encoding/json writes the slice (null for none): every
// `every` elements are encoded together, as a slice whose brackets are
// then cut, and a pause follows them. The elements of one group may share
// the encoder's scratch buffer, which each group starts empty.
func section[K, V any](e *LedgerEncoder, name string, ids []K, every int, element func(K) V) error {
	e.out = append(e.out, `,"`...)
	e.out = append(e.out, name...)
	e.out = append(e.out, `":`...)
	if len(ids) == 0 {
		e.out = append(e.out, "null"...)
		return nil
	}
	group := make([]V, 0, min(every, len(ids)))
	for from := 0; from < len(ids); from += every {
		e.scratch, group = e.scratch[:0], group[:0]
		for _, id := range ids[from:min(from+every, len(ids))] {
			group = append(group, element(id))
		}
		at := len(e.out)
		if err := e.json.Encode(group); err != nil {
			return err
		}
		if from > 0 {
			e.out[at] = ',' // the group's '[' continues the elements before it
		}
		e.out = e.out[:len(e.out)-2] // its "]\n"
		e.pause()
	}
	e.out = append(e.out, ']')
	return nil
}

// block is a block as written, its owners appended to the encoder's
// scratch buffer.
func (e *LedgerEncoder) block(b *Block) blockJSON {
	from := len(e.scratch)
	for _, o := range b.owners {
		e.scratch = binary.LittleEndian.AppendUint32(e.scratch, o)
	}
	return blockJSON{ID: b.ID, Emission: b.Emission, Index: b.Index, Price: b.Price,
		Commitment: b.Commitment, SealedSeed: b.SealedSeed, State: b.State, Sold: b.Sold, InPlay: b.InPlay,
		Owners: e.scratch[from:len(e.scratch):len(e.scratch)], TierSold: b.TierSold, Prizes: b.Prizes}
}

// stepsBetweenPauses is how many keys, accounts or plays the encoder
// writes between two calls of Pause: a few tenths of a millisecond.
const stepsBetweenPauses = 256

// step is the encoder's i-th step of a section: every stepsBetweenPauses
// it calls Pause.
func (e *LedgerEncoder) step(i int) {
	if e.Pause != nil && i%stepsBetweenPauses == stepsBetweenPauses-1 {
		e.Pause()
	}
}

// pause calls Pause, between two sections.
func (e *LedgerEncoder) pause() {
	if e.Pause != nil {
		e.Pause()
	}
}

// appender is an io.Writer that appends to a byte slice.
type appender []byte

func (a *appender) Write(p []byte) (int, error) {
	*a = append(*a, p...)
	return len(p), nil
}

// account is an account as written, its movements appended to the
// encoder's scratch buffer.
func (e *LedgerEncoder) account(a *Account) accountJSON {
	out := accountJSON{Player: a.Player, Balance: a.Balance, SelfExcluded: a.SelfExcluded,
		ExcludedUntil: unixNano(a.ExcludedUntil), BansIssued: a.bansIssued, ClosedAt: unixNano(a.closedAt),
		ErasedAt: unixNano(a.erasedAt)}
	e.scratch, out.Deposits = appendRolling(e.scratch, a.deposits)
	e.scratch, out.Stakes = appendRolling(e.scratch, a.stakes)
	keys := make([]LimitKey, 0, len(a.Limits))
	for k := range a.Limits {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y LimitKey) int {
		if c := strings.Compare(string(x.Kind), string(y.Kind)); c != 0 {
			return c
		}
		return x.Days - y.Days
	})
	for _, k := range keys {
		lim := a.Limits[k]
		out.Limits = append(out.Limits, limitJSON{Kind: k.Kind, Days: k.Days, Amount: lim.Amount, Pending: lim.Pending,
			PendingFrom: unixNano(lim.PendingFrom), PendingPresent: lim.pendingPresent})
	}
	for _, id := range sortedKeys(a.Bans) {
		out.Bans = append(out.Bans, *a.Bans[id])
	}
	return out
}

// DecodeLedger reads what EncodeLedger wrote under the given rules. It
// returns an error wrapping ErrSnapshotFormat for another format version,
// another rule set or bytes that do not decode or contradict themselves.
// The ledger has no decks: the writer attaches them. It keeps b, where
// its keys are read in place: b must not change afterwards.
func DecodeLedger(rules *RuleSet, b []byte) (*Ledger, error) {
	// The version is read first, from the first field, so that another
	// version is named as such rather than as a field that does not decode.
	if v, err := ledgerFormat(b); err != nil {
		return nil, err
	} else if v != LedgerFormatVersion {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrSnapshotFormat, v, LedgerFormatVersion)
	}
	// A field this build does not know means another format, whatever
	// its version says: refused, never half read.
	var s ledgerJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshotFormat, err)
	}
	end := int(dec.InputOffset())
	if end >= len(b) || b[end] != '\n' {
		return nil, fmt.Errorf("%w: no newline after the ledger's JSON", ErrSnapshotFormat)
	}
	if s.Format != LedgerFormatVersion {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrSnapshotFormat, s.Format, LedgerFormatVersion)
	}
	if want := RuleSetID(rules); s.RuleSet != want {
		return nil, fmt.Errorf("%w: rule set %s, this writer runs %s", ErrSnapshotFormat, s.RuleSet, want)
	}
	l := NewLedger(rules)
	l.Settings, l.IdempotencyWindow, l.Now, l.players = s.Settings, s.IdempotencyWindow, fromUnixNano(s.Now), s.Players
	for i, p := range l.players {
		l.playerIdx[p] = uint32(i)
	}
	l.suspensionsIssued = s.SuspensionsIssued
	for _, sj := range s.Suspensions {
		if suspensionNumber(sj.ID) < 1 || suspensionNumber(sj.ID) > s.SuspensionsIssued || sj.Scope.Kind == "" {
			return nil, fmt.Errorf("%w: suspension %q of %d issued, scope %q", ErrSnapshotFormat, sj.ID, s.SuspensionsIssued, sj.Scope.Kind)
		}
		l.Suspensions[sj.ID] = &Suspension{ID: sj.ID, Scope: sj.Scope, Reason: sj.Reason, At: fromUnixNano(sj.At), By: sj.By}
	}
	if err := l.decodeAdjustments(s.Adjustments, s.AdjustmentsIssued); err != nil {
		return nil, err
	}
	if err := l.decodeErasures(s.Erasures, s.ErasuresIssued); err != nil {
		return nil, err
	}
	for _, a := range s.Accounts {
		acct, err := decodeAccount(a)
		if err != nil {
			return nil, err
		}
		l.Accounts[a.Player] = acct
	}
	for _, e := range s.Emissions {
		l.Emissions[e.ID] = &e
		l.emissionOrder = append(l.emissionOrder, e.ID)
	}
	for _, b := range s.Blocks {
		if len(b.Owners)%4 != 0 {
			return nil, fmt.Errorf("%w: block %s: owners of %d bytes", ErrSnapshotFormat, b.ID, len(b.Owners))
		}
		blk := &Block{ID: b.ID, Emission: b.Emission, Index: b.Index, Price: b.Price, Commitment: b.Commitment,
			SealedSeed: b.SealedSeed, State: b.State, Sold: b.Sold, InPlay: b.InPlay, TierSold: b.TierSold, Prizes: b.Prizes}
		if len(b.Owners) > 0 {
			blk.owners = make([]uint32, len(b.Owners)/4, max(len(b.Owners)/4, rules.BlockUnits))
			for i := range blk.owners {
				o := binary.LittleEndian.Uint32(b.Owners[4*i:])
				if int(o) >= len(l.players) {
					return nil, fmt.Errorf("%w: block %s: unit %d owned by unknown player %d", ErrSnapshotFormat, b.ID, i, o)
				}
				blk.owners[i] = o
			}
		}
		l.Blocks[b.ID] = blk
	}
	for _, o := range s.OpenBlocks {
		l.openBlock[o.Price] = o.Block
	}
	for _, p := range s.Plays {
		play, err := decodePlay(p)
		if err != nil {
			return nil, err
		}
		l.Plays[p.ID] = play
	}
	if err := unpackKeys(l, b[end+1:]); err != nil {
		return nil, err
	}
	return l, nil
}

// ledgerFormat reads the format version, the first field EncodeLedger
// writes, without reading further.
func ledgerFormat(b []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var v int
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, fmt.Errorf("%w: not a ledger (%v)", ErrSnapshotFormat, err)
	}
	if t, err := dec.Token(); err != nil || t != "format" {
		return 0, fmt.Errorf("%w: no format version first (%v)", ErrSnapshotFormat, err)
	}
	if err := dec.Decode(&v); err != nil {
		return 0, fmt.Errorf("%w: format version: %w", ErrSnapshotFormat, err)
	}
	return v, nil
}

func decodeAccount(a accountJSON) (*Account, error) {
	deposits, err := decodeRolling(a.Deposits)
	if err != nil {
		return nil, err
	}
	stakes, err := decodeRolling(a.Stakes)
	if err != nil {
		return nil, err
	}
	acct := &Account{Player: a.Player, Balance: a.Balance, Limits: map[LimitKey]*Limit{}, SelfExcluded: a.SelfExcluded,
		ExcludedUntil: fromUnixNano(a.ExcludedUntil), bansIssued: a.BansIssued, closedAt: fromUnixNano(a.ClosedAt), erasedAt: fromUnixNano(a.ErasedAt), deposits: deposits, stakes: stakes}
	for _, lim := range a.Limits {
		acct.Limits[LimitKey{lim.Kind, lim.Days}] = &Limit{Amount: lim.Amount, Pending: lim.Pending,
			PendingFrom: fromUnixNano(lim.PendingFrom), pendingPresent: lim.PendingPresent}
	}
	for _, b := range a.Bans {
		if acct.Bans == nil {
			acct.Bans = map[string]*Ban{}
		}
		acct.Bans[b.ID] = &b
	}
	return acct, nil
}

// sortedKeys returns a map's keys in ascending order.
func sortedKeys[K interface{ ~string | ~int64 }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// decodeAdjustments restores the adjustments a snapshot keeps, refusing
// one whose id, terms or state the ledger could not have written.
func (l *Ledger) decodeAdjustments(xs []*Adjustment, issued int) error {
	l.adjustmentsIssued = issued
	for _, x := range xs {
		n := AdjustmentNumber(x.ID)
		if n < 1 || n > issued || validAdjustment(x.Direction, x.Kind) != nil || !x.kept() || l.Adjustments[x.ID] != nil {
			return fmt.Errorf("%w: adjustment %q of %d issued, %s %s, state %q", ErrSnapshotFormat, x.ID, issued, x.Direction, x.Kind, x.State)
		}
		l.Adjustments[x.ID] = x
	}
	return nil
}

// decodeErasures restores the erasures a snapshot keeps, refusing one
// whose id, person or state the ledger could not have written.
func (l *Ledger) decodeErasures(xs []*Erasure, issued int) error {
	l.erasuresIssued = issued
	for _, x := range xs {
		n := ErasureNumber(x.ID)
		// A staff subject's erasure names a key; a player's may not.
		whose := (x.Player != "" && x.KeyID == "") || ValidKeyID(x.KeyID)
		if n < 1 || n > issued || !whose || !x.kept() || l.Erasures[x.ID] != nil {
			return fmt.Errorf("%w: erasure %q of %d issued, player %q, key %q, state %q", ErrSnapshotFormat, x.ID, issued, x.Player, x.KeyID, x.State)
		}
		l.Erasures[x.ID] = x
	}
	return nil
}
