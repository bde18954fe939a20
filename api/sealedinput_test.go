package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/personal/personaltest"
)

// TestASealedValueSentInIsNeverOpened: answers open the sealed fields they
// hold, so a sealed value copied from an export into a request that an
// answer echoes would come back in clear. A path, a query, a header or a
// body string (JSON escapes included) holding a sealed field's prefix is
// refused, and the refusal never holds the text.
func TestASealedValueSentInIsNeverOpened(t *testing.T) {
	ring := personaltest.New(t).Ring
	// Short enough that a sealed copy fits whole in the 80 characters an
	// invalid id's problem echoes.
	const secret = "Zq9!"
	sealed, err := ring.Seal(domain.Owner{Player: "p-2"}, secret)
	if err != nil {
		t.Fatal(err)
	}
	tokens, store := tokensAndStore(t)
	op, err := tokens.MintFor(api.RoleOperator, "ops", "", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h := api.NewServer(api.Config{Store: store, Tokens: tokens, Personal: ring})
	escaped := `\u0073` + strings.TrimPrefix(sealed, "s")
	for _, c := range []struct {
		name, method, path, key, body string
	}{
		{"path", "GET", "/v1/players/" + sealed + "/account", "", ""},
		{"escaped path", "GET", "/v1/players/" + url.PathEscape(sealed) + "/account", "", ""},
		{"query", "GET", "/v1/players/p-1/account?min_seq=" + url.QueryEscape(sealed), "", ""},
		{"header", "POST", "/v1/players/p-1/deposits", sealed, `{"amount":"1.00"}`},
		{"body", "POST", "/v1/players/p-1/deposits", "k1", `{"amount":"` + sealed + `"}`},
		{"escaped body", "POST", "/v1/players/p-1/deposits", "k2", `{"amount":"` + escaped + `"}`},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+op)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusBadRequest || strings.Contains(string(body), secret) {
			t.Errorf("%s: %d %s; want 400 without the text", c.name, rec.Code, body)
		}
	}
}
