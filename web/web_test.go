package web_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/web"
)

// TestPagesAreServedWithTheirRulesAndPolicy: every page renders, carries
// the rule set as JSON its scripts read, loads its own script and no
// inline one, and is served under a policy that keeps it to its origin.
func TestPagesAreServedWithTheirRulesAndPolicy(t *testing.T) {
	rules, err := domain.DefaultRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := web.New(rules)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w
	}
	embedded := regexp.MustCompile(`(?s)<script type="application/json" id="rules">(.*?)</script>`)
	for _, p := range web.Pages {
		w := get(p.Path)
		body := w.Body.String()
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s", p.Path, w.Code, w.Header().Get("Content-Type"))
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: policy %q", p.Path, csp)
		}
		m := embedded.FindStringSubmatch(body)
		var got struct {
			Version string `json:"version"`
			Tables  []struct {
				Price string                `json:"price"`
				Lots  []struct{ Count int } `json:"lots"`
			} `json:"tables"`
		}
		if m == nil || json.Unmarshal([]byte(m[1]), &got) != nil || got.Version != rules.Version || len(got.Tables) != 3 || len(got.Tables[0].Lots) != domain.TierCount {
			t.Fatalf("%s: the rules embedded are not the rule set's JSON: %v", p.Path, m)
		}
		if !strings.Contains(body, `<script type="module" src="/static/`+p.Name+`.js">`) || strings.Count(body, "<script") != 2 {
			t.Errorf("%s: scripts %d, want its module and the rules", p.Path, strings.Count(body, "<script"))
		}
		if s := get("/static/" + p.Name + ".js"); s.Code != 200 || !strings.Contains(s.Header().Get("Content-Type"), "javascript") {
			t.Errorf("/static/%s.js: %d %s", p.Name, s.Code, s.Header().Get("Content-Type"))
		}
	}
	if w := get("/nothing"); w.Code != http.StatusNotFound {
		t.Errorf("/nothing: %d", w.Code)
	}
}
