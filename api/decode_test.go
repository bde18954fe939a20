package api

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fdj/tresor/domain"
)

// codeOf is the stable code of a decode error, "" for none.
func codeOf(err error) domain.Code {
	var de *domain.Error
	if errors.As(err, &de) {
		return de.Code
	}
	if err != nil {
		return "not a domain.Error: " + domain.Code(err.Error())
	}
	return ""
}

// TestDecodeRefusesWhatEncodingJSONAccepts holds decode to exact JSON: a key
// repeated at any depth, a field name matched only by case folding, a body
// declared as something else than JSON, and the rest of what it always
// refused.
func TestDecodeRefusesWhatEncodingJSONAccepts(t *testing.T) {
	// encoding/json alone takes these for the fields they fold to: the
	// test is about the difference.
	var folded accountRequest
	if err := json.Unmarshal([]byte(`{"ſelf_excluded":true,"WEEKLY_STAKE_LIMIT":"1"}`), &folded); err != nil || folded.SelfExcluded == nil || !*folded.SelfExcluded || folded.WeeklyStakeLimit == nil {
		t.Fatalf("encoding/json no longer folds names (%+v, %v): decode's check may be simplified", folded, err)
	}
	const invalid, unsupported = domain.CodeInvalidRequest, codeUnsupportedMediaType
	for _, c := range []struct {
		contentType, body string
		want              domain.Code
	}{
		{"", `{"amount":"5"}`, ""},
		{"application/json", `{"amount":"5"}`, ""},
		{"application/json; charset=utf-8", ` {"amount":"5"} `, ""},
		{"Application/JSON;charset=UTF-8", `{"amount":"5"}`, ""},
		{"", `{"Amount":"5"}`, invalid},
		{"", `{"AMOUNT":"5"}`, invalid},
		{"", `{"amount":"5","amount":"6"}`, invalid},
		{"", `{"amount":"5","Amount":"6"}`, invalid},
		{"", `{"amount":"5","amounts":"6"}`, invalid},
		{"", `{"amount":{"a":1,"a":2}}`, invalid},
		{"", `{"amount":"5"} {}`, invalid},
		{"", `{"amount":"5"} x`, invalid},
		{"", `{"amount":"5"}]`, invalid},
		{"", `{"amount":"5",}`, invalid},
		{"", ``, invalid},
		{"", `  `, invalid},
		{"", `["amount"]`, invalid},
		{"", `"amount"`, invalid},
		{"", `{"amount":` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}`, invalid},
		{"text/plain", `{"amount":"5"}`, unsupported},
		{"application/x-www-form-urlencoded", `{"amount":"5"}`, unsupported},
		{"application/json; charset=iso-8859-1", `{"amount":"5"}`, unsupported},
		{"application/merge-patch+json", `{"amount":"5"}`, unsupported},
		{"application/json;;", `{"amount":"5"}`, unsupported},
		{"text/plain", `{"Amount":"5"}`, unsupported},
	} {
		r := httptest.NewRequest("POST", "/v1/players/p-1/deposits", strings.NewReader(c.body))
		if c.contentType != "" {
			r.Header.Set("Content-Type", c.contentType)
		}
		var req moneyRequest
		err := decode(r, &req)
		if got := codeOf(err); got != c.want {
			t.Errorf("Content-Type %q, body %q: %q (%v), want %q", c.contentType, c.body, got, err, c.want)
		}
		if err == nil && req.Amount != "5" {
			t.Errorf("body %q decoded as %+v", c.body, req)
		}
	}

	for _, body := range []string{`{"ſelf_excluded":true}`, `{"weekly_ſtake_limit":"1"}`, `{"Self_Excluded":true}`} {
		var req accountRequest
		if err := decode(httptest.NewRequest("PUT", "/v1/players/p-1", strings.NewReader(body)), &req); codeOf(err) != invalid {
			t.Errorf("body %q: %v (%+v), want invalid_request", body, err, req)
		}
	}

	r := httptest.NewRequest("POST", "/v1/emissions", strings.NewReader(`{"price":"1.00","blocks":1}`))
	r.Header.Add("Content-Type", "application/json")
	r.Header.Add("Content-Type", "text/plain")
	if err := decode(r, &emissionRequest{}); codeOf(err) != unsupported {
		t.Errorf("two Content-Types: %v, want unsupported_media_type", err)
	}
}

// TestCheckKeysAtEveryDepth checks the key walk on nested values, which no
// request body of the API has but a client may send.
func TestCheckKeysAtEveryDepth(t *testing.T) {
	fields := map[string]bool{"a": true, "b": true}
	for body, ok := range map[string]bool{
		`{"a":{"b":1,"c":[1,{"d":2}]},"b":[{"x":1},{"x":2}]}`: true,
		`{"a":[],"b":{}}`:                        true,
		`{"a":{"b":1,"b":2}}`:                    false,
		`{"a":[{"x":1,"x":1}]}`:                  false,
		`{"a":[[{"y":{"z":1,"z":2}}]]}`:          false,
		`{"a":{"b":{"c":1}},"a":1}`:              false,
		`{"a":{"B":1,"b":1}}`:                    true,
		`{"c":1}`:                                false,
		`{"a":"{\"b\":1,\"b\":2}"}`:              true,
		`{"a":1,"b":2}` + strings.Repeat(" ", 9): true,
	} {
		if err := checkKeys([]byte(body), fields); (err == nil) != ok {
			t.Errorf("%s: %v, want ok=%t", body, err, ok)
		}
	}
}
