package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// notInSnapshot are the Ledger fields a snapshot leaves out on purpose:
// decks and prepared blocks hold seeds (the writer rebuilds them from the
// sealed seeds), a play's scenario and results are caches derived from its
// salt. Every other field, exported or not, must survive a round trip.
var notInSnapshot = map[string]bool{"decks": true, "prepared": true, "scenario": true, "results": true,
	// The keys are compared as the ledger remembers them (sameLedger),
	// whether packed from a snapshot or recorded since.
	"packed": true, "keys": true, "keyQueue": true}

// rememberedKey is a key as Ledger.eachKey gives it.
type rememberedKey struct {
	id  idemKey
	rec KeyRecord
}

// keysOf returns the keys a ledger remembers, in the order they expire.
func keysOf(l *Ledger) []rememberedKey {
	var out []rememberedKey
	l.eachKey(func(k idemKey, r *KeyRecord) { out = append(out, rememberedKey{k, *r}) })
	return out
}

// sameLedger compares two ledgers field by field (sameState), and the keys
// they remember, in order, each answered by Key as it is listed.
func sameLedger(a, b *Ledger) error {
	if err := sameState(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), "Ledger"); err != nil {
		return err
	}
	ka, kb := keysOf(a), keysOf(b)
	if len(ka) != len(kb) {
		return fmt.Errorf("keys: %d vs %d", len(ka), len(kb))
	}
	for i := range ka {
		if !reflect.DeepEqual(ka[i], kb[i]) {
			return fmt.Errorf("key %d: %+v vs %+v", i, ka[i], kb[i])
		}
		for _, l := range []*Ledger{a, b} {
			if r := l.Key(ka[i].id.player, ka[i].id.kind, ka[i].id.key); r == nil || !reflect.DeepEqual(*r, ka[i].rec) {
				return fmt.Errorf("key %d %+v: Key answers %+v", i, ka[i].id, r)
			}
		}
	}
	return nil
}

// sameState compares two values field by field, unexported fields too,
// treating a nil and an empty slice or map alike (a decoded ledger cannot
// know which one it had). It returns the path of the first difference.
func sameState(a, b reflect.Value, path string) error {
	if a.Kind() != b.Kind() {
		return fmt.Errorf("%s: kind %s vs %s", path, a.Kind(), b.Kind())
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return fmt.Errorf("%s: nil vs not nil", path)
			}
			return nil
		}
		if a.Pointer() == b.Pointer() {
			return nil
		}
		return sameState(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := range a.NumField() {
			name := a.Type().Field(i).Name
			if notInSnapshot[name] {
				continue
			}
			if err := sameState(a.Field(i), b.Field(i), path+"."+name); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return fmt.Errorf("%s: length %d vs %d", path, a.Len(), b.Len())
		}
		for i := range a.Len() {
			if err := sameState(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if a.Len() != b.Len() {
			return fmt.Errorf("%s: %d entries vs %d", path, a.Len(), b.Len())
		}
		it := a.MapRange()
		for it.Next() {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() {
				return fmt.Errorf("%s: key %v missing", path, it.Key())
			}
			if err := sameState(it.Value(), bv, fmt.Sprintf("%s[%v]", path, it.Key())); err != nil {
				return err
			}
		}
	case reflect.String:
		if a.String() != b.String() {
			return fmt.Errorf("%s: %q vs %q", path, a.String(), b.String())
		}
	case reflect.Bool:
		if a.Bool() != b.Bool() {
			return fmt.Errorf("%s: %v vs %v", path, a.Bool(), b.Bool())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if a.Int() != b.Int() {
			return fmt.Errorf("%s: %d vs %d", path, a.Int(), b.Int())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if a.Uint() != b.Uint() {
			return fmt.Errorf("%s: %d vs %d", path, a.Uint(), b.Uint())
		}
	default:
		return fmt.Errorf("%s: cannot compare a %s", path, a.Kind())
	}
	return nil
}

// richWorld is a ledger with something in every field a snapshot holds:
// accounts with rolling sums, limits of several periods and a pending
// raise, bans in force and lifted, self-exclusions for good and for a
// term, settings adopted, blocks open, sold out and closed, plays in
// progress, remembered keys, suspensions of sales in force and resumed,
// a closed account, adjustments pending and approved, and erasures
// pending and approved.
func richWorld(t *testing.T) *world {
	w := runRandomCommands(t, 3, 1500)
	periods := BaselineSettings()
	periods.Version, periods.LimitPeriodsDays = "fr-test", []int{1, 7, 30}
	w.given(AdoptSettings{Settings: periods},
		ConfigureAccount{Player: "p0", Limits: []LimitSetting{{StakeLimit, 1, 100}}},
		ConfigureAccount{Player: "p0", Limits: []LimitSetting{{StakeLimit, 1, 5000}}},
		BanPlayer{Player: "p1", Reference: "R1", Reason: "list", By: operator},
		BanPlayer{Player: "p2", Reference: "R2", Reason: "list", By: operator},
		LiftBan{Player: "p2", Ban: "B1", Reference: "R3", Reason: "appeal", By: operator},
		SuspendSales{Scope: "price:2.00", Reason: "screen fault", By: operator},
		SuspendSales{Scope: "price:0.50", Reason: "screen fault", By: operator},
		ResumeSales{Suspension: "S2", Reason: "fixed", By: operator},
		ConfigureAccount{Player: "p8"},
		CloseAccount{Player: "p8", Reason: "leaves", By: operator},
		ConfigureAccount{Player: "p3", SelfExcludedUntil: at(w.now.Add(72 * time.Hour))},
		ConfigureAccount{Player: "p5", DepositLimit: amt("100"), StakeLimit: amt("100")},
		Deposit{Player: "p5", Amount: 1000, Key: "late"},
		CreateEmission{Price: 100, Blocks: 2, First: prepared(t, w.l.Rules, 100, 201)},
		PlaceStake{Player: "p5", Stake: 100, Key: "late-stake"},
		proposal("p5", Credit, Goodwill, 300),
		proposal("p5", Debit, Chargeback, 200),
		ApproveAdjustment{Adjustment: "A2", By: finance},
		RevokeTokens{Subject: "bob@fdj", Reason: "left the company", Key: "rev-1", By: operator},
		ConfigureAccount{Player: "p9"},
		CloseAccount{Player: "p9", Reason: "leaves", By: operator},
		ErasePersonalData{Player: "p9", KeyID: "0123456789abcdef", LegalGround: "GDPR", By: operator},
		ErasePersonalData{KeyID: "fedcba9876543210", LegalGround: "left", By: operator},
		ApproveErasure{Erasure: "ER2", By: finance},
	)
	l := w.l
	for _, id := range l.NextToPrepare() {
		l.Prepare(id, prepared(t, l.Rules, l.Emissions[id].Price, 202))
	}
	pending, owners := false, false
	for _, a := range l.Accounts {
		for _, lim := range a.Limits {
			pending = pending || lim.pendingPresent
		}
	}
	for _, b := range l.Blocks {
		owners = owners || len(b.owners) > 0
	}
	if !pending || !owners || len(l.Plays) == 0 || len(keysOf(l)) == 0 || len(l.Accounts["p1"].Bans) == 0 ||
		l.Accounts["p3"].ExcludedUntil.IsZero() || len(l.openBlock) == 0 || len(l.Suspensions) != 1 || l.suspensionsIssued != 2 || l.Accounts["p8"].closedAt.IsZero() ||
		len(l.Adjustments) != 2 || l.adjustmentsIssued != 2 || len(l.Erasures) != 2 || l.erasuresIssued != 2 {
		t.Fatalf("the scenario is not rich enough: pending %v owners %v plays %d keys %d", pending, owners, len(l.Plays), len(keysOf(l)))
	}
	return w
}

// decoded returns the ledger decoded from l's snapshot: its keys packed.
func decoded(tb testing.TB, l *Ledger) *Ledger {
	tb.Helper()
	b, err := EncodeLedger(l)
	if err != nil {
		tb.Fatal(err)
	}
	got, err := DecodeLedger(l.Rules, b)
	if err != nil {
		tb.Fatal(err)
	}
	return got
}

func TestLedgerSnapshotRoundTripsEveryField(t *testing.T) {
	w := richWorld(t)
	b, err := EncodeLedger(w.l)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeLedger(w.l.Rules, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameLedger(w.l, got); err != nil {
		t.Fatal(err)
	}
	// The encoding is deterministic: the decoded ledger encodes to the
	// same bytes, and so does the original again (map order is random).
	for _, l := range []*Ledger{got, w.l} {
		again, err := EncodeLedger(l)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("encoding again: %d bytes vs %d (%v)", len(again), len(b), err)
		}
	}
}

// The encoder writes the JSON a group of elements at a time; what it
// writes is byte for byte what encoding/json writes for the same
// ledgerJSON, empty sections (null) and sections of several groups
// included.
func TestTheJSONWrittenInPiecesIsEncodingJSONs(t *testing.T) {
	for name, l := range map[string]*Ledger{"rich": richWorld(t).l, "empty": newWorld(t).l, "many accounts": manyAccounts(t).l} {
		b, err := EncodeLedger(l)
		if err != nil {
			t.Fatal(err)
		}
		end := bytes.IndexByte(b, '\n')
		var s ledgerJSON
		if err := json.Unmarshal(b[:end], &s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b[:end], want) {
			t.Fatalf("%s: the encoder wrote\n%s\nencoding/json writes\n%s", name, b[:end], want)
		}
	}
}

// manyAccounts is a world of four groups of accounts, each with a deposit.
func manyAccounts(t *testing.T) *world {
	w := newWorld(t)
	for i := range 4 * stepsBetweenPauses {
		p := fmt.Sprint("p", i)
		w.given(ConfigureAccount{Player: p, DepositLimit: amt("100000"), StakeLimit: amt("100000")},
			Deposit{Player: p, Amount: 100, Key: "d" + p})
	}
	return w
}

// A writer's snapshot is encoded beside its commands, pausing as it goes
// (LedgerEncoder.Pause): no stretch between two pauses writes more than a
// few hundred accounts. Written in one piece, the JSON of thousands of
// accounts held a processor for milliseconds at a stretch.
func TestTheEncoderPausesWithinTheAccounts(t *testing.T) {
	w := manyAccounts(t)
	var enc LedgerEncoder
	written, longest := 0, 0
	enc.Pause = func() {
		n := len(enc.out) + len(enc.table) + len(enc.body)
		longest, written = max(longest, n-written), n
	}
	b, err := enc.Encode(w.l)
	if err != nil {
		t.Fatal(err)
	}
	jsonBytes := bytes.IndexByte(b, '\n') + 1
	if longest > jsonBytes/3 {
		t.Fatalf("%d bytes written without a pause, of %d bytes of JSON for %d accounts", longest, jsonBytes, len(w.l.Accounts))
	}
}

func TestADecodedLedgerDecidesAsTheOriginal(t *testing.T) {
	w := richWorld(t)
	b, err := EncodeLedger(w.l)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeLedger(w.l.Rules, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range w.l.decks {
		got.AttachDeck(d)
	}
	for id, p := range w.l.prepared {
		got.Prepare(id, p)
	}
	// the same commands, decided on both, record the same events: a retry
	// of a remembered key, a raise not yet in force, a throw of a play in
	// progress, the stakes that sell out the open block
	var play string
	for id, p := range w.l.Plays {
		if p.Player == "p5" {
			play = id
		}
	}
	cmds := []Command{
		PlaceStake{Player: "p5", Stake: 100, Key: "late-stake"},
		MakeThrow{Player: "p5", Play: play},
		ConfigureAccount{Player: "p0", Limits: []LimitSetting{{StakeLimit, 1, 50}}},
		Deposit{Player: "p1", Amount: 100, Key: "banned"},
		Deposit{Player: "p5", Amount: 1000, Key: "late"},
		// a stake in the suspended scope, the retry of the suspension, the
		// resumption of one resumed already and of one in force
		PlaceStake{Player: "p0", Stake: 200, Key: "suspended"},
		SuspendSales{Scope: "price:2.00", Reason: "screen fault", By: operator},
		ResumeSales{Suspension: "S2", Reason: "again", By: operator},
		ResumeSales{Suspension: "S1", Reason: "fixed", By: operator},
		// a deposit to the closed account, and its reopening
		Deposit{Player: "p8", Amount: 100, Key: "closed"},
		ReopenAccount{Player: "p8", Reason: "by mistake", By: operator},
		// a self-approval, an approval again, an approval of one pending
		ApproveAdjustment{Adjustment: "A1", By: operator},
		ApproveAdjustment{Adjustment: "A2", By: finance},
		ApproveAdjustment{Adjustment: "A1", By: finance},
		// the same for erasures, and the proposal of an erased person
		ApproveErasure{Erasure: "ER1", By: operator},
		ApproveErasure{Erasure: "ER2", By: operator2},
		ApproveErasure{Erasure: "ER1", By: finance},
		ErasePersonalData{KeyID: "fedcba9876543210", LegalGround: "left", By: operator},
	}
	for range w.l.Rules.BlockUnits {
		cmds = append(cmds, Deposit{Player: "p0", Amount: 100, Key: fmt.Sprint("d", len(cmds))},
			PlaceStake{Player: "p0", Stake: 100, Key: fmt.Sprint("s", len(cmds))})
	}
	for i, c := range cmds {
		want, werr := Decide(w.l, w.now, c)
		have, herr := Decide(got, w.now, c)
		if !errors.Is(herr, werr) && fmt.Sprint(herr) != fmt.Sprint(werr) {
			t.Fatalf("command %d %T: %v vs %v", i, c, herr, werr)
		}
		if !reflect.DeepEqual(want, have) {
			t.Fatalf("command %d %T: decided %v vs %v", i, c, types(have.Events), types(want.Events))
		}
		for _, e := range want.Events {
			if err := w.l.Evolve(w.now, e); err != nil {
				t.Fatal(err)
			}
			if err := got.Evolve(w.now, e); err != nil {
				t.Fatal(err)
			}
		}
		w.now = w.now.Add(time.Minute)
	}
	if err := sameLedger(w.l, got); err != nil {
		t.Fatal(err)
	}
}

func TestLedgerSnapshotsOfAnotherFormatOrRuleSetAreRefused(t *testing.T) {
	w := funded(t)
	b, err := EncodeLedger(w.l)
	if err != nil {
		t.Fatal(err)
	}
	other, err := DefaultRules()
	if err != nil {
		t.Fatal(err)
	}
	format := func(v string) []byte {
		return bytes.Replace(b, []byte(`"format":10`), []byte(`"format":`+v), 1)
	}
	for name, c := range map[string]struct {
		rules  *RuleSet
		b      []byte
		reason string
	}{
		"another rule set": {other, b, "rule set"},
		"format 2":         {w.l.Rules, format("2"), "format version 2, this build reads 10"},
		"format 3":         {w.l.Rules, format("3"), "format version 3, this build reads 10"},
		"format 4":         {w.l.Rules, format("4"), "format version 4, this build reads 10"},
		"format 5":         {w.l.Rules, format("5"), "format version 5, this build reads 10"},
		"format 6":         {w.l.Rules, format("6"), "format version 6, this build reads 10"},
		"format 7":         {w.l.Rules, format("7"), "format version 7, this build reads 10"},
		"format 8":         {w.l.Rules, format("8"), "format version 8, this build reads 10"},
		"format 9":         {w.l.Rules, format("9"), "format version 9, this build reads 10"},
		"unknown version":  {w.l.Rules, format("99"), "format version 99"},
		"truncated":        {w.l.Rules, b[:bytes.IndexByte(b, '\n')/2], "unexpected EOF"},
		"an unknown field": {w.l.Rules, format(`10,"at":[]`), "unknown field"},
		"no keys":          {w.l.Rules, b[:bytes.IndexByte(b, '\n')], "no newline after the ledger"},
		"keys cut short":   {w.l.Rules, withKeys(t, b, func(k []byte) []byte { return k[:len(k)-1] }), "keys: malformed"},
		"keys and more":    {w.l.Rules, withKeys(t, b, func(k []byte) []byte { return append(k, 0) }), "1 bytes after the last"},
	} {
		if _, err := DecodeLedger(c.rules, c.b); !errors.Is(err, ErrSnapshotFormat) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want %q", name, err, c.reason)
		}
	}
}

// withKeys returns the encoded ledger b with its packed keys changed by f.
func withKeys(t *testing.T, b []byte, f func([]byte) []byte) []byte {
	t.Helper()
	i := bytes.IndexByte(b, '\n')
	if i < 0 || i == len(b)-1 {
		t.Fatal("no keys to change")
	}
	return append(slices.Clone(b[:i+1]), f(slices.Clone(b[i+1:]))...)
}

// TestKeysAcrossASnapshotAreAnsweredAsByTheLedgerThatKeptThem follows a
// ledger and ledgers decoded from its snapshots (one taken from another
// decoded one, holding keys of both kinds) through three days of
// deposits: retries of keys remembered across the snapshot, with the same
// request and with another, keys expiring after it, one by one, and new
// keys recorded after it. Every ledger decides every command alike,
// remembers the same keys and encodes to the same bytes.
func TestKeysAcrossASnapshotAreAnsweredAsByTheLedgerThatKeptThem(t *testing.T) {
	w := newWorld(t)
	w.given(ConfigureAccount{Player: "p1", DepositLimit: amt("100000"), StakeLimit: amt("100000")},
		ConfigureAccount{Player: "p2", DepositLimit: amt("100000"), StakeLimit: amt("100000")},
		CreateEmission{Price: 100, Blocks: 2, First: prepared(t, w.l.Rules, 100, 1), Key: "e1"})
	for i := range 40 {
		w.given(Deposit{Player: fmt.Sprint("p", 1+i%2), Amount: Amount(100 + i), Key: fmt.Sprint("a", i)})
		w.now = w.now.Add(time.Hour)
	}
	ledgers := []*Ledger{w.l, decoded(t, w.l)}
	for step := range 150 {
		i := step % 40
		cmds := []Command{
			Deposit{Player: fmt.Sprint("p", 1+i%2), Amount: Amount(100 + i), Key: fmt.Sprint("a", i)},
			Deposit{Player: fmt.Sprint("p", 1+i%2), Amount: 1, Key: fmt.Sprint("a", i)},
			Deposit{Player: fmt.Sprint("p", 2-i%2), Amount: Amount(100 + i), Key: fmt.Sprint("a", i)},
			Deposit{Player: "p1", Amount: 7, Key: fmt.Sprint("b", step)},
			Deposit{Player: "p1", Amount: 7, Key: fmt.Sprint("b", step/2)},
			CreateEmission{Price: 100, Blocks: 2, First: prepared(t, w.l.Rules, 100, 2), Key: "e1"},
		}
		for _, c := range cmds {
			want, werr := Decide(w.l, w.now, c)
			for n, l := range ledgers[1:] {
				have, herr := Decide(l, w.now, c)
				if fmt.Sprint(herr) != fmt.Sprint(werr) || !reflect.DeepEqual(want, have) {
					t.Fatalf("step %d, ledger %d, %+v: decided %v (%v) vs %v (%v)", step, n+1, c, types(have.Events), herr, types(want.Events), werr)
				}
			}
			for _, e := range want.Events {
				for _, l := range ledgers {
					if err := l.Evolve(w.now, e); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if step == 30 {
			ledgers = append(ledgers, decoded(t, ledgers[1]))
		}
		if step%10 == 0 || step == 149 {
			want, err := EncodeLedger(w.l)
			if err != nil {
				t.Fatal(err)
			}
			for n, l := range ledgers[1:] {
				if err := sameLedger(w.l, l); err != nil {
					t.Fatalf("step %d, ledger %d: %v", step, n+1, err)
				}
				if have, err := EncodeLedger(l); err != nil || !bytes.Equal(have, want) {
					t.Fatalf("step %d, ledger %d encodes to %d bytes, not %d (%v)", step, n+1, len(have), len(want), err)
				}
			}
		}
		w.now = w.now.Add(30 * time.Minute)
	}
	if n := len(keysOf(w.l)); n == 0 || n >= 150+40 {
		t.Fatalf("%d keys remembered at the end: none expired, or all", n)
	}
}

// TestALedgerEncoderKeptAcrossSnapshotsWritesWhatEncodeLedgerWrites: the
// writer's snapshotter keeps one encoder, its buffers reused, for a ledger
// that started from a snapshot (keys packed) and records new keys. Each of
// its encodings is byte for byte EncodeLedger's, it pauses as it goes, and
// it allocates nothing per key: a snapshot every few minutes would
// otherwise bring a garbage collection forward under the writer's
// commands.
func TestALedgerEncoderKeptAcrossSnapshotsWritesWhatEncodeLedgerWrites(t *testing.T) {
	w := newWorld(t)
	w.given(ConfigureAccount{Player: "p1", DepositLimit: amt("100000"), StakeLimit: amt("100000")},
		ConfigureAccount{Player: "p2", DepositLimit: amt("100000"), StakeLimit: amt("100000")})
	const keys = 3000
	deposit := func(i int) {
		w.given(Deposit{Player: fmt.Sprint("p", 1+i%2), Amount: 1, Key: fmt.Sprint("k", i)})
		w.now = w.now.Add(time.Second)
	}
	for i := range keys {
		deposit(i)
	}
	l := decoded(t, w.l)
	pauses := 0
	enc := LedgerEncoder{Pause: func() { pauses++ }}
	for round := range 3 {
		for i := range 100 {
			from := len(w.log)
			deposit(keys + 100*round + i)
			for _, r := range w.log[from:] {
				if err := l.Evolve(r.at, r.e); err != nil {
					t.Fatal(err)
				}
			}
		}
		want, err := EncodeLedger(w.l)
		if err != nil {
			t.Fatal(err)
		}
		pauses = 0
		have, err := enc.Encode(l)
		if err != nil || !bytes.Equal(have, want) {
			t.Fatalf("round %d: the encoder kept writes %d bytes, EncodeLedger %d (%v)", round, len(have), len(want), err)
		}
		if pauses < keys/stepsBetweenPauses {
			t.Fatalf("round %d: %d pauses for %d keys, want one every %d", round, pauses, keys, stepsBetweenPauses)
		}
	}
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := enc.Encode(l); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 100 {
		t.Fatalf("an encoding of %d keys allocates %.0f times, want no allocation per key", keys, allocs)
	}
}

// A suspension in a snapshot must name one the ledger issued and a scope:
// without the check, a suspension of no kind would stop nothing.
func TestLedgerSnapshotsWithABrokenSuspensionAreRefused(t *testing.T) {
	w := twoPrices(t)
	w.given(suspend("price:1.00"))
	b, err := EncodeLedger(w.l)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ from, to, reason string }{
		"an id never issued": {`"id":"S1"`, `"id":"S2"`, `suspension "S2" of 1 issued`},
		"no scope":           {`"scope":"price:1.00",`, ``, `scope ""`},
		"a malformed scope":  {`"scope":"price:1.00"`, `"scope":"price"`, `want all, price:P`},
	} {
		broken := bytes.Replace(b, []byte(c.from), []byte(c.to), 1)
		if bytes.Equal(broken, b) {
			t.Fatalf("%s: %s not in the snapshot", name, c.from)
		}
		if _, err := DecodeLedger(w.l.Rules, broken); !errors.Is(err, ErrSnapshotFormat) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want %q", name, err, c.reason)
		}
	}
}

// An adjustment or an erasure in a snapshot must name one the ledger
// issued, with its terms (an adjustment's direction and kind, an
// erasure's person), a proposer and a state: without the checks, a
// pending adjustment could be approved by anyone, or post to no account.
func TestLedgerSnapshotsWithABrokenProposalAreRefused(t *testing.T) {
	type breakage struct{ from, to string }
	for what, c := range map[string]struct {
		w      *world
		breaks map[string]breakage
	}{
		"adjustment": {proposed(t), map[string]breakage{
			"an id never issued": {`"id":"A1"`, `"id":"A2"`},
			"no direction":       {`"direction":"credit"`, `"direction":""`},
			"another kind":       {`"kind":"goodwill"`, `"kind":"bonus"`},
		}},
		"erasure": {closedP1(t).given(erasureOf), map[string]breakage{
			"an id never issued": {`"id":"ER1"`, `"id":"ER2"`},
			"nobody's":           {`"player":"p1","key_id":"0123456789abcdef"`, `"key_id":"not-a-key"`},
		}},
	} {
		b, err := EncodeLedger(c.w.l)
		if err != nil {
			t.Fatal(err)
		}
		c.breaks["no proposer"] = breakage{`"proposed_by":{"role":"operator","subject":"alice@fdj"}`, `"proposed_by":null`}
		c.breaks["no state"] = breakage{`"state":"pending"`, `"state":""`}
		c.breaks["decided by nobody"] = breakage{`"state":"pending"`, `"state":"approved"`}
		for name, k := range c.breaks {
			broken := bytes.Replace(b, []byte(k.from), []byte(k.to), 1)
			if bytes.Equal(broken, b) {
				t.Fatalf("%s, %s: %s not in the snapshot", what, name, k.from)
			}
			if _, err := DecodeLedger(c.w.l.Rules, broken); !errors.Is(err, ErrSnapshotFormat) || !strings.Contains(err.Error(), what) {
				t.Errorf("%s, %s: %v, want the %s refused", what, name, err, what)
			}
		}
	}
}
