package api_test

import (
	"bufio"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPIMatchesRoutes holds api/openapi.yaml to the server's routes:
// every registered "METHOD /path" is documented, and nothing else is.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	f, err := os.Open("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pathLine := regexp.MustCompile(`^  (/\S*):$`)
	methodLine := regexp.MustCompile(`^    (get|put|post|patch|delete):$`)
	var documented []string
	inPaths, path := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "paths:":
			inPaths = true
		case !inPaths:
		case pathLine.MatchString(line):
			path = pathLine.FindStringSubmatch(line)[1]
		case methodLine.MatchString(line):
			documented = append(documented, strings.ToUpper(methodLine.FindStringSubmatch(line)[1])+" "+path)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	routes := api.NewServer(api.Config{}).Routes()
	slices.Sort(routes)
	slices.Sort(documented)
	if !slices.Equal(routes, documented) {
		t.Fatalf("routes and openapi.yaml disagree:\nserver:  %v\nopenapi: %v", routes, documented)
	}
}

// TestOpenAPIParameterPatternsMatchTheServer holds the patterns that
// api/openapi.yaml gives the ids of paths and queries to the server's own
// checks: for every sample id, the pattern matches exactly when the server
// takes the id (answers anything but 400).
func TestOpenAPIParameterPatternsMatchTheServer(t *testing.T) {
	doc, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{name: (\w+), in: (path|query),.*?pattern: '([^']*)'`)
	patterns := map[string]*regexp.Regexp{}
	for _, m := range param.FindAllStringSubmatch(string(doc), -1) {
		patterns[m[1]] = regexp.MustCompile(m[3])
	}
	if n := strings.Count(string(doc), "in: path"); n != 7 {
		t.Errorf("%d path parameters, want player, play, block, ban, suspension, adjustment and erasure, each declared once", n)
	}

	rules, err := domain.DefaultRules()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := api.NewTokens(make([]byte, api.TokenKeySize))
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(api.Config{Store: memstore.New(rules), Tokens: tokens})
	mint := func(role api.Role) string {
		tok, err := tokens.Mint(role, "", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	op, fin := mint(api.RoleOperator), mint(api.RoleFinance)
	// probes asks the server about one id in the place each parameter has.
	probes := map[string]func(id string) (path, token string){
		"player": func(id string) (string, string) { return "/v1/players/" + url.PathEscape(id) + "/plays/last", op },
		"play":   func(id string) (string, string) { return "/v1/players/p-1/plays/" + url.PathEscape(id), op },
		"block":  func(id string) (string, string) { return "/v1/blocks/" + url.PathEscape(id), op },
		"ban":    func(id string) (string, string) { return "/v1/players/p-1/bans/" + url.PathEscape(id), op },
		"suspension": func(id string) (string, string) {
			return "/v1/sales/suspensions/" + url.PathEscape(id), op
		},
		"adjustment": func(id string) (string, string) {
			return "/v1/adjustments/" + url.PathEscape(id), op
		},
		"erasure":  func(id string) (string, string) { return "/v1/erasures/" + url.PathEscape(id), op },
		"emission": func(id string) (string, string) { return "/v1/reconciliation?emission=" + url.QueryEscape(id), fin },
		"after":    func(id string) (string, string) { return "/v1/blocks?after=" + url.QueryEscape(id), op },
	}
	samples := []string{"p-42", "P_42", "a", strings.Repeat("a", 64), strings.Repeat("a", 65), "a.b", "a b", "ü", "a/b", "a%b", "-", "_",
		"E0001", "E0001-B001", "E0001-B001-U000001", "E0001-B001-U00001", "E0001-B001-U0000001", "-U000001", "a.b-U000001",
		"a-U00000x", "x-U123456", "A1", "A0", "A01", "A123456789012345678", "A1234567890123456789", "a1", "A-1",
		"ER1", "ER0", "ER01", "ER123456789012345678", "ER1234567890123456789", "er1", "E1", strings.Repeat("a", 64) + "-U000001", strings.Repeat("a", 65) + "-U000001", "E0001-B001-U000001-U000002"}
	for name, probe := range probes {
		pattern := patterns[name]
		if pattern == nil {
			t.Errorf("parameter %s has no pattern in openapi.yaml", name)
			continue
		}
		for _, id := range samples {
			path, token := probe(id)
			r := httptest.NewRequest("GET", path, nil)
			r.Header.Set("Authorization", "Bearer "+token)
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			if taken := w.Code != 400; taken != pattern.MatchString(id) {
				t.Errorf("%s %q: the server answers %d, the pattern %s matches: %t", name, id, w.Code, pattern, pattern.MatchString(id))
			}
		}
	}
}

// TestAPIDocShowsEveryBodyAndHeader holds the "Request bodies and headers"
// table of docs/api.md to api/openapi.yaml: every operation that takes a
// body or a required header has its row, naming each field of the body and
// each required header, so that a newcomer never needs the OpenAPI file.
func TestAPIDocShowsEveryBodyAndHeader(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(md), "## Request bodies and headers")
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			if req, _, ok := strings.Cut(rest, "`"); ok {
				rows[req] = line
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			var want []string
			if op.RequestBody != nil {
				for _, mt := range op.RequestBody.Value.Content {
					for name := range mt.Schema.Value.Properties {
						want = append(want, `"`+name+`"`)
					}
				}
			}
			for _, p := range op.Parameters {
				if p.Value.In == "header" && p.Value.Required {
					want = append(want, p.Value.Name)
				}
			}
			if len(want) == 0 {
				continue
			}
			row, ok := rows[method+" "+path]
			if !ok {
				t.Errorf("docs/api.md has no row for %s %s (%s)", method, path, op.OperationID)
				continue
			}
			for _, w := range want {
				if !strings.Contains(row, w) {
					t.Errorf("docs/api.md, %s %s: the row does not name %s", method, path, w)
				}
			}
		}
	}
}
