package projections_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
)

// standardStore projects the conformance suite's stream into a fresh
// in-memory store, in batches of batch events.
func standardStore(t *testing.T, batch int) (*memstore.Store, *projectionstest.World) {
	t.Helper()
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	s := memstore.New(rules)
	t.Cleanup(func() { _ = s.Close() })
	projectionstest.Project(t, s, w.Events, batch)
	return s, w
}

func TestDiffSameStreamIsEmpty(t *testing.T) {
	a, _ := standardStore(t, 7)
	b, _ := standardStore(t, 1000)
	diffs, err := projections.Diff(context.Background(), a, b, 10)
	if err != nil || len(diffs) != 0 {
		t.Fatalf("Diff of two projections of one stream: %v, %v", diffs, err)
	}
}

// TestDiffStopsAtMax compares a store with an empty one: every row is on
// one side only, and Diff stops at max.
func TestDiffStopsAtMax(t *testing.T) {
	full, w := standardStore(t, 50)
	empty := memstore.New(projectionstest.SmallRules(t))
	diffs, err := projections.Diff(context.Background(), full, empty, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []projections.Difference{
		{Model: "checkpoint", Field: "seq", Want: strconv.Itoa(len(w.Events)), Got: "0"},
		{Model: "accounts", Key: "p1", Want: "present", Got: "absent"},
		{Model: "accounts", Key: "p2", Want: "present", Got: "absent"},
	}
	if !reflect.DeepEqual(diffs, want) {
		t.Fatalf("Diff against an empty store:\n got %v\nwant %v", diffs, want)
	}
	if _, err := projections.Diff(context.Background(), full, empty, 0); !errors.Is(err, projections.ErrInvalid) {
		t.Fatalf("Diff with max 0: %v, want ErrInvalid", err)
	}
}

// editing serves a store's rows with one field of one row changed: the
// first row of the edited type whose field mutate can change.
type editing struct {
	projections.Store
	typ   reflect.Type
	field int
	done  bool
}

// edit changes the field in row (a pointer to a row) if it is of the
// edited type and nothing was edited yet.
func (e *editing) edit(row any) {
	v := reflect.ValueOf(row).Elem()
	if e.done || v.Type() != e.typ {
		return
	}
	e.done = mutate(v.Field(e.field))
}

// mutate sets a non-zero field to zero, a zero one of a basic kind to a
// non-zero value; it reports whether it changed the field.
func mutate(f reflect.Value) bool {
	if !f.IsZero() {
		f.SetZero()
		return true
	}
	switch f.Kind() {
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		f.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		f.SetUint(1)
	case reflect.String:
		f.SetString("x")
	default:
		return false
	}
	return true
}

func (e *editing) Accounts(ctx context.Context, after string, limit int) ([]projections.Account, error) {
	rows, err := e.Store.Accounts(ctx, after, limit)
	for i := range rows {
		e.edit(&rows[i])
	}
	return rows, err
}

func (e *editing) Journal(ctx context.Context, account string, after projections.JournalCursor, limit int) ([]projections.JournalLine, error) {
	rows, err := e.Store.Journal(ctx, account, after, limit)
	for i := range rows {
		e.edit(&rows[i])
	}
	return rows, err
}

func (e *editing) Blocks(ctx context.Context, after string, limit int) ([]projections.BlockReport, error) {
	rows, err := e.Store.Blocks(ctx, after, limit)
	for i := range rows {
		for j := range rows[i].Tiers {
			e.edit(&rows[i].Tiers[j])
		}
		e.edit(&rows[i])
	}
	return rows, err
}

func (e *editing) History(ctx context.Context, player, before string, limit int) (projections.HistoryPage, error) {
	page, err := e.Store.History(ctx, player, before, limit)
	for i := range page.Plays {
		for j := range page.Plays[i].Throws {
			e.edit(&page.Plays[i].Throws[j])
		}
		e.edit(&page.Plays[i])
	}
	return page, err
}

func (e *editing) Reconciliation(ctx context.Context, scope projections.Scope, emission string) ([]projections.Reconciliation, error) {
	rows, err := e.Store.Reconciliation(ctx, scope, emission)
	for i := range rows {
		e.edit(&rows[i])
	}
	return rows, err
}

// TestDiffSeesEveryField changes each field of each row type the Store
// serves, one at a time, in one row of a real projection: Diff must notice
// every change, naming the field (or, for a field that is the row's key,
// the row on one side only). A field added to a read model and left out of
// the comparison fails here.
func TestDiffSeesEveryField(t *testing.T) {
	base, _ := standardStore(t, 50)
	models := map[reflect.Type]string{
		reflect.TypeFor[projections.Account]():        "accounts",
		reflect.TypeFor[projections.JournalLine]():    "journal",
		reflect.TypeFor[projections.BlockReport]():    "blocks",
		reflect.TypeFor[projections.TierReport]():     "block_tiers",
		reflect.TypeFor[projections.Play]():           "plays",
		reflect.TypeFor[projections.Throw]():          "throws",
		reflect.TypeFor[projections.Reconciliation](): "reconciliation",
	}
	// A block's tiers and a play's throws are rows of their own models.
	nested := map[string]string{"BlockReport.Tiers": "block_tiers", "Play.Throws": "throws"}
	for typ, model := range models {
		for i := range typ.NumField() {
			f := typ.Field(i)
			t.Run(typ.Name()+"."+f.Name, func(t *testing.T) {
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "" || name == "-" {
					t.Fatalf("field %s.%s has no JSON name: Diff compares rows as the API serves them", typ.Name(), f.Name)
				}
				wantModel := model
				if m, ok := nested[typ.Name()+"."+f.Name]; ok {
					wantModel, name = m, ""
				}
				e := &editing{Store: base, typ: typ, field: i}
				diffs, err := projections.Diff(context.Background(), base, e, 1000)
				if !e.done {
					t.Fatalf("no row of the standard stream lets the test change %s.%s", typ.Name(), f.Name)
				}
				if err != nil && strings.Contains(err.Error(), "out of order") {
					return // a key field changed: the rows no longer sort
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range diffs {
					if d.Model == wantModel && (d.Field == "" || d.Field == name || strings.HasPrefix(d.Field, name+".") || strings.HasPrefix(d.Field, name+"[")) {
						return
					}
				}
				t.Fatalf("changing %s.%s: Diff found %v, want a difference of %s field %q", typ.Name(), f.Name, diffs, wantModel, name)
			})
		}
	}
}

// emissionDaysOff serves one emission's day rows with their sales off by a
// cent, and every other reconciliation as it is.
type emissionDaysOff struct {
	projections.Store
	emission string
}

func (e emissionDaysOff) Reconciliation(ctx context.Context, scope projections.Scope, emission string) ([]projections.Reconciliation, error) {
	rows, err := e.Store.Reconciliation(ctx, scope, emission)
	for i := range rows {
		if scope == projections.ScopeDay && emission == e.emission {
			rows[i].Sales++
		}
	}
	return rows, err
}

// TestDiffSeesOneEmissionsDays: an emission's day rows are compared apart
// from the days of every emission, which stay equal here.
func TestDiffSeesOneEmissionsDays(t *testing.T) {
	base, _ := standardStore(t, 50)
	diffs, err := projections.Diff(context.Background(), base, emissionDaysOff{Store: base, emission: "E0002"}, 10)
	if err != nil || len(diffs) == 0 {
		t.Fatalf("Diff with E0002's days off: %v, %v", diffs, err)
	}
	for _, d := range diffs {
		if d.Model != "reconciliation" || !strings.HasPrefix(d.Key, "day/E0002/") || d.Field != "sales" {
			t.Errorf("difference %+v, want E0002's day sales only", d)
		}
	}
}
