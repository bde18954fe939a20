package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
)

// The browser tests drive the pages in a real headless Chromium (Debian's
// chromium package; .ci/run installs it) with chromedp. Each is bounded by
// browserTimeout. They write a screenshot of each page at 1280×800 under
// screenshots/ at the repository's root (kept out of git).
const browserTimeout = 8 * time.Minute

// screenshotDir is where the tests write their screenshots.
const screenshotDir = "../../screenshots"

// browser starts a headless Chromium for one test, with the flags it needs
// to run as root in a container and to touch no network but the test's.
func browser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("browser tests are not short")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the browser tests need Debian's chromium (apt-get install -y chromium; .ci/run installs it): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800),
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// void drops an action's value, to run it among others.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// do runs browser actions or fails the test, naming the step.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// attr reads an attribute of the first element a CSS selector matches.
func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	if err != nil {
		t.Fatalf("attribute %s of %s: %v", name, sel, err)
	}
	return v.Value
}

// count counts the elements a CSS selector matches.
func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	if err != nil {
		t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

// csvLines counts the lines of a GET's CSV answer, as a download holds it.
func (s *server) csvLines(path, token string) int {
	s.tb.Helper()
	rows, _ := s.getCSV(path, token)
	return len(rows)
}

// screenshot writes the viewport as screenshots/NAME.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserPlayerPlaysAWholePlay: a player plays through the page and
// sees the map, the pawn, the compass and the counter move throw by throw,
// and at the end the tier and prize the API recorded; a refusal is said in
// plain words.
func TestBrowserPlayerPlaysAWholePlay(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startServe(t, t.TempDir())
	op, p42 := s.fundedPlayer()
	do(t, ctx, "open the landing page", chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	screenshot(t, ctx, "index")
	do(t, ctx, "open the player's screen", chromedp.Navigate(s.url+"/play#token="+p42), chromedp.WaitVisible(chromedp.CSS("#balance[data-balance]")))
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); strings.Contains(loc, "token") {
		t.Errorf("the token stays in the address bar: %s", loc)
	}
	if got := attr(t, ctx, "#balance", "data-balance"); got != "20.00" {
		t.Fatalf("balance shown %q, want 20.00", got)
	}
	if n := count(t, ctx, "[data-chest]"); n != 0 {
		t.Fatalf("%d chests shown before the stake was answered", n)
	}
	// A refusal in plain words: no block is on sale at 2 €.
	do(t, ctx, "stake 2 €", chromedp.Click(chromedp.CSS(`input[value="2.00"]`)), chromedp.Click(chromedp.CSS("#play")),
		chromedp.WaitVisible(chromedp.CSS("#refusal")))
	if text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#refusal"))); !strings.Contains(text, "No block of this price is on sale") {
		t.Errorf("refusal shown: %q", text)
	}
	do(t, ctx, "stake 1 €", chromedp.Click(chromedp.CSS(`input[value="1.00"]`)), chromedp.Click(chromedp.CSS("#play")),
		chromedp.WaitVisible(chromedp.CSS("[data-pawn]")), chromedp.WaitEnabled(chromedp.CSS("#throw")))
	if n := count(t, ctx, "[data-chest]"); n != 9 || count(t, ctx, "[data-chest][data-symbol]") != 0 || count(t, ctx, "[data-compass]") != 1 || count(t, ctx, "[data-counter]") != 1 {
		t.Fatalf("after the stake: %d chests (%d opened), want 9 closed, a compass and a counter", n, count(t, ctx, "[data-chest][data-symbol]"))
	}
	// The balance's text and its hook move together with the stake.
	text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#balance")))
	if got := attr(t, ctx, "#balance", "data-balance"); got != "19.00" || !strings.Contains(text, "19") {
		t.Fatalf("after a 1 € stake from 20.00: data-balance %q, shown %q; want 19.00 in both", got, text)
	}
	for n := 1; n <= 4; n++ {
		do(t, ctx, fmt.Sprintf("throw %d", n), chromedp.Click(chromedp.CSS("#throw")),
			void(chromedp.Poll[bool](fmt.Sprintf("document.getElementById('throws-left').textContent === '%d'", 4-n), chromedp.WithPollingTimeout(30*time.Second))))
		if attr(t, ctx, "[data-compass]", "data-direction") == "" || attr(t, ctx, "[data-counter]", "data-steps") == "" {
			t.Fatalf("throw %d: the compass or the counter shows nothing", n)
		}
	}
	do(t, ctx, "the settlement", chromedp.WaitReady(chromedp.CSS("#result[data-tier]")), chromedp.WaitVisible(chromedp.CSS("[data-chest][data-symbol]")))
	last := s.must(200, call{"GET", "/v1/players/p-42/plays/last", p42, "", ""})
	if tier, prize := attr(t, ctx, "#result", "data-tier"), attr(t, ctx, "#result", "data-prize"); tier != last["tier"] || prize != last["prize"] {
		t.Fatalf("the page shows %s %s, the API %v %v", tier, prize, last["tier"], last["prize"])
	}
	pawn := last["pawn"].(map[string]any)
	if r, c := attr(t, ctx, "[data-pawn]", "data-row"), attr(t, ctx, "[data-pawn]", "data-col"); r != fmt.Sprint(pawn["row"]) || c != fmt.Sprint(pawn["col"]) {
		t.Fatalf("pawn shown on (%s,%s), the API says %v", r, c, pawn)
	}
	if n := count(t, ctx, "[data-chest][data-symbol]"); n != 9 {
		t.Errorf("%d chests show their content once the play is settled, want 9", n)
	}
	acct := s.must(200, call{"GET", "/v1/players/p-42/account", op, "", ""})
	do(t, ctx, "the balance", void(chromedp.Poll[bool](fmt.Sprintf("document.getElementById('balance').dataset.balance === %q", acct["balance"]), chromedp.WithPollingTimeout(20*time.Second))))
	screenshot(t, ctx, "play")
	s.stop()
}

// TestBrowserHistoryVerifiesPlays: the history lists the plays newest
// first and verifies a play as valid against the published commitment; an
// answer altered on its way to the browser is invalid, naming the check.
func TestBrowserHistoryVerifiesPlays(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startServe(t, t.TempDir())
	_, p42 := s.fundedPlayer()
	var ids []string
	for i, key := range []string{"k1", "k2"} {
		play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, key, `{"stake":"1.00"}`})
		ids = append(ids, play["play_id"].(string))
		for n := 1; n <= 4-2*i; n++ {
			s.must(200, call{"POST", "/v1/players/p-42/plays/" + ids[i] + "/throws", p42, "", fmt.Sprintf(`{"throw":%d}`, n)})
		}
	}
	do(t, ctx, "open the history", chromedp.Navigate(s.url+"/history#token="+p42), chromedp.WaitVisible(chromedp.CSS("[data-play-id]")))
	if first := attr(t, ctx, "[data-play-id]", "data-play-id"); first != ids[1] || count(t, ctx, "[data-play-id]") != 2 {
		t.Fatalf("history: first row %s of %d, want the last play %s on top of 2", first, count(t, ctx, "[data-play-id]"), ids[1])
	}
	row := func(id string) string { return fmt.Sprintf(`[data-play-id=%q]`, id) }
	for _, id := range ids {
		do(t, ctx, "verify "+id, chromedp.Click(chromedp.CSS(row(id)+" button.verify")), chromedp.WaitReady(chromedp.CSS(row(id)+"[data-verified]")))
		if v := attr(t, ctx, row(id), "data-verified"); v != "valid" {
			out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row(id)+" .verdict")))
			t.Fatalf("play %s verified %s:\n%s", id, v, out)
		}
	}
	if n := count(t, ctx, row(ids[0])+` [data-check="root"][data-status="pass"]`); n != 1 {
		t.Errorf("the root was not checked against the published commitment")
	}
	// The play in progress comes without its proof: what needs it waits
	// for the settlement, what it shows so far is checked.
	if count(t, ctx, row(ids[1])+` [data-check="inclusion_proof"][data-status="skip"]`) != 1 || count(t, ctx, row(ids[1])+` [data-check="throws"][data-status="pass"]`) != 1 {
		out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row(ids[1])+" .verdict")))
		t.Errorf("the play in progress: want its proof's checks waiting and its throws checked:\n%s", out)
	}
	if n := count(t, ctx, `[data-check="row"][data-status="pass"]`); n != 2 {
		t.Errorf("%d rows of 2 checked as showing the play verified", n)
	}
	do(t, ctx, "replay", chromedp.Click(chromedp.CSS(row(ids[0])+" .summary button")), chromedp.WaitVisible(chromedp.CSS(row(ids[0])+" [data-pawn]")))
	for range 2 {
		do(t, ctx, "next throw", chromedp.Click(chromedp.CSS(row(ids[0])+" .controls button:last-child")))
	}
	screenshot(t, ctx, "history")

	// The settled play's answer is altered in transit: it says it paid more.
	tampered := make(chan string, 1)
	if err := chromedp.Listen(ctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		go func() {
			res, err := chromedp.Call(ctx, fetch.GetResponseBody, fetch.GetResponseBodyParams{RequestID: e.RequestID})
			body := res.Body
			if err == nil {
				body = bytes.Replace(body, []byte(`"prize":"`), []byte(`"prize":"1`), 1)
			}
			chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: e.RequestID, ResponseCode: e.ResponseStatusCode, ResponseHeaders: e.ResponseHeaders, Body: body})
			tampered <- e.Request.URL
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/v1/players/p-42/plays/" + ids[0], RequestStage: fetch.RequestStageResponse}}}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "verify the altered answer", chromedp.Click(chromedp.CSS(row(ids[0])+" button.verify")),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q).dataset.verified === "invalid"`, row(ids[0])), chromedp.WithPollingTimeout(60*time.Second))))
	select {
	case <-tampered:
	default:
		t.Fatal("the answer was not intercepted")
	}
	if n := count(t, ctx, row(ids[0])+` [data-check="prize"][data-status="fail"]`); n != 1 {
		out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row(ids[0])+" .verdict")))
		t.Fatalf("the altered play does not fail its prize check:\n%s", out)
	}
	if _, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}

	// The list's answer is altered in transit instead: the settled play's
	// row shows a bigger prize than the play paid. Verify reads the play
	// again, genuine: its proof holds, and the row check, which ties the
	// verdict to what the row shows, fails.
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/v1/players/p-42/plays?*", RequestStage: fetch.RequestStageResponse}}}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "reload the history, its list altered", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(row(ids[0]))))
	select {
	case <-tampered:
	case <-time.After(30 * time.Second):
		t.Fatal("the list was not intercepted")
	}
	if _, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "verify the row whose list entry was altered", chromedp.Click(chromedp.CSS(row(ids[0])+" button.verify")),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q).dataset.verified !== undefined`, row(ids[0])), chromedp.WithPollingTimeout(60*time.Second))))
	if v, rowSt, prizeSt := attr(t, ctx, row(ids[0]), "data-verified"), attr(t, ctx, row(ids[0])+` [data-check="row"]`, "data-status"),
		attr(t, ctx, row(ids[0])+` [data-check="prize"]`, "data-status"); v != "invalid" || rowSt != "fail" || prizeSt != "pass" {
		out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row(ids[0])+" .verdict")))
		t.Fatalf("a row showing more than its play: verified %s, row check %s, prize check %s; want invalid, fail, pass:\n%s", v, rowSt, prizeSt, out)
	}
	do(t, ctx, "reload the history", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(row(ids[0]))))

	// Once the block is closed, its published seed rebuilds the deck in
	// the browser: 450 000 units.
	for n := 3; n <= 4; n++ {
		s.must(200, call{"POST", "/v1/players/p-42/plays/" + ids[1] + "/throws", p42, "", fmt.Sprintf(`{"throw":%d}`, n)})
	}
	s.must(200, call{"POST", "/v1/blocks/" + strings.Split(ids[0], "-U")[0] + "/close", s.token("operator", ""), "", `{"reason":"web test: reveal the seed"}`})
	started := time.Now()
	do(t, ctx, "verify with the seed", chromedp.Click(chromedp.CSS(row(ids[0])+" button.verify")),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q + ' [data-check="deck"]') !== null`, row(ids[0])), chromedp.WithPollingTimeout(6*time.Minute))))
	t.Logf("deck rebuilt and checked in the browser in %s", time.Since(started).Round(time.Second))
	if v, st := attr(t, ctx, row(ids[0]), "data-verified"), attr(t, ctx, row(ids[0])+` [data-check="deck"]`, "data-status"); v != "valid" || st != "pass" {
		out, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row(ids[0])+" .verdict")))
		t.Fatalf("closed block: %s, deck %s:\n%s", v, st, out)
	}
	s.stop()
}

// TestBrowserConsoleShowsTheBlocks: after `tresor simulate`, the console
// shows each block with its chart and the API's counts; a player's token
// cannot open it.
func TestBrowserConsoleShowsTheBlocks(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	data := filepath.Join(t.TempDir(), "data")
	if _, stderr, code := run(t, "simulate", "--data", data, "--plays", "300", "--players", "10", "--quiet"); code != 0 {
		t.Fatalf("simulate: exit %d %s", code, stderr)
	}
	s := startServe(t, data)
	reg := s.token("regulator", "")
	s.fundedPlayer()
	blocks := s.must(200, call{"GET", "/v1/blocks", reg, "", ""})["blocks"].([]any)
	do(t, ctx, "open the console", chromedp.Navigate(s.url+"/console#token="+reg), chromedp.WaitVisible(chromedp.CSS("[data-block] svg[data-chart=tiers]")),
		chromedp.WaitVisible(chromedp.CSS("#reconciliation table")))
	if n := count(t, ctx, "[data-block]"); n != len(blocks) {
		t.Fatalf("the console shows %d blocks, the API %d", n, len(blocks))
	}
	for _, raw := range blocks {
		b := raw.(map[string]any)
		sel := fmt.Sprintf(`[data-block=%q]`, b["id"])
		if sold := attr(t, ctx, sel, "data-sold"); sold != fmt.Sprint(b["sold"]) {
			t.Errorf("block %s: %s sold shown, the API says %v", b["id"], sold, b["sold"])
		}
		for _, tr := range b["tiers"].([]any) {
			tier := tr.(map[string]any)
			g := fmt.Sprintf(`%s svg[data-chart=tiers] g[data-tier=%q]`, sel, tier["tier"])
			if paid, lots := attr(t, ctx, g, "data-paid"), attr(t, ctx, g, "data-lots"); paid != fmt.Sprint(tier["paid"]) || lots != fmt.Sprint(tier["lots"]) {
				t.Errorf("block %s tier %s: chart %s of %s, the API %v of %v", b["id"], tier["tier"], paid, lots, tier["paid"], tier["lots"])
			}
		}
		if count(t, ctx, sel+" svg[data-chart=payout-rate]") != 1 {
			t.Errorf("block %s has no payout-rate chart", b["id"])
		}
	}
	if n := count(t, ctx, `#reconciliation tr[data-difference="0.00"]`); n == 0 || count(t, ctx, "#reconciliation tr.differs") != 0 {
		t.Errorf("reconciliation: %d rows without a difference, %d with one", n, count(t, ctx, "#reconciliation tr.differs"))
	}
	// The days are the API's rows of the last 14 UTC days (here, today's).
	from := time.Now().UTC().AddDate(0, 0, -13).Format(time.DateOnly)
	days := s.must(200, call{"GET", "/v1/reconciliation?scope=day&from=" + from, reg, "", ""})["rows"].([]any)
	if n := count(t, ctx, "#days tr[data-day]"); n != len(days) || n == 0 {
		t.Errorf("days: %d rows shown, the API has %d since %s", n, len(days), from)
	}
	for _, d := range days {
		if key := d.(map[string]any)["key"]; count(t, ctx, fmt.Sprintf(`#days tr[data-day=%q]`, key)) != 1 {
			t.Errorf("day %v not shown", key)
		}
	}
	// The report pack and a statement download as the API's CSV, line for
	// line.
	for _, dl := range []struct{ what, file, path string }{
		{"the blocks report", "tresor-report-blocks.csv", "/v1/reports/blocks?"},
		{"p-42's statement", "tresor-statement-p-42.csv", "/v1/players/p-42/statement?limit=10000&"},
	} {
		steps := []chromedp.Action[chromedp.Void]{chromedp.Click(chromedp.CSS(`[data-report="blocks"]`))}
		if strings.Contains(dl.file, "statement") {
			steps = []chromedp.Action[chromedp.Void]{chromedp.SendKeys(chromedp.CSS(`#statement-form input[name="player"]`), "p-42"), chromedp.Click(chromedp.CSS(`#statement-form button`))}
		}
		do(t, ctx, "download "+dl.what, append(steps, chromedp.WaitReady(chromedp.CSS(fmt.Sprintf(`#downloaded[data-file=%q]`, dl.file))))...)
		if got, want := attr(t, ctx, "#downloaded", "data-lines"), fmt.Sprint(s.csvLines(dl.path, reg)); got != want {
			t.Errorf("%s: %s lines downloaded, the API's CSV has %s", dl.what, got, want)
		}
	}
	do(t, ctx, "scroll to the first chart", chromedp.ScrollIntoView(chromedp.CSS("[data-block] .charts")))
	screenshot(t, ctx, "console")

	// A player's token does not open the console, and the API refuses it too.
	s.must(200, call{"PUT", "/v1/players/p-1", s.token("operator", ""), "", `{"weekly_deposit_limit":"10.00","weekly_stake_limit":"10.00"}`})
	p1 := s.token("player", "p-1")
	do(t, ctx, "the console with a player's token", chromedp.Navigate(s.url+"/"), void(chromedp.Evaluate[bool]("sessionStorage.clear() || true")),
		chromedp.Navigate(s.url+"/console#token="+p1), chromedp.WaitVisible(chromedp.CSS("#refusal")))
	if text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#refusal"))); !strings.Contains(text, "cannot open it") || count(t, ctx, "[data-block]") != 0 {
		t.Errorf("a player's console: %q, %d blocks shown", text, count(t, ctx, "[data-block]"))
	}
	s.problem(403, "forbidden", call{"GET", "/v1/blocks", p1, "", ""})
	s.stop()
}

// TestBrowserConsoleSuspendsSales: an operator suspends the 1 € sales from
// the console's form; the console lists the suspension in force, the API
// refuses a stake in its scope, and once it is resumed (through the API)
// the console shows it resumed at its next refresh.
func TestBrowserConsoleSuspendsSales(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startServe(t, t.TempDir())
	op, p42 := s.fundedPlayer()
	do(t, ctx, "open the console", chromedp.Navigate(s.url+"/console#token="+op), chromedp.WaitVisible(chromedp.CSS(`#sales [data-sales="open"]`)),
		chromedp.WaitVisible(chromedp.CSS("#suspend-form")))
	do(t, ctx, "suspend the 1 € sales", chromedp.SendKeys(chromedp.CSS(`#suspend-form input[name="scope"]`), "price:1.00"),
		chromedp.SendKeys(chromedp.CSS(`#suspend-form input[name="reason"]`), "wrong chests on screen"), chromedp.Click(chromedp.CSS(`#suspend-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#sales tr[data-suspension="S1"][data-in-force="true"]`)))
	s.problem(409, "sales_suspended", call{"POST", "/v1/players/p-42/plays", p42, "s1", `{"stake":"1.00"}`})
	if x := s.must(200, call{"GET", "/v1/sales/suspensions/S1", op, "", ""}); x["scope"] != "price:1.00" || x["reason"] != "wrong chests on screen" {
		t.Fatalf("the console's suspension: %v", x)
	}
	do(t, ctx, "scroll to the sales", chromedp.ScrollIntoView(chromedp.CSS("#sales")))
	screenshot(t, ctx, "console-sales")
	s.must(200, call{"DELETE", "/v1/sales/suspensions/S1", op, "", `{"reason":"fixed"}`})
	do(t, ctx, "the console's next refresh", chromedp.WaitVisible(chromedp.CSS(`#sales tr[data-suspension="S1"][data-in-force="false"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#sales [data-sales="open"]`)))
	s.stop()
}

// TestBrowserConsoleApprovesAdjustments: an operator proposes a goodwill
// credit and the erasure of a former colleague's data through the API;
// another operator's console lists both as awaiting their approval and
// approves each with a click; the money moves, the erasure is recorded,
// the console shows nothing left to approve, and the proposer's own lists
// never showed them.
func TestBrowserConsoleApprovesAdjustments(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startServe(t, t.TempDir())
	s.fundedPlayer()
	alice, bob, carol := s.staffToken("operator", "alice"), s.staffToken("operator", "bob"), s.staffToken("operator", "carol")
	s.must(202, call{"POST", "/v1/players/p-42/adjustments", alice, "",
		`{"direction":"credit","kind":"malfunction_refund","amount":"1.00","reference":"inc-7","reason":"stake lost in an outage"}`})
	s.must(200, call{"POST", "/v1/players/p-42/deposits", carol, "d-carol", `{"amount":"1.00"}`})
	s.must(202, call{"POST", "/v1/erasures", alice, "", `{"subject":"carol","legal_ground":"left the company, asked for erasure"}`})
	do(t, ctx, "the proposer's console", chromedp.Navigate(s.url+"/console#token="+alice),
		chromedp.WaitVisible(chromedp.CSS(`#adjustments [data-awaiting="0"]`)), chromedp.WaitVisible(chromedp.CSS(`#erasures [data-awaiting="0"]`)))
	do(t, ctx, "another operator's console", chromedp.Navigate(s.url+"/"), void(chromedp.Evaluate[bool]("sessionStorage.clear() || true")),
		chromedp.Navigate(s.url+"/console#token="+bob), chromedp.WaitVisible(chromedp.CSS(`#adjustments tr[data-adjustment="A1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#erasures tr[data-erasure="ER1"]`)))
	do(t, ctx, "scroll to the adjustments", chromedp.ScrollIntoView(chromedp.CSS("#adjustments")))
	screenshot(t, ctx, "console-adjustments")
	do(t, ctx, "approve it", chromedp.Click(chromedp.CSS(`#adjustments tr[data-adjustment="A1"] button[data-decide="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#adjustments [data-awaiting="0"]`)))
	if a := s.must(200, call{"GET", "/v1/adjustments/A1", alice, "", ""}); a["state"] != "approved" || a["decided_by"].(map[string]any)["subject"] != "bob" || a["balance_after"] != "22.00" {
		t.Fatalf("approved from the console: %v", a)
	}
	do(t, ctx, "approve the erasure", chromedp.Click(chromedp.CSS(`#erasures tr[data-erasure="ER1"] button[data-decide="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#erasures [data-awaiting="0"]`)))
	if x := s.must(200, call{"GET", "/v1/erasures/ER1", alice, "", ""}); x["state"] != "approved" || x["decided_by"].(map[string]any)["subject"] != "bob" {
		t.Fatalf("erasure approved from the console: %v", x)
	}
	s.stop()
}
