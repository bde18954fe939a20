package main

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// revocationBound is how soon after a revocation's acknowledgement every
// node refuses its tokens.
const revocationBound = 2 * time.Second

// staffToken mints a token of role for subject with tresor token.
func staffToken(tb testing.TB, s *server, role, subject string) string {
	tb.Helper()
	out, errOut, code := run(tb, "token", "--data", s.data, "--role", role, "--subject", subject)
	if code != 0 {
		tb.Fatalf("tresor token: %d %s", code, errOut)
	}
	return strings.TrimSpace(out)
}

// tokenClaims reads a token's claims, unverified (the test minted it).
func tokenClaims(tb testing.TB, token string) (jti string, iat int64) {
	tb.Helper()
	parts := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct {
		JTI string `json:"jti"`
		IAT int64  `json:"iat"`
	}
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.JTI == "" {
		tb.Fatalf("claims of %s: %v (jti %q)", token, err, c.JTI)
	}
	return c.JTI, c.IAT
}

// refusedWithin reads with token on s from now until it is refused as
// revoked: no read sent revocationBound after acked may be answered 200.
func refusedWithin(tb testing.TB, s *server, token string, acked time.Time) {
	tb.Helper()
	for deadline := acked.Add(3 * revocationBound); ; {
		sent := time.Now()
		status, m, err := s.sendWith(call{"GET", "/v1/blocks", token, "", ""}, nil)
		switch {
		case err != nil:
			tb.Fatal(err)
		case status == 401 && m["code"] == "token_revoked":
			tb.Logf("refused %s after the revocation's answer", time.Since(acked).Round(time.Millisecond))
			return
		case status == 200 && sent.Sub(acked) > revocationBound:
			tb.Fatalf("a read sent %s after the revocation was answered was served", sent.Sub(acked))
		case status != 200 && status != 503:
			tb.Fatalf("read with a token being revoked: %d %v", status, m)
		case time.Now().After(deadline):
			tb.Fatalf("still not refused %s after the revocation", time.Since(acked))
		}
		time.Sleep(20 * time.Millisecond) // pace the reads, not a wait for a state
	}
}

func TestRevokedTokensAreRefusedOnAnotherNode(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster and 3 processes: skipped in -short")
	}
	data := t.TempDir()
	c, _ := clusterKeys(t, data)
	nodes := startNodes(t, data, "--nats", c.URLs(), "--replicas", "3", "--revocation-clock-skew", "1s")
	op := staffToken(t, nodes[0], "operator", "ops@tests")
	leaked := staffToken(t, nodes[0], "operator", "eve@tests")
	bob := staffToken(t, nodes[0], "finance", "bob@tests")
	for _, tok := range []string{leaked, bob} {
		nodes[2].must(200, call{"GET", "/v1/blocks", tok, "", ""})
	}

	// One token, by its jti: revoked on node 0, refused on node 1.
	jti, _ := tokenClaims(t, leaked)
	body := `{"jti":"` + jti + `","reason":"pasted in a support ticket"}`
	r := nodes[0].must(201, call{"POST", "/v1/token-revocations", op, "rev-1", body})
	refusedWithin(t, nodes[1], leaked, time.Now())
	by, _ := r["by"].(map[string]any)
	if r["jti"] != jti || r["reason"] != "pasted in a support ticket" || by["subject"] != "ops@tests" || by["role"] != "operator" {
		t.Fatalf("revocation answered %v", r)
	}
	again := nodes[2].must(200, call{"POST", "/v1/token-revocations", op, "rev-1", body})
	if again["seq"] != r["seq"] {
		t.Fatalf("retry answered %v, the revocation %v", again, r)
	}
	nodes[2].must(200, call{"GET", "/v1/blocks", bob, "", ""})

	// A subject: every token of bob issued until the revocation.
	s := nodes[1].must(201, call{"POST", "/v1/token-revocations", op, "rev-2", `{"subject":"bob@tests","reason":"left the company"}`})
	refusedWithin(t, nodes[2], bob, time.Now())
	until, err := time.Parse(time.RFC3339Nano, s["covers_issued_until"].(string))
	if err != nil {
		t.Fatal(err)
	}
	// A token's iat is in whole seconds: one minted a second past the
	// revocation's cover is issued after it. Waiting for the clock to
	// get there is the only way a fresh grant can come later.
	for time.Now().Before(until.Add(time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}
	fresh := staffToken(t, nodes[0], "finance", "bob@tests")
	if _, iat := tokenClaims(t, fresh); !time.Unix(iat, 0).After(until) {
		t.Fatalf("fresh token issued at %d, not after %s", iat, until)
	}
	nodes[2].must(200, call{"GET", "/v1/blocks", fresh, "", ""})
	nodes[0].problem(401, "token_revoked", call{"GET", "/v1/blocks", bob, "", ""})

	// Listed, with who and why, for the operator and the regulator.
	reg := staffToken(t, nodes[0], "regulator", "cnil@tests")
	list := nodes[2].must(200, call{"GET", "/v1/token-revocations", reg, "", ""})
	revs, _ := list["revocations"].([]any)
	if len(revs) != 2 || revs[0].(map[string]any)["jti"] != jti || revs[1].(map[string]any)["subject"] != "bob@tests" ||
		revs[1].(map[string]any)["reason"] != "left the company" {
		t.Fatalf("revocations listed: %v", list)
	}
	nodes[2].problem(403, "forbidden", call{"GET", "/v1/token-revocations", fresh, "", ""})
	nodes[2].problem(400, "invalid_request", call{"POST", "/v1/token-revocations", op, "rev-3", `{"jti":"x","subject":"y","reason":"both"}`})
}
