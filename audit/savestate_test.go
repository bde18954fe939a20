package audit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// auditConfig is the configuration every audit of these tests runs under.
func auditConfig(tb testing.TB) audit.Config {
	return audit.Config{Rules: smallRules(tb), PublicKey: operatorPub, ViolationsMax: 1000}
}

// saveState finishes a, writes its state to a file of dir and reads it
// back, as the next day's audit does.
func saveState(tb testing.TB, a *audit.Auditor, dir string) (*audit.Report, *audit.State) {
	tb.Helper()
	r := a.Finish()
	st, err := a.State()
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, "audit.state")
	if err := audit.WriteStateFile(path, st); err != nil {
		tb.Fatal(err)
	}
	back, err := audit.ReadStateFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return r, back
}

// auditAndSave audits a live stream from its first event and saves the
// state.
func auditAndSave(tb testing.TB, store *eventstore.NATSStore) (*audit.Report, *audit.State) {
	tb.Helper()
	a := newAuditor(tb)
	if _, err := audit.ReadStore(ctx(tb), store, a, 1); err != nil {
		tb.Fatal(err)
	}
	return saveState(tb, a, tb.TempDir())
}

// resumeStore resumes from st on a live stream: the continuity check, then
// the events after the saved position. ok is the continuity check's answer.
func resumeStore(tb testing.TB, st *audit.State, store *eventstore.NATSStore) (*audit.Auditor, bool) {
	tb.Helper()
	a, err := audit.Resume(auditConfig(tb), st)
	if err != nil {
		tb.Fatal(err)
	}
	ok, err := a.CheckContinuity(audit.StoreEvent(ctx(tb), store))
	if err != nil {
		tb.Fatal(err)
	}
	if ok {
		if _, err := audit.ReadStore(ctx(tb), store, a, st.LastSequence+1); err != nil {
			tb.Fatal(err)
		}
	}
	return a, ok
}

// sameReport compares two reports but for what belongs to one run (its
// time, its rate, where it resumed and how many events it read).
func sameReport(tb testing.TB, got, want *audit.Report) {
	tb.Helper()
	norm := func(r *audit.Report) string {
		c := *r
		c.ElapsedSeconds, c.EventsPerSecond, c.FromState, c.NewEvents = 0, 0, 0, 0
		b, err := json.Marshal(c)
		if err != nil {
			tb.Fatal(err)
		}
		return string(b)
	}
	if g, w := norm(got), norm(want); g != w {
		tb.Fatalf("incremental report differs from the full audit's:\n got %s\nwant %s", g, w)
	}
}

// cutStreams returns the streams the incremental audits are cut in: clean,
// tampered (a deposit's and a stake's amounts changed, at indexes i and
// j) and suspended (sales suspended across the cuts).
func cutStreams(t *testing.T) (streams map[string][]eventstore.RecordedEvent, i, j int) {
	t.Helper()
	clean := played(t)
	tampered := rechain(clean)
	i, dep := find[*domain.FundsDeposited](t, tampered, 0, nil)
	dep.Amount++ // balance_after no longer follows: balance_mismatch
	edit(t, tampered, i, dep)
	j, st := find[*domain.StakePlaced](t, tampered, 14, nil)
	st.Stake++ // stake_price, balance_mismatch
	edit(t, tampered, j, st)
	tampered = rechain(tampered)
	// A suspension of sales in force across the cuts, another ended, and a
	// stake inside the one in force (and every one after it): suspension_breached.
	two, every := domain.SalesScope{Kind: domain.ScopePrice, Price: 200}, domain.SalesScope{Kind: domain.ScopeAll}
	suspended := slices.Clone(clean)
	k, _ := find[*domain.StakePlaced](t, suspended, 14, nil)
	suspended = slices.Insert(suspended, k,
		forge(t, suspended, k, -2*time.Millisecond, &domain.SalesSuspended{Suspension: "S2", Scope: every, Reason: "fault", By: insider}))
	suspended = slices.Insert(suspended, 3,
		forge(t, suspended, 3, 0, &domain.SalesSuspended{Suspension: "S1", Scope: two, Reason: "fault", By: insider}),
		forge(t, suspended, 3, 0, &domain.SalesResumed{Suspension: "S1", Scope: two, Reason: "fixed", By: insider}))
	suspended = rechain(suspended)
	return map[string][]eventstore.RecordedEvent{"clean": clean, "tampered": tampered, "suspended": suspended}, i, j
}

// streamConfig is the audit's configuration for a stream of cutStreams:
// the rechained ones carry no seal.
func streamConfig(t *testing.T, name string) audit.Config {
	cfg := auditConfig(t)
	if name != "clean" {
		cfg.PublicKey, cfg.SealGapMax = nil, 1<<62
	}
	return cfg
}

// fullAudit audits events in one run and returns its report and state.
func fullAudit(t *testing.T, cfg audit.Config, events []eventstore.RecordedEvent) (*audit.Report, *audit.State) {
	t.Helper()
	full, err := audit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		full.Check(ev)
	}
	want := full.Finish()
	wantState, err := full.State()
	if err != nil {
		t.Fatal(err)
	}
	return want, wantState
}

// An audit that ends a round (Round) after each cut and goes on reports at
// each round what an audit of the events up to the cut reports, with the
// same state, and ends with the report and state of one audit of the whole
// stream; a round with no event since the last one reports the same, and
// events fed as hashed by a checked read (CheckHashed) are verified as the
// others.
func TestRoundsEqualFullAudits(t *testing.T) {
	streams, i, j := cutStreams(t)
	for name, events := range streams {
		cfg := streamConfig(t, name)
		a, err := audit.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cuts := slices.Compact(slices.Sorted(slices.Values([]int{1, 7, len(events) / 3, len(events) / 2, i + 1, j, len(events) - 1, len(events)})))
		prev := 0
		for _, cut := range cuts {
			for k, ev := range events[prev:cut] {
				if k%2 == 0 {
					a.CheckHashed(ev)
				} else {
					a.Check(ev)
				}
			}
			prev = cut
			got, err := a.Round()
			if err != nil {
				t.Fatal(err)
			}
			want, wantState := fullAudit(t, cfg, events[:cut])
			sameReport(t, got, want)
			again, err := a.Round() // nothing fed since: the same report
			if err != nil {
				t.Fatal(err)
			}
			sameReport(t, again, want)
			gotState, err := a.State()
			if err != nil {
				t.Fatal(err)
			}
			if g, w := mustJSON(t, gotState), mustJSON(t, wantState); !bytes.Equal(g, w) {
				t.Fatalf("%s cut %d: the state after a round differs from a full audit's", name, cut)
			}
		}
		if want, _ := fullAudit(t, cfg, events); want.OK != (name == "clean") {
			t.Fatalf("%s: ok=%t", name, want.OK)
		}
	}
}

// An audit cut anywhere, its state saved to a file and resumed, ends with
// the report and the state of one audit of the whole stream: cuts inside a
// play, inside the block that sells out, after its close, with a
// violation before the cut and one after.
func TestIncrementalAuditEqualsFullAudit(t *testing.T) {
	streams, i, j := cutStreams(t)
	for name, events := range streams {
		cfg := streamConfig(t, name)
		want, wantState := fullAudit(t, cfg, events)
		if name == "suspended" && (want.ViolationCounts[audit.CodeSuspensionBreached] == 0 || len(want.ViolationCounts) != 1) {
			t.Fatalf("suspended: %v", want.ViolationCounts)
		}
		if (name == "clean") != want.OK {
			t.Fatalf("%s: full audit ok=%t: %v", name, want.OK, want.ViolationCounts)
		}
		for _, cut := range []int{1, 7, len(events) / 3, len(events) / 2, i + 1, j, len(events) - 1, len(events)} {
			first, err := audit.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range events[:cut] {
				first.Check(ev)
			}
			_, saved := saveState(t, first, t.TempDir())
			next, err := audit.Resume(cfg, saved)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range events[cut:] {
				next.Check(ev)
			}
			got := next.Finish()
			sameReport(t, got, want)
			if got.FromState != events[cut-1].Sequence || got.NewEvents != uint64(len(events)-cut) {
				t.Fatalf("%s cut %d: from_state %d, new_events %d", name, cut, got.FromState, got.NewEvents)
			}
			gotState, err := next.State()
			if err != nil {
				t.Fatal(err)
			}
			if g, w := mustJSON(t, gotState), mustJSON(t, wantState); !bytes.Equal(g, w) {
				t.Fatalf("%s cut %d: the resumed audit's state differs from the full audit's", name, cut)
			}
		}
	}
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// On a live stream that grows between two audits: the second reads only
// the new events and reports what a full audit reports; a tamper after the
// saved position is found by it; a rewrite before the saved position, even
// re-signed with the operator's own key, which a full audit cannot tell
// from the original, fails the continuity check; so does a stream shorter
// than the saved position.
func TestIncrementalAuditOnALiveStream(t *testing.T) {
	events := played(t)
	// The stream grows by whole appends: the first half ends at an
	// append's last event (the plays interleave differently on each build
	// of the stream, and a cut inside a play's last throw and its
	// settlement is no stream a writer leaves).
	cut := len(events) / 2
	for events[cut-1].AppendRemaining > 0 {
		cut++
	}
	t.Run("Continues", func(t *testing.T) {
		s := startServer(t, nil)
		commit(t, s.store, events[:cut], operatorKey)
		r, st := auditAndSave(t, s.store)
		if !r.OK {
			t.Fatalf("first half: %v", r.Violations)
		}
		commit(t, s.store, events[cut:], operatorKey)
		next, ok := resumeStore(t, st, s.store)
		if !ok {
			t.Fatal("continuity refused on the same stream")
		}
		got, want := next.Finish(), auditStore(t, s.store)
		sameReport(t, got, want)
		if !got.OK || got.NewEvents == 0 || got.NewEvents >= got.Events || got.FromState != st.LastSequence {
			t.Fatalf("resumed: ok %t, %d new of %d events, from %d", got.OK, got.NewEvents, got.Events, got.FromState)
		}
	})
	t.Run("TamperAfterThePosition", func(t *testing.T) {
		s := startServer(t, nil)
		commit(t, s.store, events[:cut], operatorKey)
		_, st := auditAndSave(t, s.store)
		rest := slices.Clone(events[cut:])
		i, dep := find[*domain.FundsDeposited](t, rest, 0, nil)
		dep.Amount += 1000
		edit(t, rest, i, dep)
		commit(t, s.store, rest, operatorKey)
		next, ok := resumeStore(t, st, s.store)
		if !ok {
			t.Fatal("continuity refused though the tamper is after the position")
		}
		got := next.Finish()
		v := wantCode(t, got, audit.CodeBalanceMismatch, audit.CodeBooksUnbalanced)
		if v.Sequence <= st.LastSequence {
			t.Fatalf("violation at %d, before the saved position %d", v.Sequence, st.LastSequence)
		}
		sameReport(t, got, auditStore(t, s.store))
	})
	t.Run("RewriteBeforeThePosition", func(t *testing.T) {
		original := rewrite(t, events[:cut], operatorKey)
		_, st := auditAndSave(t, original)
		forged := append([]eventstore.RecordedEvent(nil), events...)
		i, dep := find[*domain.FundsDeposited](t, forged, 0, nil)
		dep.Key = "rewritten" // nothing an audit checks
		edit(t, forged, i, dep)
		if i >= cut {
			t.Fatalf("the first deposit at %d is not before the cut %d", i, cut)
		}
		// Re-signed with the operator's key, consistent from end to end.
		rewritten := rewrite(t, forged, operatorKey)
		next, ok := resumeStore(t, st, rewritten)
		got := next.Finish()
		if ok || got.OK || got.ViolationCounts[audit.CodeContinuityBroken] != 1 || got.NewEvents != 0 {
			t.Fatalf("rewrite before the position: continuity %t, report ok %t %v, %d new events", ok, got.OK, got.ViolationCounts, got.NewEvents)
		}
		v := wantCode(t, got, audit.CodeContinuityBroken)
		if v.Sequence == 0 || !strings.Contains(v.Found, "hash") {
			t.Fatalf("continuity violation: %+v", v)
		}
		// A full audit of the rewritten stream finds nothing: only the
		// state the regulator kept tells the rewrite.
		if r := auditStore(t, rewritten); !r.OK {
			t.Fatalf("full audit of the rewrite: %v", r.Violations)
		}
	})
	t.Run("StreamShorterThanThePosition", func(t *testing.T) {
		long := rewrite(t, events, operatorKey)
		_, st := auditAndSave(t, long)
		next, ok := resumeStore(t, st, rewrite(t, events[:cut], operatorKey))
		r := next.Finish()
		v := wantCode(t, r, audit.CodeContinuityBroken, audit.CodeStreamTruncated)
		if ok || v.Found != "no event" || r.ViolationCounts[audit.CodeStreamTruncated] != 1 {
			t.Fatalf("shorter stream: continuity %t, %+v, %v", ok, v, r.ViolationCounts)
		}
	})
}

// A state file that cannot be used is refused with ErrStateUnusable and a
// reason: truncated, of an unknown version, altered, or written under
// another configuration. A missing one is fs.ErrNotExist (a full audit
// then).
func TestUnusableStateFilesAreRefused(t *testing.T) {
	dir := t.TempDir()
	a := newAuditor(t)
	for _, ev := range played(t) {
		a.Check(ev)
	}
	_, st := saveState(t, a, dir)
	good, err := os.ReadFile(filepath.Join(dir, "audit.state"))
	if err != nil {
		t.Fatal(err)
	}
	balance := bytes.Index(good, []byte(`"deposits":"`)) + len(`"deposits":"`)
	altered := bytes.Clone(good)
	altered[balance] = '9'
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"truncated":       {good[:len(good)/2], "truncated or corrupt"},
		"empty":           {nil, "truncated or corrupt"},
		"unknown version": {bytes.Replace(good, []byte(`"version":1,`), []byte(`"version":2,`), 1), "format version 2; this tresor reads version 1 only"},
		"other format":    {bytes.Replace(good, []byte(audit.StateFormat), []byte("tresor-writer-snapshot"), 1), `format "tresor-writer-snapshot"`},
		"altered":         {altered, "corrupt: its state hashes to"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, c.b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := audit.ReadStateFile(path)
		if !errors.Is(err, audit.ErrStateUnusable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v naming %q", name, err, audit.ErrStateUnusable, c.want)
		}
	}
	if _, err := audit.ReadStateFile(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	other := auditConfig(t)
	other.SealGapMax = 7
	if _, err := audit.Resume(other, st); !errors.Is(err, audit.ErrStateUnusable) || !strings.Contains(err.Error(), "seal gap 7") {
		t.Errorf("other seal gap: %v", err)
	}
	noKey := auditConfig(t)
	noKey.PublicKey = nil
	if _, err := audit.Resume(noKey, st); !errors.Is(err, audit.ErrStateUnusable) {
		t.Errorf("without the key: %v", err)
	}
	bad := *st
	bad.OnSale = []string{"no-such-block"}
	if _, err := audit.Resume(auditConfig(t), &bad); !errors.Is(err, audit.ErrStateUnusable) || !strings.Contains(err.Error(), "no-such-block") {
		t.Errorf("inconsistent state: %v", err)
	}
}
