package audit_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
)

// served is the conformance suite's stream (written by the real write
// side) projected and served by the real API, with what a verifier learns
// elsewhere: each block's commitment as BlockOpened published it and each
// closed block's seed as BlockClosed revealed it.
type served struct {
	rules  *domain.RuleSet
	api    *api.Server
	token  string
	roots  map[string][32]byte
	seeds  map[string]domain.Seed
	events []projections.Envelope
}

func serve(t *testing.T) *served {
	t.Helper()
	rules := projectionstest.SmallRules(t)
	w := projectionstest.Standard(t, rules)
	store := memstore.New(rules)
	t.Cleanup(func() { _ = store.Close() })
	projectionstest.Project(t, store, w.Events, 100)
	tokens, err := api.NewTokens([]byte(strings.Repeat("k", api.TokenKeySize)))
	if err != nil {
		t.Fatal(err)
	}
	token, err := tokens.Mint(api.RoleRegulator, "", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := &served{rules: rules, api: api.NewServer(api.Config{Store: store, Tokens: tokens}), token: token,
		roots: map[string][32]byte{}, seeds: map[string]domain.Seed{}, events: w.Events}
	for _, env := range w.Events {
		switch e := env.Event.(type) {
		case *domain.BlockOpened:
			s.roots[e.Block] = e.Commitment.Root
		case *domain.BlockClosed:
			s.seeds[e.Block] = e.Seed
		}
	}
	return s
}

// get answers a GET as the regulator and returns the body.
func (s *served) get(t *testing.T, path string) []byte {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	rec := httptest.NewRecorder()
	s.api.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// independent returns the options of a verifier who has the block's
// published root and, if the block is closed, its revealed seed.
func (s *served) independent(block string) audit.VerifyPlayOptions {
	opt := audit.VerifyPlayOptions{Rules: s.rules}
	root := s.roots[block]
	opt.Root = &root
	if seed, ok := s.seeds[block]; ok {
		opt.Seed = &seed
	}
	return opt
}

func statuses(v audit.PlayVerdict) map[string]audit.CheckStatus {
	m := map[string]audit.CheckStatus{}
	for _, c := range v.Checks {
		m[c.Name] = c.Status
	}
	return m
}

// TestVerifyPlayAcceptsEveryServedPlay checks every play of every history
// page the API serves, settled, in progress, completed by the system, of
// a closed block and of open ones: each is valid, with the root checked
// independently and, for the closed block, the whole deck rebuilt.
func TestVerifyPlayAcceptsEveryServedPlay(t *testing.T) {
	s := serve(t)
	seen := map[projections.PlayStatus]int{}
	for _, player := range []string{"p1", "p2", "p3", "p4", "p5"} {
		docs, err := audit.ReadPlays(s.get(t, "/v1/players/"+player+"/plays?limit=100"))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			seen[doc.Status]++
			one, err := audit.ReadPlays(s.get(t, "/v1/players/"+player+"/plays/"+doc.PlayID))
			if err != nil || len(one) != 1 {
				t.Fatalf("the per-play answer of %s: %v, %v", doc.PlayID, one, err)
			}
			v := audit.VerifyPlay(one[0], s.independent(doc.BlockID))
			if !v.Valid || v.RootSource != audit.SourceIndependent {
				t.Fatalf("play %s: %+v", doc.PlayID, v)
			}
			st := statuses(v)
			_, closed := s.seeds[doc.BlockID]
			// A play in progress is served without its proof: what needs
			// the proof waits for the settlement.
			wantProof, wantDeck := audit.CheckPass, audit.CheckSkip
			if closed {
				wantDeck = audit.CheckPass
			}
			if doc.Status == projections.StatusInProgress {
				wantProof = audit.CheckSkip
				if doc.Proof != nil {
					t.Errorf("play %s in progress is served with its proof", doc.PlayID)
				}
			}
			for name, want := range map[string]audit.CheckStatus{
				audit.CheckDocument: audit.CheckPass, audit.CheckRoot: audit.CheckPass, audit.CheckInclusion: wantProof,
				audit.CheckScenario: wantProof, audit.CheckScenarioShown: wantProof, audit.CheckThrows: audit.CheckPass,
				audit.CheckTier: wantProof, audit.CheckPrize: wantProof, audit.CheckDeck: wantDeck,
			} {
				if st[name] != want {
					t.Errorf("play %s (%s): check %s %s, want %s: %+v", doc.PlayID, doc.Status, name, st[name], want, v.Checks)
				}
			}
			// Without the published root the verdict says the root is the
			// document's own claim, and does not pass the root check.
			if v := audit.VerifyPlay(doc, audit.VerifyPlayOptions{Rules: s.rules}); !v.Valid || v.RootSource != audit.SourceDocument || statuses(v)[audit.CheckRoot] != audit.CheckSkip {
				t.Errorf("play %s against its own root: %+v", doc.PlayID, v)
			}
		}
	}
	for _, st := range []projections.PlayStatus{projections.StatusSettled, projections.StatusInProgress, projections.StatusCompletedBySystem} {
		if seen[st] == 0 {
			t.Errorf("no play %s in the served histories", st)
		}
	}
}

// winningPlay returns the JSON answer of a settled winning play of the
// closed block.
func (s *served) winningPlay(t *testing.T) map[string]any {
	t.Helper()
	for _, player := range []string{"p1", "p2", "p3", "p4"} {
		var page struct{ Plays []map[string]any }
		if err := json.Unmarshal(s.get(t, "/v1/players/"+player+"/plays?limit=100"), &page); err != nil {
			t.Fatal(err)
		}
		for _, p := range page.Plays {
			if p["block_id"] == "E0001-B001" && p["status"] == "settled" && p["prize"] != nil && p["prize"] != "0.00" {
				return p
			}
		}
	}
	t.Fatal("no settled winning play of the closed block")
	return nil
}

// TestVerifyPlayNamesTampering changes one thing at a time in a real
// settled winning play, or in what the verifier holds: each variant is
// invalid, and the check that names the change fails.
func TestVerifyPlayNamesTampering(t *testing.T) {
	s := serve(t)
	orig := s.winningPlay(t)
	block := orig["block_id"].(string)
	flipHex := func(h string) string {
		if h[0] == '0' {
			return "1" + h[1:]
		}
		return "0" + h[1:]
	}
	otherTier := func(id any) string {
		if id == domain.TierNone.ID() {
			return domain.ChandelierX1.ID()
		}
		return domain.TierNone.ID()
	}
	for _, tc := range []struct {
		name   string
		edit   func(p map[string]any, opt *audit.VerifyPlayOptions)
		failed []string
	}{
		{"settled tier", func(p map[string]any, _ *audit.VerifyPlayOptions) { p["tier"] = otherTier(p["tier"]) },
			[]string{audit.CheckTier}},
		{"proof tier", func(p map[string]any, _ *audit.VerifyPlayOptions) {
			proof := p["proof"].(map[string]any)
			proof["tier"] = otherTier(proof["tier"])
			// The scenario is derived from the tier too: what was shown no
			// longer matches it.
		}, []string{audit.CheckInclusion, audit.CheckScenarioShown, audit.CheckThrows, audit.CheckTier, audit.CheckPrize, audit.CheckDeck}},
		{"prize", func(p map[string]any, _ *audit.VerifyPlayOptions) { p["prize"] = "999.00" },
			[]string{audit.CheckPrize}},
		{"proof sibling", func(p map[string]any, _ *audit.VerifyPlayOptions) {
			path := p["proof"].(map[string]any)["path"].([]any)
			path[0] = flipHex(path[0].(string))
		}, []string{audit.CheckInclusion}},
		{"salt", func(p map[string]any, _ *audit.VerifyPlayOptions) {
			proof := p["proof"].(map[string]any)
			proof["salt"] = flipHex(proof["salt"].(string))
		}, []string{audit.CheckInclusion, audit.CheckScenarioShown, audit.CheckThrows, audit.CheckDeck}},
		{"throw", func(p map[string]any, _ *audit.VerifyPlayOptions) {
			th := p["throws"].([]any)[1].(map[string]any)
			th["steps"] = th["steps"].(float64) + 1
		}, []string{audit.CheckThrows}},
		{"chest shown", func(p map[string]any, _ *audit.VerifyPlayOptions) {
			c := p["chests"].([]any)[0].(map[string]any)
			c["cell"] = map[string]any{"row": 9, "col": 9}
		}, []string{audit.CheckScenarioShown}},
		{"start", func(p map[string]any, _ *audit.VerifyPlayOptions) { delete(p, "start") },
			[]string{audit.CheckScenarioShown}},
		{"play id", func(p map[string]any, _ *audit.VerifyPlayOptions) { p["play_id"] = domain.PlayID(block, 11) },
			[]string{audit.CheckDocument}},
		{"published root", func(_ map[string]any, opt *audit.VerifyPlayOptions) {
			root := *opt.Root
			root[0] ^= 1
			opt.Root = &root
		}, []string{audit.CheckRoot, audit.CheckInclusion, audit.CheckDeck}},
		{"document root", func(p map[string]any, _ *audit.VerifyPlayOptions) {
			c := p["block_commitment"].(map[string]any)
			c["root"] = flipHex(c["root"].(string))
		}, []string{audit.CheckRoot}},
		{"revealed seed", func(_ map[string]any, opt *audit.VerifyPlayOptions) {
			seed := *opt.Seed
			seed[0] ^= 1
			opt.Seed = &seed
		}, []string{audit.CheckDeck}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.checkTampered(t, orig, tc.edit, tc.failed)
		})
	}
}

// checkTampered verifies a copy of the play orig changed by edit: it must
// be invalid, with exactly the checks failed failing.
func (s *served) checkTampered(t *testing.T, orig map[string]any, edit func(p map[string]any, opt *audit.VerifyPlayOptions), failed []string) {
	t.Helper()
	b, err := json.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	opt := s.independent(orig["block_id"].(string))
	edit(p, &opt)
	if b, err = json.Marshal(p); err != nil {
		t.Fatal(err)
	}
	docs, err := audit.ReadPlays(b)
	if err != nil {
		t.Fatal(err)
	}
	v := audit.VerifyPlay(docs[0], opt)
	if v.Valid {
		t.Fatalf("a changed play is valid: %+v", v.Checks)
	}
	want := map[string]bool{}
	for _, name := range failed {
		want[name] = true
	}
	for _, c := range v.Checks {
		if (c.Status == audit.CheckFail) != want[c.Name] {
			t.Errorf("check %s: %s (%s), want failed=%v", c.Name, c.Status, c.Detail, want[c.Name])
		}
	}
}

// TestVerifyPlayInProgressNamesWhatItShowsTooEarly: a play in progress is
// served without its proof; what it shows is still checked against its own
// throws, and an outcome shown before the settlement fails.
func TestVerifyPlayInProgressNamesWhatItShowsTooEarly(t *testing.T) {
	s := serve(t)
	var orig map[string]any
	for _, player := range []string{"p1", "p2", "p3", "p4", "p5"} {
		var page struct{ Plays []map[string]any }
		if err := json.Unmarshal(s.get(t, "/v1/players/"+player+"/plays?limit=100"), &page); err != nil {
			t.Fatal(err)
		}
		for _, p := range page.Plays {
			if p["status"] == "in_progress" && len(p["throws"].([]any)) > 0 && orig == nil {
				orig = p
			}
		}
	}
	if orig == nil {
		t.Fatal("no play in progress with a throw made")
	}
	for _, key := range []string{"proof", "tier", "prize"} {
		if _, ok := orig[key]; ok {
			t.Fatalf("a play in progress is served with its %s: %v", key, orig[key])
		}
	}
	unopened := func(p map[string]any) map[string]any {
		for _, c := range p["chests"].([]any) {
			if c := c.(map[string]any); c["symbol"] == nil {
				return c
			}
		}
		t.Fatal("every chest is opened")
		return nil
	}
	for _, tc := range []struct {
		name string
		edit func(p map[string]any, opt *audit.VerifyPlayOptions)
	}{
		{"a hidden chest shown", func(p map[string]any, _ *audit.VerifyPlayOptions) { unopened(p)["symbol"] = domain.Skull.String() }},
		{"the tier", func(p map[string]any, _ *audit.VerifyPlayOptions) { p["tier"] = domain.TierNone.ID() }},
		{"the prize", func(p map[string]any, _ *audit.VerifyPlayOptions) { p["prize"] = "0.00" }},
		{"throws left", func(p map[string]any, _ *audit.VerifyPlayOptions) { p["throws_left"] = 4.0 }},
		{"the pawn", func(p map[string]any, _ *audit.VerifyPlayOptions) { p["pawn"] = p["start"] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.checkTampered(t, orig, tc.edit, []string{audit.CheckThrows})
		})
	}
}

func TestReadPlaysRefusesWhatIsNotAPlay(t *testing.T) {
	for _, in := range []string{``, `[]`, `{}`, `{"plays":[]}`, `{"play_id":"x","proof":{"tier":"jackpot"}}`, `{"play_id":"x","stake":1}`,
		`{"play_id":"x"` + strings.Repeat(" ", audit.PlayMaxBytes) + `}`} {
		if _, err := audit.ReadPlays([]byte(in)); !errors.Is(err, audit.ErrUnreadablePlay) {
			t.Errorf("ReadPlays(%.40q): %v, want ErrUnreadablePlay", in, err)
		}
	}
}
