package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// chartTextMin is the smallest a chart's label may be drawn, in CSS
// pixels: the console's own text is 16.
const chartTextMin = 11

// viewport is a screen the pages are tried at.
type viewport struct {
	name          string
	width, height int64
	mobile        bool
}

// viewports: a phone (390 × 844, as an iPhone 13) and a desktop.
var viewports = []viewport{{"phone", 390, 844, true}, {"desktop", 1280, 800, false}}

// fitsJS lists what sticks out of the viewport sideways: elements wider
// than the page or past its edges, but for those inside a box that scrolls
// them (a wide table) and the skip link, which is off-screen until focused.
const fitsJS = `(() => {
  const w = document.documentElement.clientWidth;
  const scrolls = e => { for (let a = e.parentElement; a; a = a.parentElement) { if (getComputedStyle(a).overflowX !== 'visible') return true; } return false; };
  const bad = [...document.querySelectorAll('body *')].filter(e => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && (r.right > w + 1 || r.left < -1) && !e.closest('.skip') && !scrolls(e);
  }).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && e.className.baseVal === undefined ? '.' + e.className : '') + ' ' + Math.round(e.getBoundingClientRect().right) + 'px');
  return JSON.stringify({ page: document.documentElement.scrollWidth, width: w, bad: bad.slice(0, 8) });
})()`

// fits fails the test when the page scrolls sideways or an element sticks
// out of the viewport.
func fits(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](fitsJS))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var got struct {
		Page, Width int
		Bad         []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Page > got.Width || len(got.Bad) > 0 {
		t.Errorf("%s: the page is %d px wide in a %d px viewport; sticking out: %v", where, got.Page, got.Width, got.Bad)
	}
}

// titled fails the test unless the page's title names it (its heading)
// and its icon is served.
func titled(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(async () => {
  const h1 = document.querySelector('main h1').textContent.trim(), icon = document.querySelector('link[rel="icon"]');
  return document.title.startsWith(h1 + ' · ') && !!icon && (await fetch(icon.href)).ok;
})()`, chromedp.EvalAwaitPromise))
	if err != nil || !ok {
		t.Errorf("%s: the title does not name the page, or its icon is not served (%v)", where, err)
	}
}

// firstScreen fails the test unless each element is within the first
// screen of the page, as it shows before any scroll.
func firstScreen(t *testing.T, ctx context.Context, where string, sels ...string) {
	t.Helper()
	for _, sel := range sels {
		bottom, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(
			`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return r.bottom + window.scrollY - window.innerHeight; })()`, sel)))
		if err != nil {
			t.Fatalf("%s: %s: %v", where, sel, err)
		}
		if bottom > 0 {
			t.Errorf("%s: %s ends %.0f px below the first screen", where, sel, bottom)
		}
	}
}

// TestBrowserPagesFitAPhoneAndADesktop: at a phone's width and at a
// desktop's, no page scrolls sideways and each is titled by its name;
// after a stake the map, the compass, the counter and the Throw button are
// on the first screen; after the fourth throw every throw stays listed,
// the chests the throws opened stand out from those revealed at the end,
// and the result says what the prize is against the stake. Each page is
// captured at both widths.
func TestBrowserPagesFitAPhoneAndADesktop(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := startServe(t, t.TempDir())
	op, p42 := s.fundedPlayer()
	for _, v := range viewports {
		opts := []chromedp.EmulateViewportOption{}
		if v.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		do(t, ctx, "viewport "+v.name, chromedp.EmulateViewport(v.width, v.height, opts...))
		at := func(page string) string { return page + " at " + v.name + " width" }
		// visit opens a page: it must fit and be titled, and is captured.
		visit := func(page string, steps ...chromedp.Action[chromedp.Void]) {
			do(t, ctx, at(page), steps...)
			fits(t, ctx, at(page))
			titled(t, ctx, at(page))
			screenshot(t, ctx, page+"-"+v.name)
		}

		visit("index", chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.CSS("main h1")))
		visit("play-start", chromedp.Navigate(s.url+"/play#token="+p42), chromedp.WaitVisible(chromedp.CSS("#balance[data-balance]")))
		visit("play", chromedp.Click(chromedp.CSS(`input[value="1.00"]`)), chromedp.Click(chromedp.CSS("#play")),
			chromedp.WaitVisible(chromedp.CSS("[data-pawn]")), chromedp.WaitEnabled(chromedp.CSS("#throw")))
		firstScreen(t, ctx, at("play after the stake"), ".map", "[data-compass]", "[data-counter]", "#throw", "#throws-left")
		for n := 1; n <= 4; n++ {
			do(t, ctx, fmt.Sprintf("%s: throw %d", v.name, n), chromedp.Click(chromedp.CSS("#throw")),
				chromedp.WaitReady(chromedp.CSS(fmt.Sprintf(`#throw-log li[data-throw="%d"]`, n))))
		}
		visit("play-result", chromedp.WaitReady(chromedp.CSS("#result[data-tier]")), chromedp.WaitReady(chromedp.CSS(".chest.revealed, .chest.found")))
		last := s.must(200, call{"GET", "/v1/players/p-42/plays/last", p42, "", ""})
		opened := 0
		for _, th := range last["throws"].([]any) {
			if th.(map[string]any)["chest"] != nil {
				opened++
			}
		}
		if found, revealed, logged := count(t, ctx, ".chest.found[data-found]"), count(t, ctx, ".chest.revealed"), count(t, ctx, "#throw-log li"); found != opened || revealed != 9-opened || logged != 4 {
			t.Errorf("%s: %d chests stand out as found and %d as revealed, %d throws listed; want %d, %d and 4", at("play after the fourth throw"), found, revealed, logged, opened, 9-opened)
		}
		if count(t, ctx, "#result [data-against-stake]") != 1 {
			t.Errorf("%s: the result does not say what the prize is against the stake", at("play"))
		}
		visit("history", chromedp.Navigate(s.url+"/history#token="+p42), chromedp.WaitVisible(chromedp.CSS("[data-play-id]")),
			chromedp.Click(chromedp.CSS("[data-play-id] .summary button")), chromedp.WaitVisible(chromedp.CSS("[data-play-id] [data-pawn]")))
		visit("console", chromedp.Navigate(s.url+"/console#token="+op), chromedp.WaitVisible(chromedp.CSS("[data-block] svg[data-chart=tiers]")))
		// A chart scaled down to a phone's width had 7 px labels.
		smallest, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`Math.min(...[...document.querySelectorAll('svg.chart text')].map(e => parseFloat(getComputedStyle(e).fontSize) * e.closest('svg').getBoundingClientRect().width / e.closest('svg').viewBox.baseVal.width))`))
		if err != nil || smallest < chartTextMin {
			t.Errorf("%s: the charts' smallest label is %.1f px (%v), want at least %d", at("console"), smallest, err, chartTextMin)
		}
	}
}
