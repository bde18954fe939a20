// Package web is Tresor's pages: the player's screen, the history with its
// proofs checked in the browser, and the console of operators, finance and
// regulators (docs/web.md). Templates and static files are embedded in the
// binary; the pages hold no data of their own: their scripts call the
// public API (/v1) with the visitor's token, like any client, so that a
// page shows nothing the API would not answer that token.
package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"

	"github.com/fdj/tresor/domain"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Pages lists the pages and their titles: the paths are a contract
// (docs/web.md), linked from the README and printed by `tresor token --url`.
var Pages = []struct{ Path, Name, Title string }{
	{"/", "index", "Tresor"},
	{"/play", "play", "Play"},
	{"/history", "history", "History"},
	{"/console", "console", "Console"},
}

// securityHeaders keep the pages to their own origin: scripts and styles
// from /static only (no inline script, nothing from elsewhere), requests
// to the API of the same origin only, no framing, no referrer.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
}

// rulesJSON is what the pages need of the rule set: the Article 3 tables
// (lots and prize per tier and price) for the console's charts and the
// in-browser prize check, tiers, symbols and directions in code order.
type rulesJSON struct {
	Version       string      `json:"version"`
	BlockUnits    int         `json:"block_units"`
	PayoutRateMin string      `json:"payout_rate_min"`
	PayoutRateMax string      `json:"payout_rate_max"`
	Tiers         []string    `json:"tiers"`
	Tables        []tableJSON `json:"tables"`
}

// tableJSON is one price's Article 3 table.
type tableJSON struct {
	Price domain.Amount `json:"price"`
	Total domain.Amount `json:"total"`
	Lots  []lotJSON     `json:"lots"`
}

// lotJSON is one row of a table.
type lotJSON struct {
	Tier   string        `json:"tier"`
	Count  int           `json:"count"`
	Amount domain.Amount `json:"amount"`
}

func rulesView(r *domain.RuleSet) rulesJSON {
	v := rulesJSON{Version: r.Version, BlockUnits: r.BlockUnits, PayoutRateMin: r.PayoutRateMin.String(), PayoutRateMax: r.PayoutRateMax.String()}
	for _, t := range domain.Tiers {
		v.Tiers = append(v.Tiers, t.ID())
	}
	for _, t := range r.Tables {
		tj := tableJSON{Price: t.Price, Total: t.Total}
		for _, l := range t.Lots {
			tj.Lots = append(tj.Lots, lotJSON{Tier: l.Tier.ID(), Count: l.Count, Amount: l.Amount})
		}
		v.Tables = append(v.Tables, tj)
	}
	return v
}

// page is what a template is given.
type page struct {
	Name, Title string
	// Rules is the rule set as JSON, for a script element the scripts read
	// (never executed: the pages run no inline script). It is Tresor's own
	// json.Marshal output, which escapes <, > and &.
	Rules template.JS
	Nav   []struct{ Path, Name, Title string }
}

// New returns the pages' handler: the four pages, rendered once, and the
// static files. rules is the rule set the server runs.
func New(rules *domain.RuleSet) (http.Handler, error) {
	tmpl, err := template.ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("web templates: %w", err)
	}
	rj, err := json.Marshal(rulesView(rules))
	if err != nil {
		return nil, fmt.Errorf("web rules: %w", err)
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, fmt.Errorf("web static files: %w", err)
	}
	mux := http.NewServeMux()
	for _, p := range Pages {
		var buf bytes.Buffer
		data := page{Name: p.Name, Title: p.Title, Rules: template.JS(rj), Nav: Pages}
		if err := tmpl.ExecuteTemplate(&buf, p.Name+".html", data); err != nil {
			return nil, fmt.Errorf("web page %s: %w", p.Path, err)
		}
		body := buf.Bytes()
		pattern := "GET " + p.Path
		if p.Path == "/" {
			pattern = "GET /{$}"
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(body)
		})
	}
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		// The files change with the binary: revalidate, never serve stale.
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		mux.ServeHTTP(w, r)
	}), nil
}
