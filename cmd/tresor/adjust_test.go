package main

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
)

// staffToken mints a token of a role for a named subject: two operators
// are two people.
func (s *server) staffToken(role, subject string) string {
	s.tb.Helper()
	out, errOut, code := run(s.tb, "token", "--data", s.data, "--role", role, "--subject", subject)
	if code != 0 {
		s.tb.Fatalf("tresor token: %d %s", code, errOut)
	}
	return strings.TrimSpace(out)
}

// answer is one answer of a request sent at once with others.
type answer struct {
	status int
	body   map[string]any
}

// atOnce sends the calls at the same time, each on a connection of its
// own, and returns their answers in the calls' order.
func (s *server) atOnce(calls ...call) []answer {
	s.tb.Helper()
	out := make([]answer, len(calls))
	errs := make([]error, len(calls))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range calls {
		client := &http.Client{Transport: &contractTransport{next: &http.Transport{DisableKeepAlives: true}}}
		wg.Go(func() {
			<-start
			out[i].status, out[i].body, errs[i] = s.sendVia(client, c, nil)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			s.tb.Fatal(err)
		}
	}
	return out
}

// TestAdjustmentsWithFourEyesThroughTheBinary drives adjustments through
// the real binary as a back office would: two operators and finance, each
// with a token of their own. A proposal moves nothing; its proposer cannot
// approve it (403 four_eyes); the same approval sent twice at once on two
// connections moves the money once and both answer it approved; an
// approval racing a rejection loses or wins whole; a pending adjustment
// survives a restart from the writer's snapshot; the statement, the list
// of those awaiting an approver and the report show them; tresor audit
// passes on the stream.
func TestAdjustmentsWithFourEyesThroughTheBinary(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	_, p42 := s.fundedPlayer() // 20.00 on p-42
	alice, bob := s.staffToken("operator", "alice"), s.staffToken("operator", "bob")
	fin := s.staffToken("finance", "fiona")
	propose := func(token, body string) call {
		return call{"POST", "/v1/players/p-42/adjustments", token, "", body}
	}
	goodwill := `{"direction":"credit","kind":"goodwill","amount":"5.00","reference":"ticket-1","reason":"the game froze"}`
	approve := func(id, token string) call { return call{"POST", "/v1/adjustments/" + id + "/approve", token, "", ""} }
	reject := func(id, token string) call {
		return call{"POST", "/v1/adjustments/" + id + "/reject", token, "", `{"reason":"no such ticket"}`}
	}
	// Reads come from the writer's position: every answer before them
	// is applied (read your writes).
	head := func() string { return fmt.Sprintf("min_seq=%.0f", s.writerSeq()) }
	balance := func() string {
		return s.must(200, call{"GET", "/v1/players/p-42/account?" + head(), alice, "", ""})["balance"].(string)
	}
	// addsUp reads the account from the position of an approval and
	// checks that its totals explain its balance, and what they say of
	// the adjustments.
	addsUp := func(approval map[string]any, credits, debits string) {
		t.Helper()
		acct := s.must(200, call{"GET", fmt.Sprintf("/v1/players/p-42/account?min_seq=%.0f", approval["decided_seq"]), fin, "", ""})
		sum := amount(t, acct["deposited"]) - amount(t, acct["withdrawn"]) - amount(t, acct["staked"]) + amount(t, acct["won"]) +
			amount(t, acct["adjusted_credits"]) - amount(t, acct["adjusted_debits"])
		if sum != amount(t, acct["balance"]) || acct["adjusted_credits"] != credits || acct["adjusted_debits"] != debits {
			t.Fatalf("account after %v: totals add up to %s; want adjusted %s and %s: %v", approval["id"], sum, credits, debits, acct)
		}
	}

	// Proposed: pending, nothing moved; the same proposal again answers it.
	a1 := s.must(202, propose(alice, goodwill))
	if a1["id"] != "A1" || a1["state"] != "pending" || a1["proposed_by"].(map[string]any)["subject"] != "alice" || balance() != "20.00" {
		t.Fatalf("proposed: %v, balance %s", a1, balance())
	}
	if again := s.must(202, propose(alice, goodwill)); again["id"] != "A1" {
		t.Fatalf("proposed again: %v", again)
	}
	// Refused: a player, another direction or kind, a debit above the
	// balance, no account, and the proposer approving.
	s.problem(403, "forbidden", propose(p42, goodwill))
	s.problem(400, "invalid_request", propose(alice, strings.Replace(goodwill, "credit", "gift", 1)))
	s.problem(400, "invalid_request", propose(alice, strings.Replace(goodwill, "goodwill", "bonus", 1)))
	s.problem(422, "insufficient_funds", propose(alice, `{"direction":"debit","kind":"chargeback","amount":"20.01","reference":"cb-1","reason":"reversed"}`))
	s.problem(404, "not_found", call{"POST", "/v1/players/nobody/adjustments", alice, "", goodwill})
	s.problem(403, "four_eyes", approve("A1", alice))
	s.problem(404, "not_found", approve("A99", bob))

	// Awaiting an approver: bob sees A1, alice (its proposer) does not.
	awaiting := func(token string) []any {
		return s.must(200, call{"GET", "/v1/adjustments?state=pending&awaiting=me&" + head(), token, "", ""})["adjustments"].([]any)
	}
	if len(awaiting(bob)) != 1 || len(awaiting(alice)) != 0 {
		t.Fatalf("awaiting: bob %v, alice %v", awaiting(bob), awaiting(alice))
	}

	// The same approval twice at once, on two connections: both answer
	// it approved, the money moved once.
	twice := s.atOnce(approve("A1", bob), approve("A1", bob))
	for _, a := range twice {
		if a.status != 200 || a.body["state"] != "approved" || a.body["balance_after"] != "25.00" {
			t.Fatalf("approved at once: %d %v", a.status, a.body)
		}
	}
	if b := balance(); b != "25.00" {
		t.Fatalf("balance %s after one approval of 5.00, want 25.00", b)
	}
	addsUp(twice[0].body, "5.00", "0.00")
	// An approval racing a rejection: one wins whole, the other is 409.
	s.must(202, propose(alice, `{"direction":"debit","kind":"chargeback","amount":"3.00","reference":"cb-2","reason":"reversed by the bank"}`))
	race := s.atOnce(approve("A2", bob), reject("A2", fin))
	won := map[int]int{race[0].status: 1}
	won[race[1].status]++
	if won[200] != 1 || won[409] != 1 {
		t.Fatalf("approval racing a rejection: %d %v and %d %v", race[0].status, race[0].body, race[1].status, race[1].body)
	}
	want := "25.00"
	if race[0].status == 200 {
		want = "22.00"
	}
	if b := balance(); b != want {
		t.Fatalf("balance %s after the race, want %s", b, want)
	}
	debited := "0.00"
	if race[0].status == 200 {
		debited = "3.00"
		addsUp(race[0].body, "5.00", debited)
	}
	// The statement shows the approved adjustments, once each.
	var moved []string
	for _, m := range s.must(200, call{"GET", "/v1/players/p-42/statement?" + head(), fin, "", ""})["movements"].([]any) {
		if m := m.(map[string]any); m["kind"] == "adjustment" {
			moved = append(moved, m["ref"].(string)+" "+m["amount"].(string))
		}
	}
	if len(moved) != 1+map[bool]int{true: 1}[want == "22.00"] || moved[0] != "A1 5.00" {
		t.Fatalf("statement's adjustments: %v", moved)
	}

	// A pending adjustment survives a restart from the writer's snapshot.
	s.must(202, propose(alice, `{"direction":"credit","kind":"malfunction_refund","amount":"1.00","reference":"inc-9","reason":"stake lost in an outage"}`))
	s.stop()
	s = startServe(t, data)
	if m := rebuiltLine.FindStringSubmatch(s.logs.String()); m == nil || m[1] == "0" || m[2] != "0" {
		t.Fatalf("the writer did not start from its closing snapshot: %v\n%s", m, s.logs)
	}
	if !strings.Contains(s.logs.String(), "projections start from a snapshot") {
		t.Fatalf("the read models did not start from their snapshot:\n%s", s.logs)
	}
	s.problem(403, "four_eyes", approve("A3", alice))
	a3 := s.must(200, approve("A3", fin))
	if a3["state"] != "approved" || a3["decided_by"].(map[string]any)["role"] != "finance" {
		t.Fatalf("approved after the restart: %v", a3)
	}
	addsUp(a3, "6.00", debited)
	rows := s.must(200, call{"GET", "/v1/reports/adjustments?" + head(), fin, "", ""})["rows"].([]any)
	if len(rows) < 2 {
		t.Fatalf("adjustments report: %v", rows)
	}
	// Reconciliation lists them beside its rows, whose difference stays
	// 0.00: an adjustment moves no block's money.
	rec := s.must(200, call{"GET", "/v1/reconciliation?" + head(), fin, "", ""})
	if adj := rec["adjustments"].([]any); len(adj) != len(rows) {
		t.Fatalf("reconciliation's adjustments %v, report rows %v", adj, rows)
	}
	for _, r := range rec["rows"].([]any) {
		if d := r.(map[string]any)["difference"]; d != "0.00" {
			t.Fatalf("reconciliation row %v: difference %v", r, d)
		}
	}
	s.must(202, propose(alice, `{"direction":"credit","kind":"correction","amount":"2.00","reference":"fix-3","reason":"a deposit booked twice"}`))
	bal, _ := domain.ParseAmount(balance())
	s.stop()
	pub := hexKey(t, data)
	if r := auditReport(t, 0, "--data", data, "--public-key", pub); !r.OK {
		t.Fatalf("audit: %+v", r)
	}
	checkAdjustmentsFeed(t, data, bal, map[bool][]string{true: {"A1", "A2", "A3"}, false: {"A1", "A3"}}[debited == "3.00"])

	// The stream exported, with the first approval removed: the audit
	// fails (the chain, and the balances that follow it).
	file := filepath.Join(t.TempDir(), "stream.ndjson")
	mustRun(t, "export", "--data", data, "--out", file)
	var kept []string
	removed := 0
	for _, line := range strings.SplitAfter(string(mustRead(t, file)), "\n") {
		if removed == 0 && strings.Contains(line, `"type":"AdjustmentApproved"`) {
			removed++
			continue
		}
		kept = append(kept, line)
	}
	if err := os.WriteFile(file, []byte(strings.Join(kept, "")), 0o600); err != nil || removed != 1 {
		t.Fatalf("removing the approval: %v, %d removed", err, removed)
	}
	r := auditReport(t, 1, "--file", file, "--public-key", pub)
	if r.OK || len(r.ViolationCounts) == 0 {
		t.Fatalf("audit without an approval: %+v", r)
	}
	t.Logf("the export without its first approval: %v", r.ViolationCounts)
	// An insider with the operator's seal key approves A4 as its own
	// proposer, naming her as the proposal does (sealed: docs/privacy.md):
	// the audit names the broken four eyes, and nothing else.
	insider := proposerOf(t, file, "A4")
	payload, _ := json.Marshal(&domain.AdjustmentApproved{Adjustment: "A4", Player: "p-42", Direction: domain.Credit, Kind: domain.Correction,
		Amount: 200, Balance: bal + 200, ProposedBy: insider, By: insider})
	appendEvents(t, data, ed25519.NewKeyFromSeed(mustRead(t, filepath.Join(data, "keys", "seal.ed25519"))), eventstore.Event{
		Type: domain.TypeAdjustmentApproved, SchemaVersion: 1, Aggregate: eventstore.Aggregate{Kind: "player", ID: "p-42"}, Payload: payload})
	if r := auditReport(t, 1, "--data", data, "--public-key", pub); r.ViolationCounts["four_eyes_broken"] != 1 || len(r.ViolationCounts) != 1 {
		t.Fatalf("a self-approval forged: %+v", r)
	}
}

// TestFourEyesRefusalNamesTheProposer has a proposer approve and reject
// her own adjustment: the refusal's detail names her, opened as every
// sealed field of an answer is, not "[unavailable]" (the sealed subject
// is followed by a colon in the detail, which must not be read as part
// of it).
func TestFourEyesRefusalNamesTheProposer(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	s.fundedPlayer()
	alice := s.staffToken("operator", "alice")
	a1 := s.must(202, call{"POST", "/v1/players/p-42/adjustments", alice, "",
		`{"direction":"credit","kind":"goodwill","amount":"5.00","reference":"ticket-1","reason":"the game froze"}`})
	for _, c := range []call{
		{"POST", "/v1/adjustments/" + a1["id"].(string) + "/approve", alice, "", ""},
		{"POST", "/v1/adjustments/" + a1["id"].(string) + "/reject", alice, "", `{"reason":"no such ticket"}`},
	} {
		m := s.must(403, c)
		if want := "was proposed by alice: another subject decides it"; m["code"] != "four_eyes" || !strings.Contains(m["detail"].(string), want) {
			t.Errorf("%s %s: %v, want four_eyes whose detail says %q", c.method, c.path, m, want)
		}
	}
}

// TestApprovalsTakeNoBodyButNoneOrEmpty sends approvals with bodies the
// approve endpoints do not take: an unknown field (one that reads as a
// refusal among them), an array, text. Each is refused, 400
// invalid_request, and nothing is recorded: the adjustment and the
// erasure stay pending until approved with no body or {}.
func TestApprovalsTakeNoBodyButNoneOrEmpty(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	s.fundedPlayer()
	alice, bob, carol := s.staffToken("operator", "alice"), s.staffToken("operator", "bob"), s.staffToken("operator", "carol")
	// carol records something, so that her data can be erased.
	suspended := s.must(201, call{"POST", "/v1/sales/suspensions", carol, "", `{"scope":"all","reason":"a drill"}`})
	s.must(200, call{"DELETE", "/v1/sales/suspensions/" + suspended["id"].(string), carol, "", `{"reason":"drill over"}`})
	a1 := s.must(202, call{"POST", "/v1/players/p-42/adjustments", alice, "",
		`{"direction":"credit","kind":"goodwill","amount":"5.00","reference":"ticket-1","reason":"the game froze"}`})["id"].(string)
	er1 := s.must(202, call{"POST", "/v1/erasures", alice, "", `{"subject":"carol","legal_ground":"left the company"}`})["id"].(string)
	approvals := []string{"/v1/adjustments/" + a1 + "/approve", "/v1/erasures/" + er1 + "/approve"}
	before, _ := exportTypes(t, "--data", data)
	for _, path := range approvals {
		for _, body := range []string{`{"approve":false}`, `{"reason":"no such ticket"}`, `[]`, `no`} {
			s.problem(400, "invalid_request", call{"POST", path, bob, "", body})
		}
	}
	if after, _ := exportTypes(t, "--data", data); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("approvals refused recorded something: %v, then %v", before, after)
	}
	s.must(200, call{"POST", approvals[0], bob, "", ""})
	s.must(200, call{"POST", approvals[1], bob, "", `{}`})
}

// proposerOf reads who proposed an adjustment, as the export holds it.
func proposerOf(tb testing.TB, export, adjustment string) *domain.Actor {
	tb.Helper()
	for _, line := range strings.Split(string(mustRead(tb, export)), "\n") {
		if !strings.Contains(line, `"type":"AdjustmentProposed"`) {
			continue
		}
		var r struct{ Payload domain.AdjustmentProposed }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			tb.Fatal(err)
		}
		if r.Payload.Adjustment == adjustment {
			return r.Payload.By
		}
	}
	tb.Fatalf("no proposal of %s in the export", adjustment)
	return nil
}

// checkAdjustmentsFeed runs the finance feed on the stream into PostgreSQL
// and reads it as finance would: the postings of each approval name it,
// once each in the order approved, and p-42's lines add up to its balance.
func checkAdjustmentsFeed(t *testing.T, data string, balance domain.Amount, approved []string) {
	t.Helper()
	db := freshDatabase(t)
	if _, stderr, code := run(t, "feed", "--data", data, "--sql-url", db, "--table", "feed_adjust", "--name", "adjust", "--until-caught-up"); code != 0 {
		t.Fatalf("feed: exit %d: %s", code, stderr)
	}
	var named []string
	var lines domain.Amount
	for _, m := range readTable(t, db, "feed_adjust") {
		if (m.EventType == domain.TypeAdjustmentApproved) != (m.Adjustment != "") {
			t.Fatalf("%s postings with adjustment %q: %s", m.EventType, m.Adjustment, m.Payload)
		}
		if m.Adjustment != "" {
			named = append(named, m.Adjustment)
		}
		for _, l := range m.Lines {
			if l.Account == domain.PlayerAccount("p-42") {
				lines += map[string]domain.Amount{"credit": 1, "debit": -1}[l.Side] * amount(t, l.Amount)
			}
		}
	}
	if !slices.Equal(named, approved) || lines != balance {
		t.Fatalf("feed: adjustments %v, want %v; p-42's lines add up to %s, balance %s", named, approved, lines, balance)
	}
}
