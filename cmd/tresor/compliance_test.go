package main

import (
	"crypto/ed25519"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
)

// getCSV returns a GET's CSV body and headers; it fails unless the status
// is 200.
func (s *server) getCSV(path, token string) ([][]string, http.Header) {
	s.tb.Helper()
	status, header, b := s.getBody(path, token, "text/csv")
	if status != http.StatusOK || !strings.HasPrefix(header.Get("Content-Type"), "text/csv") {
		s.tb.Fatalf("GET %s as CSV: %d %s %s", path, status, header.Get("Content-Type"), b)
	}
	rows, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	if err != nil {
		s.tb.Fatalf("GET %s: %v in %q", path, err, b)
	}
	return rows, header
}

// TestExclusionsAndBansThroughTheAPI drives every responsible-gaming
// control through the real binary: a self-exclusion for a term asked by the
// player, extended and never shortened; one recorded by the operator, with
// a reason or refused; a ban refusing stakes and deposits, retried, lifted;
// withdrawals open throughout; a token without subject giving no command;
// all of it in force again after a restart, and audited clean.
func TestExclusionsAndBansThroughTheAPI(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	op, p1, p2 := s.token("operator", ""), s.token("player", "p1"), s.token("player", "p2")
	s.must(201, call{"POST", "/v1/emissions", op, "e1", `{"price":"1.00","blocks":1}`})
	for _, p := range []string{"p1", "p2", "p3"} {
		s.must(200, call{"PUT", "/v1/players/" + p, op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`})
		s.must(200, call{"POST", "/v1/players/" + p + "/deposits", op, "d1", `{"amount":"30.00"}`})
	}

	// The player excludes themselves for a term, effective at once.
	until := time.Now().Add(49 * time.Hour).UTC().Truncate(time.Second)
	acct := s.must(200, call{"PUT", "/v1/players/p1", p1, "", fmt.Sprintf(`{"self_excluded_until":%q}`, until.Format(time.RFC3339))})
	if acct["self_excluded_until"] != until.Format(time.RFC3339) || acct["self_excluded"] != false {
		t.Fatalf("account after the exclusion: %v", acct)
	}
	s.problem(403, "self_excluded", call{"POST", "/v1/players/p1/plays", p1, "s1", `{"stake":"1.00"}`})
	s.problem(403, "self_excluded", call{"POST", "/v1/players/p1/deposits", op, "d2", `{"amount":"1.00"}`})
	if w := s.must(200, call{"POST", "/v1/players/p1/withdrawals", op, "w1", `{"amount":"5.00"}`}); w["balance_after"] != "25.00" {
		t.Fatalf("withdrawal while excluded: %v", w)
	}
	s.problem(409, "conflict", call{"PUT", "/v1/players/p1", p1, "", fmt.Sprintf(`{"self_excluded_until":%q}`, until.Add(-12*time.Hour).Format(time.RFC3339))})
	s.problem(409, "conflict", call{"PUT", "/v1/players/p1", p1, "", `{"self_excluded":false}`})
	s.problem(400, "invalid_request", call{"PUT", "/v1/players/p1", p1, "", fmt.Sprintf(`{"self_excluded_until":%q}`, time.Now().AddDate(1, 1, 0).Format(time.RFC3339))})
	until = until.Add(24 * time.Hour)
	s.must(200, call{"PUT", "/v1/players/p1", p1, "", fmt.Sprintf(`{"self_excluded_until":%q}`, until.Format(time.RFC3339))})
	// A player acts on their own account only, and opens none.
	s.problem(403, "forbidden", call{"PUT", "/v1/players/p2", p1, "", `{"self_excluded":true}`})
	s.problem(404, "not_found", call{"PUT", "/v1/players/p9", s.token("player", "p9"), "", `{"weekly_stake_limit":"1.00"}`})

	// The operator records an exclusion only with a reason.
	s.problem(400, "invalid_request", call{"PUT", "/v1/players/p2", op, "", `{"self_excluded":true}`})
	s.must(200, call{"PUT", "/v1/players/p2", op, "", `{"self_excluded":true,"reason":"asked by phone, ticket 4711"}`})
	s.problem(403, "self_excluded", call{"POST", "/v1/players/p2/plays", p2, "s1", `{"stake":"1.00"}`})

	// A ban: a reference and a reason, or 400.
	s.problem(400, "invalid_request", call{"POST", "/v1/players/p3/bans", op, "", `{"reference":"ANJ-2026-17"}`})
	s.problem(404, "not_found", call{"POST", "/v1/players/nobody/bans", op, "", `{"reference":"ANJ-2026-17","reason":"national list"}`})
	ban := s.must(201, call{"POST", "/v1/players/p3/bans", op, "", `{"reference":"ANJ-2026-17","reason":"national list"}`})
	if ban["ban"] != "B1" || ban["in_force"] != true || ban["by"].(map[string]any)["subject"] != "operator@tests" {
		t.Fatalf("ban: %v", ban)
	}
	if again := s.must(200, call{"POST", "/v1/players/p3/bans", op, "", `{"reference":"ANJ-2026-17","reason":"national list"}`}); again["ban"] != "B1" {
		t.Fatalf("the same decision again: %v", again)
	}
	p3 := s.token("player", "p3")
	s.problem(403, "banned", call{"POST", "/v1/players/p3/plays", p3, "s1", `{"stake":"1.00"}`})
	s.problem(403, "banned", call{"POST", "/v1/players/p3/deposits", op, "d2", `{"amount":"1.00"}`})
	s.must(200, call{"POST", "/v1/players/p3/withdrawals", op, "w1", `{"amount":"1.00"}`})
	if a := s.must(200, call{"GET", "/v1/players/p3/account", p3, "", ""}); len(a["bans"].([]any)) != 1 {
		t.Fatalf("account of a banned player: %v", a)
	}
	s.problem(400, "invalid_request", call{"DELETE", "/v1/players/p3/bans/B1", op, "", `{"reference":"ANJ-2026-18"}`})
	s.problem(404, "not_found", call{"DELETE", "/v1/players/p3/bans/B7", op, "", `{"reference":"ANJ-2026-18","reason":"x"}`})
	lifted := s.must(200, call{"DELETE", "/v1/players/p3/bans/B1", op, "", `{"reference":"ANJ-2026-18","reason":"removed from the list"}`})
	if lifted["in_force"] != false || lifted["lift_reference"] != "ANJ-2026-18" {
		t.Fatalf("lifted: %v", lifted)
	}
	s.must(200, call{"DELETE", "/v1/players/p3/bans/B1", op, "", `{"reference":"ANJ-2026-18","reason":"removed from the list"}`})
	s.must(201, call{"POST", "/v1/players/p3/plays", p3, "s1", `{"stake":"1.00"}`})
	if bans := s.must(200, call{"GET", "/v1/players/p3/bans", s.token("regulator", ""), "", ""}); len(bans["bans"].([]any)) != 1 {
		t.Fatalf("bans: %v", bans)
	}
	s.problem(403, "forbidden", call{"GET", "/v1/players/p3/bans", p3, "", ""})

	// A token of the operator's staff without a subject may read, not act.
	key, err := os.ReadFile(filepath.Join(data, "keys", "token.key"))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := api.NewTokens(key)
	if err != nil {
		t.Fatal(err)
	}
	anonymous, err := tokens.Mint(api.RoleOperator, "", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.must(200, call{"GET", "/v1/players/p3/account", anonymous, "", ""})
	s.problem(403, "forbidden", call{"POST", "/v1/players/p3/deposits", anonymous, "d9", `{"amount":"1.00"}`})

	// A restart rebuilds the controls from the stream.
	s.stop()
	s = startServe(t, data)
	s.problem(403, "self_excluded", call{"POST", "/v1/players/p1/plays", p1, "s2", `{"stake":"1.00"}`})
	s.problem(403, "self_excluded", call{"POST", "/v1/players/p2/deposits", op, "d3", `{"amount":"1.00"}`})
	s.must(200, call{"POST", "/v1/players/p3/deposits", op, "d3", `{"amount":"1.00"}`})
	if a := s.must(200, call{"GET", "/v1/players/p1/account", op, "", ""}); a["self_excluded_until"] != until.Format(time.RFC3339) {
		t.Fatalf("after the restart: %v", a)
	}
	p1Balance := s.must(200, call{"GET", "/v1/players/p1/account", op, "", ""})["balance"].(string)
	s.stop()

	// The audit re-derives the controls: clean, then a deposit forged
	// for the excluded p1 through the committer, with the operator's own
	// seal key, is reported.
	pub := hexKey(t, data)
	if r := auditReport(t, 0, "--data", data, "--public-key", pub); !r.OK {
		t.Fatalf("audit of the controls: %+v", r)
	}
	seed := mustRead(t, filepath.Join(data, "keys", "seal.ed25519"))
	bal, _ := domain.ParseAmount(p1Balance)
	payload, _ := json.Marshal(&domain.FundsDeposited{Player: "p1", Amount: 100, Key: "forged", Balance: bal + 100})
	appendEvents(t, data, ed25519.NewKeyFromSeed(seed), eventstore.Event{Type: domain.TypeFundsDeposited, SchemaVersion: 2,
		Aggregate: eventstore.Aggregate{Kind: "player", ID: "p1"}, Payload: payload})
	if r := auditReport(t, 1, "--data", data, "--public-key", pub); r.ViolationCounts["exclusion_breached"] != 1 || len(r.ViolationCounts) != 1 {
		t.Fatalf("a deposit forged for an excluded player: %+v", r)
	}
}

// hexKey is the seal public key of a data directory, as tresor seal-key
// prints it.
func hexKey(t *testing.T, data string) string {
	t.Helper()
	out, stderr, code := run(t, "seal-key", "--data", data)
	if code != 0 {
		t.Fatalf("seal-key: %d %s", code, stderr)
	}
	pub, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return pub
}

func TestStatementsReportsAndTheSignificantLogThroughTheAPI(t *testing.T) {
	testStatementsAndReports(t)
}

func TestStatementsReportsAndTheSignificantLogPostgres(t *testing.T) {
	testStatementsAndReports(t, "--database-url", freshDatabase(t))
}

// testStatementsAndReports reads statements, balances at past instants,
// the report pack and the significant-event log through the real binary.
func testStatementsAndReports(t *testing.T, args ...string) {
	t.Parallel()
	s := startServe(t, t.TempDir(), args...)
	op, fin, reg := s.token("operator", ""), s.token("finance", ""), s.token("regulator", "")
	p1, p2 := s.token("player", "p1"), s.token("player", "p2")
	s.must(201, call{"POST", "/v1/emissions", op, "e1", `{"price":"2.00","blocks":1}`})
	s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"500.00","weekly_stake_limit":"500.00"}`})
	s.must(200, call{"PUT", "/v1/players/p2", op, "", `{"weekly_deposit_limit":"500.00","weekly_stake_limit":"500.00"}`})
	s.must(200, call{"POST", "/v1/players/p1/deposits", op, "d1", `{"amount":"50.00"}`})
	mid := time.Now().UTC()
	s.must(200, call{"POST", "/v1/players/p2/deposits", op, "d1", `{"amount":"20.00"}`})
	for i := range 3 {
		play := s.must(201, call{"POST", "/v1/players/p1/plays", p1, fmt.Sprint("s", i), `{"stake":"2.00"}`})
		for n := 1; n <= 4; n++ {
			s.must(200, call{"POST", "/v1/players/p1/plays/" + play["play_id"].(string) + "/throws", p1, "", fmt.Sprintf(`{"throw":%d}`, n)})
		}
	}
	s.must(201, call{"POST", "/v1/players/p1/plays", p1, "s-open", `{"stake":"2.00"}`})
	last := s.must(200, call{"POST", "/v1/players/p1/withdrawals", op, "w1", `{"amount":"3.00"}`})

	// A statement's closing balance is the account's, its movements add up
	// to the change, and the balance at any instant is the statement's.
	acct := s.must(200, call{"GET", "/v1/players/p1/account?min_seq=" + fmt.Sprint(last["seq"]), p1, "", ""})
	st := s.must(200, call{"GET", "/v1/players/p1/statement", p1, "", ""})
	if st["closing_balance"] != acct["balance"] || st["opening_balance"] != "0.00" {
		t.Fatalf("statement %v, account %v", st, acct)
	}
	var sum domain.Amount
	for _, m := range st["movements"].([]any) {
		var a domain.Amount
		if err := a.UnmarshalText([]byte(m.(map[string]any)["amount"].(string))); err != nil {
			t.Fatal(err)
		}
		sum += a
	}
	if fmt.Sprint(sum) != acct["balance"] {
		t.Fatalf("movements add up to %s, balance %v", sum, acct["balance"])
	}
	if b := s.must(200, call{"GET", "/v1/players/p1/account?at=" + mid.Format(time.RFC3339Nano), fin, "", ""}); b["balance"] != "50.00" {
		t.Fatalf("balance of p1 between the deposits: %v", b)
	}
	if b := s.must(200, call{"GET", "/v1/players/p2/account?at=" + mid.Format(time.RFC3339Nano), reg, "", ""}); b["balance"] != "0.00" {
		t.Fatalf("balance of p2 before its deposit: %v", b)
	}
	later := s.must(200, call{"GET", "/v1/players/p1/statement?from=" + mid.Format(time.RFC3339Nano), reg, "", ""})
	if later["opening_balance"] != "50.00" || later["closing_balance"] != acct["balance"] || len(later["movements"].([]any)) != len(st["movements"].([]any))-1 {
		t.Fatalf("statement from between the deposits: %v", later)
	}
	rows, _ := s.getCSV("/v1/players/p1/statement", op)
	if rows[0][0] != "id" || rows[1][3] != "opening" || rows[len(rows)-1][3] != "closing" || rows[len(rows)-1][6] != acct["balance"] {
		t.Fatalf("CSV statement: %v", rows)
	}
	// A player reads their own statement only, and learns nothing of another.
	s.problem(403, "forbidden", call{"GET", "/v1/players/p1/statement", p2, "", ""})
	s.problem(403, "forbidden", call{"GET", "/v1/players/nobody/statement", p2, "", ""})
	s.problem(400, "invalid_request", call{"GET", "/v1/players/p1/statement?from=yesterday", p1, "", ""})

	// The report pack: its identity, the days without activity, the
	// liability, the blocks' figures and the large wins.
	today := time.Now().UTC().Format(time.DateOnly)
	from := time.Now().UTC().AddDate(0, 0, -2).Format(time.DateOnly)
	days := s.must(200, call{"GET", "/v1/reports/days?from=" + from, fin, "", ""})
	if days["stream_seq"] == nil || days["generated_at"] == nil || days["period"].(map[string]any)["to"] != today {
		t.Fatalf("days report: %v", days)
	}
	dr := days["rows"].([]any)
	if len(dr) != 3 || dr[0].(map[string]any)["activity"] != false || dr[2].(map[string]any)["activity"] != true ||
		dr[2].(map[string]any)["plays_in_progress"] != 1.0 || dr[2].(map[string]any)["units_sold"] != 4.0 {
		t.Fatalf("days: %v", dr)
	}
	liability := s.must(200, call{"GET", "/v1/reports/liability?from=" + from, reg, "", ""})["rows"].([]any)
	b1, _ := domain.ParseAmount(acct["balance"].(string))
	if got := liability[2].(map[string]any)["liability"]; got != (b1+2000).String() || liability[0].(map[string]any)["liability"] != "0.00" {
		t.Fatalf("liability %v, want p1's %s and p2's 20.00", liability, acct["balance"])
	}
	blocks := s.must(200, call{"GET", "/v1/reports/blocks", fin, "", ""})["rows"].([]any)
	if b := blocks[0].(map[string]any); len(blocks) != 1 || b["theoretical_return"] != "0.7" || b["units_sold"] != 4.0 || b["plays_in_progress"] != 1.0 || b["stakes_in_play"] != "2.00" {
		t.Fatalf("blocks report: %v", blocks)
	}
	if wins := s.must(200, call{"GET", "/v1/reports/large-wins?threshold=0.01", reg, "", ""}); wins["threshold"] != "0.01" || wins["rows"] == nil {
		t.Fatalf("large wins: %v", wins)
	}
	csvRows, h := s.getCSV("/v1/reports/emissions", fin)
	if len(csvRows) != 2 || csvRows[0][0] != "emission" || h.Get("Tresor-Report") != "emissions" || h.Get("Tresor-Stream-Seq") == "" {
		t.Fatalf("emissions CSV: %v %v", csvRows, h)
	}
	s.problem(403, "forbidden", call{"GET", "/v1/reports/days", op, "", ""})
	s.problem(400, "invalid_request", call{"GET", "/v1/reports/days?threshold=1.00", fin, "", ""})

	// Failed authentications and refused role checks are in the
	// significant-event log, the token never.
	bad := p1[:len(p1)-3] + "xyz"
	s.problem(401, "unauthorized", call{"GET", "/v1/players/p1/account", bad, "", ""})
	eventually(t, 10*time.Second, func() bool {
		page := s.must(200, call{"GET", "/v1/significant-events", reg, "", ""})
		raw, _ := json.Marshal(page)
		if strings.Contains(string(raw), bad) || strings.Contains(string(raw), p1) || strings.Contains(string(raw), fin) {
			t.Fatalf("the significant-event log holds a token: %s", raw)
		}
		kinds := map[string]int{}
		for _, e := range page["events"].([]any) {
			kinds[e.(map[string]any)["kind"].(string)]++
		}
		return kinds["authentication_failed"] == 1 && kinds["forbidden"] == 3
	})
	s.problem(403, "forbidden", call{"GET", "/v1/significant-events", fin, "", ""})
	s.stop()
}

// TestReportSettingsAndTokenCommands: tresor report replays a stream
// into the report pack, tresor settings prints the jurisdiction's settings
// with their sources, tresor token names a subject in every token.
func TestReportSettingsAndTokenCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, stderr, code := run(t, "simulate", "--data", dir, "--price", "1", "--plays", "20", "--players", "2", "--quiet"); code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	out, stderr, code := run(t, "report", "blocks", "--data", dir)
	var rep struct {
		Report    string           `json:"report"`
		StreamSeq uint64           `json:"stream_seq"`
		Rows      []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.Report != "blocks" || rep.StreamSeq == 0 ||
		len(rep.Rows) != 1 || rep.Rows[0]["units_sold"] != 20.0 || rep.Rows[0]["theoretical_return"] != "0.7" {
		t.Fatalf("report blocks: exit %d %v %s %s", code, err, out, stderr)
	}
	out, stderr, code = run(t, "report", "liability", "--data", dir, "--csv")
	if code != 0 || !strings.HasPrefix(out, "day,activity,liability,change\n") || !strings.Contains(stderr, "at stream sequence") {
		t.Fatalf("report liability --csv: exit %d %q %q", code, out, stderr)
	}
	key := writeKey(t, api.TokenKeySize)
	for _, args := range [][]string{{"report", "nonsense", "--data", dir}, {"report", "days", "--data", dir, "--from", "yesterday"},
		{"token", "--token-key-file", key, "--role", "player", "--player", "p1", "--subject", "p2"},
		{"token", "--token-key-file", key, "--role", "finance", "--subject", "bob smith"}} {
		if _, stderr, code := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d %s, want 2", args, code, stderr)
		}
	}
	login, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := api.NewTokens(mustRead(t, key))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		subject string
	}{
		{[]string{"--role", "finance", "--subject", "bob@fdj.fr"}, "bob@fdj.fr"},
		{[]string{"--role", "operator"}, login.Username},
		{[]string{"--role", "player", "--player", "p1"}, "p1"},
	} {
		out, stderr, code := run(t, append([]string{"token", "--token-key-file", key}, tc.args...)...)
		c, err := tokens.Verify(strings.TrimSpace(out))
		if code != 0 || err != nil || c.Subject != tc.subject {
			t.Fatalf("token %v: exit %d %v %+v %s; want subject %s", tc.args, code, err, c, stderr, tc.subject)
		}
	}
	out, _, code = run(t, "settings", "--json")
	var s struct {
		Version string            `json:"version"`
		Periods []int             `json:"limit_periods_days"`
		Sources map[string]string `json:"sources"`
	}
	if err := json.Unmarshal([]byte(out), &s); code != 0 || err != nil || s.Version != "fr-1" || len(s.Periods) != 1 || len(s.Sources) != 8 {
		t.Fatalf("settings: exit %d %v %s", code, err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(strings.Replace(out, `"limit_raise_delay_hours": 24`, `"limit_raise_delay_hours": -1`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, "settings", "--settings", bad); code != 1 || !strings.Contains(stderr, "limit_raise_delay_hours") {
		t.Fatalf("settings out of bounds: exit %d %s", code, stderr)
	}
}

// blockReportPlays is how many plays TestSoldOutBlockReportMatchesArticle3
// makes in `make test`: enough for every figure of the report. A sold-out
// block is 3.3 million events, long to write and to replay: `make sellout`
// sells one out at each price of TRESOR_SELLOUT_PRICES.
const blockReportPlays = 5000

// TestSoldOutBlockReportMatchesArticle3 plays a block with `tresor
// simulate` and reads its report: every figure is the plays' (units sold,
// stakes, prizes paid and owed, nothing in progress, the actual return
// theirs) and the theoretical return is 70 %. With TRESOR_SELLOUT_PRICES
// set it sells out a real 450 000-unit block of each price, and the
// report's figures are Article 3's: actual return 70 % once its plays
// settled.
func TestSoldOutBlockReportMatchesArticle3(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("plays thousands of units")
	}
	rules, err := domain.DefaultRules()
	if err != nil {
		t.Fatal(err)
	}
	prices := os.Getenv("TRESOR_SELLOUT_PRICES")
	if prices == "" {
		checkBlockReport(t, rules, "0.50", blockReportPlays)
		return
	}
	for _, p := range strings.Split(prices, ",") {
		t.Run(p, func(t *testing.T) { checkBlockReport(t, rules, strings.TrimSpace(p), rules.BlockUnits) })
	}
}

// checkBlockReport sells plays units of a block at price with `tresor
// simulate` and checks `tresor report blocks` against the plays, and
// against Article 3 when they sell the block out.
func checkBlockReport(t *testing.T, rules *domain.RuleSet, price string, plays int) {
	t.Helper()
	dir := t.TempDir()
	out, stderr, code := run(t, "simulate", "--data", dir, "--price", price, "--plays", fmt.Sprint(plays), "--players", "256", "--quiet", "--json")
	var sim struct {
		Price       domain.Amount `json:"price"`
		StakesTotal domain.Amount `json:"stakes_total"`
		PrizesTotal domain.Amount `json:"prizes_total"`
	}
	if err := json.Unmarshal([]byte(out), &sim); code != 0 || err != nil {
		t.Fatalf("simulate: exit %d %v %s", code, err, stderr)
	}
	out, stderr, code = run(t, "report", "blocks", "--data", dir)
	var rep struct {
		Rows []projections.BlockLine `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Rows) != 1 {
		t.Fatalf("report blocks: exit %d %v %s", code, err, stderr)
	}
	b := rep.Rows[0]
	if b.UnitsSold != plays || b.PlaysSettled != plays || b.PlaysInProgress != 0 || b.Stakes != sim.StakesTotal || b.Stakes != domain.Amount(plays)*sim.Price ||
		b.PrizesPaid != sim.PrizesTotal || b.PrizesOwed != b.PrizesPaid || b.TheoreticalReturn.String() != "0.7" ||
		b.ActualReturn == nil || b.ActualReturn.String() != projections.ReturnRate(b.PrizesPaid, b.Stakes).String() {
		t.Fatalf("block of %d plays at %s (simulate: stakes %s, prizes %s): %+v", plays, sim.Price, sim.StakesTotal, sim.PrizesTotal, b)
	}
	if plays < rules.BlockUnits {
		return
	}
	table, err := rules.Table(sim.Price)
	if err != nil {
		t.Fatal(err)
	}
	if b.Units != rules.BlockUnits || b.Stakes != table.Sales(rules.BlockUnits) || b.PrizesPaid != table.Total || b.ActualReturn.String() != "0.7" {
		t.Fatalf("sold-out block at %s: %+v, want stakes %s and prizes %s", sim.Price, b, table.Sales(rules.BlockUnits), table.Total)
	}
}
