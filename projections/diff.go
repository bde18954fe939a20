package projections

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"

	"github.com/fdj/tresor/domain"
)

// Difference is one field of one read-model row that two stores serve
// differently, or a row that only one of them serves: then Field is empty
// and Want or Got is "absent" (the other "present").
//
// Model names the read model: checkpoint, accounts, journal,
// account_totals, blocks, block_tiers, plays, throws, reconciliation. Key
// names the row within it: a player id, a block id, "account@seq:line" for
// a journal line, "block/tier" for a tier row, a play id, "play/throw" for
// a throw, "scope/key" for a reconciliation row (scope emission holds the
// emissions). Field is the row's JSON key as the API serves it, with
// nested members dotted and list items indexed ("counters.sales",
// "proof.path[3]"); Want and Got are the values in that JSON form (amounts
// in euros, hashes in hex, tiers by id, null for no value).
type Difference struct {
	Model, Key, Field, Want, Got string
}

// String writes the difference on one line.
func (d Difference) String() string {
	if d.Field == "" {
		return fmt.Sprintf("%s %s: want %s, got %s", d.Model, d.Key, d.Want, d.Got)
	}
	return fmt.Sprintf("%s %s %s: want %s, got %s", d.Model, d.Key, d.Field, d.Want, d.Got)
}

// Values of Want and Got for a row served by one store only.
const (
	rowPresent = "present"
	rowAbsent  = "absent"
)

// diffPagesMax bounds each paged walk of Diff (a billion rows at PageMax):
// a store whose cursor does not advance fails the walk's order check long
// before, so this only bounds a store that keeps inventing rows.
const diffPagesMax = 10_000_000

// errEnough stops the walk once max differences are found.
var errEnough = errors.New("enough differences")

// Diff compares two projection stores read model by read model, row by row, through the Store interface.
//
// It reads, from both stores, the checkpoint, every account (all pages),
// every block with its tier rows, the journal and totals of every ledger
// account (the house's, each block's sales and prize accounts, each
// player's), every play of every player's history with its throws and
// proof, and the reconciliation rows of every scope (per block, per
// emission, per day). Rows are matched by key; every field of a matched
// row is compared in the JSON form the API serves, so a field added to a
// read model is compared without anything here changing. The point
// queries (Account, Block, LastPlay) read the same rows and are not
// walked again.
//
// The stores should be at rest while Diff reads them: a store that applies
// events during the walk shows rows read before and after, which differ
// from any single position of the stream.
//
// It returns at most max differences (max ≥ 1), in walk order, and stops
// at the max-th; nil when the stores agree. It returns ErrInvalid for a
// max below 1, and the error of a store that fails to answer or serves its
// rows out of order.
func Diff(ctx context.Context, want, got Store, max int) ([]Difference, error) {
	if max < 1 {
		return nil, errorsf(ErrInvalid, "diff: at most %d differences: want 1 or more", max)
	}
	d := &differ{max: max, players: map[string]bool{}, blocks: map[string]bool{}}
	err := d.walk(ctx, want, got)
	if errors.Is(err, errEnough) {
		err = nil
	}
	return d.out, err
}

// differ holds a Diff's findings and the keys met on either side, whose
// journals and histories are walked once accounts and blocks are.
type differ struct {
	out     []Difference
	max     int
	players map[string]bool
	blocks  map[string]bool
}

// add records a difference and returns errEnough at the max-th.
func (d *differ) add(diff Difference) error {
	d.out = append(d.out, diff)
	if len(d.out) >= d.max {
		return errEnough
	}
	return nil
}

// walk reads the read models in an order where the keys of later walks are
// known: accounts and blocks first, since they name the ledger accounts
// and histories to read.
func (d *differ) walk(ctx context.Context, want, got Store) error {
	for _, step := range []func(context.Context, Store, Store) error{
		d.walkCheckpoint, d.walkAccounts, d.walkBlocks, d.walkLedger, d.walkAdjustments, d.walkErasures, d.walkReconciliation,
	} {
		if err := step(ctx, want, got); err != nil {
			return err
		}
	}
	return nil
}

// walkCheckpoint compares the positions the two stores hold.
func (d *differ) walkCheckpoint(ctx context.Context, want, got Store) error {
	wc, err := want.Checkpoint(ctx)
	if err != nil {
		return fmt.Errorf("diff: checkpoint of want: %w", err)
	}
	gc, err := got.Checkpoint(ctx)
	if err != nil {
		return fmt.Errorf("diff: checkpoint of got: %w", err)
	}
	if wc != gc {
		return d.add(Difference{Model: "checkpoint", Field: "seq", Want: strconv.FormatUint(wc, 10), Got: strconv.FormatUint(gc, 10)})
	}
	return nil
}

// walkAccounts compares the accounts, and learns the players.
func (d *differ) walkAccounts(ctx context.Context, want, got Store) error {
	accounts := func(s Store) iter.Seq2[Account, error] {
		return pages(func(after string) ([]Account, string, error) {
			rows, err := s.Accounts(ctx, after, PageMax)
			return rows, nextAfter(rows, func(a Account) string { return a.Player }), err
		})
	}
	return merge(d, "accounts", accounts(want), accounts(got),
		func(a, b Account) int { return cmp.Compare(a.Player, b.Player) },
		func(a Account) string { d.players[a.Player] = true; return a.Player },
		func(key string, w, g Account) error { return d.row("accounts", key, w, g) })
}

// walkLedger compares the journal of every ledger account the players and
// blocks name, then every player's history.
func (d *differ) walkLedger(ctx context.Context, want, got Store) error {
	ledger := []string{domain.HouseCashAccount()}
	for _, k := range domain.AdjustmentKinds {
		ledger = append(ledger, domain.AdjustmentAccount(k))
	}
	for _, b := range slices.Sorted(maps.Keys(d.blocks)) {
		ledger = append(ledger, domain.BlockSalesAccount(b), domain.BlockPrizeAccount(b))
	}
	players := slices.Sorted(maps.Keys(d.players))
	for _, p := range players {
		ledger = append(ledger, domain.PlayerAccount(p))
	}
	for _, account := range ledger {
		if err := d.walkJournal(ctx, want, got, account); err != nil {
			return err
		}
	}
	for _, p := range players {
		if err := d.walkHistory(ctx, want, got, p); err != nil {
			return err
		}
	}
	return nil
}

// walkAdjustments compares the adjustments, in number order.
func (d *differ) walkAdjustments(ctx context.Context, want, got Store) error {
	adjustments := func(s Store) iter.Seq2[Adjustment, error] {
		rows, err := s.Adjustments(ctx, AdjustmentQuery{})
		if err != nil {
			err = fmt.Errorf("adjustments: %w", err)
		}
		return rowsOf(rows, err)
	}
	return merge(d, "adjustments", adjustments(want), adjustments(got),
		func(a, b Adjustment) int {
			return cmp.Compare(domain.AdjustmentNumber(a.ID), domain.AdjustmentNumber(b.ID))
		},
		func(a Adjustment) string { return a.ID },
		func(key string, w, g Adjustment) error { return d.row("adjustments", key, w, g) })
}

// walkErasures compares the erasures, in number order.
func (d *differ) walkErasures(ctx context.Context, want, got Store) error {
	erasures := func(s Store) iter.Seq2[Erasure, error] {
		rows, err := s.Erasures(ctx, ErasureQuery{})
		if err != nil {
			err = fmt.Errorf("erasures: %w", err)
		}
		return rowsOf(rows, err)
	}
	return merge(d, "erasures", erasures(want), erasures(got),
		func(a, b Erasure) int { return cmp.Compare(domain.ErasureNumber(a.ID), domain.ErasureNumber(b.ID)) },
		func(a Erasure) string { return a.ID },
		func(key string, w, g Erasure) error { return d.row("erasures", key, w, g) })
}

// walkReconciliation compares the reconciliation by every scope, then
// each emission's days (kept apart from the days of every emission, so
// they may differ on their own).
func (d *differ) walkReconciliation(ctx context.Context, want, got Store) error {
	type query struct {
		scope    Scope
		emission string
	}
	queries := []query{{ScopeBlock, ""}, {ScopeEmission, ""}, {ScopeDay, ""}}
	emissions := map[string]bool{}
	for b := range d.blocks {
		if e, ok := domain.BlockEmission(b); ok {
			emissions[e] = true
		}
	}
	for _, e := range slices.Sorted(maps.Keys(emissions)) {
		queries = append(queries, query{ScopeDay, e})
	}
	for _, q := range queries {
		rows := func(s Store) iter.Seq2[Reconciliation, error] {
			rows, err := s.Reconciliation(ctx, q.scope, q.emission)
			if err != nil {
				err = fmt.Errorf("reconciliation by %s: %w", q.scope, err)
			}
			return rowsOf(rows, err)
		}
		prefix := string(q.scope) + "/"
		if q.emission != "" {
			prefix += q.emission + "/"
		}
		err := merge(d, "reconciliation", rows(want), rows(got),
			func(a, b Reconciliation) int { return cmp.Compare(a.Key, b.Key) },
			func(r Reconciliation) string { return prefix + r.Key },
			func(key string, w, g Reconciliation) error { return d.row("reconciliation", key, w, g) })
		if err != nil {
			return err
		}
	}
	return nil
}

// walkBlocks compares block reports, then their tier rows apart, so that a
// tier's difference is keyed by its block and tier id.
func (d *differ) walkBlocks(ctx context.Context, want, got Store) error {
	blocks := func(s Store) iter.Seq2[BlockReport, error] {
		return pages(func(after string) ([]BlockReport, string, error) {
			rows, err := s.Blocks(ctx, after, PageMax)
			return rows, nextAfter(rows, func(b BlockReport) string { return b.ID }), err
		})
	}
	return merge(d, "blocks", blocks(want), blocks(got),
		func(a, b BlockReport) int { return cmp.Compare(a.ID, b.ID) },
		func(b BlockReport) string { d.blocks[b.ID] = true; return b.ID },
		func(id string, w, g BlockReport) error {
			return withChildren(d, "blocks", "block_tiers", id, w, g, func(b *BlockReport) *[]TierReport { return &b.Tiers },
				func(a, b TierReport) int { return cmp.Compare(a.Tier, b.Tier) }, func(t TierReport) string { return t.Tier.ID() })
		})
}

// walkJournal compares a ledger account's journal lines and totals.
func (d *differ) walkJournal(ctx context.Context, want, got Store, account string) error {
	lines := func(s Store) iter.Seq2[JournalLine, error] {
		return pages(func(after JournalCursor) ([]JournalLine, JournalCursor, error) {
			rows, err := s.Journal(ctx, account, after, PageMax)
			if err != nil {
				err = fmt.Errorf("journal of %s: %w", account, err)
			}
			return rows, nextAfter(rows, JournalLine.Cursor), err
		})
	}
	err := merge(d, "journal", lines(want), lines(got),
		func(a, b JournalLine) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Line, b.Line)) },
		func(l JournalLine) string { return fmt.Sprintf("%s@%d:%d", account, l.Seq, l.Line) },
		func(key string, w, g JournalLine) error { return d.row("journal", key, w, g) })
	if err != nil {
		return err
	}
	type totals struct {
		Credits domain.Amount `json:"credits"`
		Debits  domain.Amount `json:"debits"`
	}
	var t [2]totals
	for i, s := range []Store{want, got} {
		if t[i].Credits, t[i].Debits, err = s.AccountTotals(ctx, account); err != nil {
			return fmt.Errorf("diff: totals of %s: %w", account, err)
		}
	}
	return d.row("account_totals", account, t[0], t[1])
}

// walkHistory compares a player's plays, newest first, and their throws
// apart, so that a throw's difference is keyed by its play and number.
func (d *differ) walkHistory(ctx context.Context, want, got Store, player string) error {
	plays := func(s Store) iter.Seq2[Play, error] {
		return pages(func(before string) ([]Play, string, error) {
			page, err := s.History(ctx, player, before, PageMax)
			if err != nil {
				err = fmt.Errorf("history of %s: %w", player, err)
			}
			return page.Plays, page.Next, err
		})
	}
	return merge(d, "plays", plays(want), plays(got),
		func(a, b Play) int { return cmp.Or(cmp.Compare(b.Seq, a.Seq), cmp.Compare(a.ID, b.ID)) },
		func(p Play) string { return p.ID },
		func(id string, w, g Play) error {
			return withChildren(d, "plays", "throws", id, w, g, func(p *Play) *[]Throw { return &p.Throws },
				func(a, b Throw) int { return cmp.Compare(a.Throw, b.Throw) }, func(t Throw) string { return strconv.Itoa(t.Throw) })
		})
}

// withChildren compares two rows without their child rows (a block's tiers,
// a play's throws), then the child rows as a model of their own, keyed
// "key/child", so that a child's difference names which child.
func withChildren[R, C any](d *differ, model, childModel, key string, w, g R, children func(*R) *[]C, order func(a, b C) int, childKey func(C) string) error {
	wc, gc := *children(&w), *children(&g)
	*children(&w), *children(&g) = nil, nil
	if err := d.row(model, key, w, g); err != nil {
		return err
	}
	return merge(d, childModel, rowsOf(wc, nil), rowsOf(gc, nil), order,
		func(c C) string { return key + "/" + childKey(c) },
		func(k string, w, g C) error { return d.row(childModel, k, w, g) })
}

// nextAfter is the cursor of the page after rows: the last row's, or the
// zero cursor (no more pages) after a short page.
func nextAfter[T any, C comparable](rows []T, cursor func(T) C) C {
	var zero C
	if len(rows) < PageMax {
		return zero
	}
	return cursor(rows[len(rows)-1])
}

// pages yields the rows of a paged query, from the zero cursor to the
// first page whose next cursor is the zero cursor, at most diffPagesMax
// pages.
func pages[T any, C comparable](fetch func(after C) ([]T, C, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero, after C
		for range diffPagesMax {
			rows, next, err := fetch(after)
			for r, err := range rowsOf(rows, err) {
				if !yield(r, err) || err != nil {
					return
				}
			}
			if next == zero {
				return
			}
			after = next
		}
		var none T
		yield(none, fmt.Errorf("%w: more than %d pages", ErrInvalid, diffPagesMax))
	}
}

// rowsOf yields the rows of a query read already, or its error.
func rowsOf[T any](rows []T, err error) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		if err != nil {
			var none T
			yield(none, err)
			return
		}
		for _, r := range rows {
			if !yield(r, nil) {
				return
			}
		}
	}
}

// merge walks two row sequences sorted by order, as a merge join: rows of
// the same order are compared with same, a row on one side only is a
// Difference with no field. key names each row read, once, on either
// side. A side whose rows are not strictly increasing
// is an error rather than a guess, since matching would be meaningless.
func merge[T any](d *differ, model string, want, got iter.Seq2[T, error], order func(a, b T) int, key func(T) string, same func(key string, w, g T) error) error {
	nextW, stopW := iter.Pull2(want)
	defer stopW()
	nextG, stopG := iter.Pull2(got)
	defer stopG()
	type side struct {
		name string
		next func() (T, error, bool)
		row  T
		key  string
		ok   bool
		seen bool
		last T
	}
	w, g := &side{name: "want", next: nextW}, &side{name: "got", next: nextG}
	advance := func(s *side) error {
		var err error
		s.row, err, s.ok = s.next()
		if !s.ok {
			return nil
		}
		if err != nil {
			return fmt.Errorf("diff: %s of %s: %w", model, s.name, err)
		}
		last := s.key
		s.key = key(s.row)
		if s.seen && order(s.last, s.row) >= 0 {
			return fmt.Errorf("diff: %s of %s: row %s after %s: out of order", model, s.name, s.key, last)
		}
		s.last, s.seen = s.row, true
		return nil
	}
	if err := errors.Join(advance(w), advance(g)); err != nil {
		return err
	}
	for w.ok || g.ok {
		c := 0
		switch {
		case !g.ok:
			c = -1
		case !w.ok:
			c = 1
		default:
			c = order(w.row, g.row)
		}
		var err error
		switch {
		case c < 0:
			err = d.add(Difference{Model: model, Key: w.key, Want: rowPresent, Got: rowAbsent})
			err = errors.Join(err, advance(w))
		case c > 0:
			err = d.add(Difference{Model: model, Key: g.key, Want: rowAbsent, Got: rowPresent})
			err = errors.Join(err, advance(g))
		default:
			err = errors.Join(same(w.key, w.row, g.row), advance(w), advance(g))
		}
		if err != nil {
			if errors.Is(err, errEnough) {
				return errEnough
			}
			return err
		}
	}
	return nil
}

// row compares two rows field by field in their JSON form, the form the
// API serves: every exported field is compared without a list to keep in
// step with the read models, and values compare as served (a decimal
// 0.70 equals 0.7, hashes compare as hex).
func (d *differ) row(model, key string, want, got any) error {
	wb, err := json.Marshal(want)
	if err != nil {
		return fmt.Errorf("diff: %s %s of want: %w", model, key, err)
	}
	gb, err := json.Marshal(got)
	if err != nil {
		return fmt.Errorf("diff: %s %s of got: %w", model, key, err)
	}
	if bytes.Equal(wb, gb) {
		return nil
	}
	wv, err := decodeJSON(wb)
	if err != nil {
		return fmt.Errorf("diff: %s %s of want: %w", model, key, err)
	}
	gv, err := decodeJSON(gb)
	if err != nil {
		return fmt.Errorf("diff: %s %s of got: %w", model, key, err)
	}
	return d.value(model, key, "", wv, gv)
}

// decodeJSON reads JSON keeping numbers as written.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// value compares two decoded JSON values at field, member by member for
// two objects, item by item for two lists, as a whole otherwise. A member
// missing on one side (omitempty) compares as null.
func (d *differ) value(model, key, field string, w, g any) error {
	switch wt := w.(type) {
	case map[string]any:
		if gt, ok := g.(map[string]any); ok {
			names := slices.Sorted(maps.Keys(wt))
			for name := range gt {
				if _, ok := wt[name]; !ok {
					names = append(names, name)
				}
			}
			slices.Sort(names)
			for _, name := range names {
				sub := name
				if field != "" {
					sub = field + "." + name
				}
				if err := d.value(model, key, sub, wt[name], gt[name]); err != nil {
					return err
				}
			}
			return nil
		}
	case []any:
		if gt, ok := g.([]any); ok {
			for i := range max(len(wt), len(gt)) {
				var wi, gi any = rowAbsent, rowAbsent
				if i < len(wt) {
					wi = wt[i]
				}
				if i < len(gt) {
					gi = gt[i]
				}
				if err := d.value(model, key, field+"["+strconv.Itoa(i)+"]", wi, gi); err != nil {
					return err
				}
			}
			return nil
		}
	}
	ws, gs := jsonText(w), jsonText(g)
	if ws == gs {
		return nil
	}
	return d.add(Difference{Model: model, Key: key, Field: field, Want: ws, Got: gs})
}

// jsonText writes a decoded JSON value for a Difference: strings and
// numbers bare, null as null, objects and lists as compact JSON.
func jsonText(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return v
	case json.Number:
		return v.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
