package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fdj/tresor/internal/testidp"
	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// TestProviderTokensThroughTheBinary runs serve against a real OpenID
// Connect provider found by discovery: its operator opens an emission and
// credits a player, its player plays only as that player (the refusal
// recorded under the token's sub), tokens for another audience, from
// another provider, expired, unsigned or HMAC-signed under the provider's
// RSA kid are refused, Tresor's own tokens keep working, and a key the
// provider rotates to verifies without a restart.
func TestProviderTokensThroughTheBinary(t *testing.T) {
	t.Parallel()
	provider, other := testidp.Start(t), testidp.Start(t)
	s := startServe(t, t.TempDir(), "--token-issuer", provider.Issuer, "--token-audience", "tresor-api",
		"--token-role-claim", "tresor_role", "--token-player-claim", "tresor_player")
	alice := testidp.Identity{Subject: "alice@fdj.fr", Role: "operator", Audience: "tresor-api", RoleClaim: "tresor_role"}
	op := provider.Token(t, alice)
	s.must(201, call{"POST", "/v1/emissions", op, "e1", `{"price":"1.00","blocks":1}`})
	s.must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`})
	s.must(200, call{"POST", "/v1/players/p1/deposits", op, "d1", `{"amount":"10.00"}`})
	p1 := provider.Token(t, testidp.Identity{Subject: "user-81", Role: "player", Player: "p1", Audience: "tresor-api",
		RoleClaim: "tresor_role", PlayerClaim: "tresor_player"})
	s.must(201, call{"POST", "/v1/players/p1/plays", p1, "s1", `{"stake":"1.00"}`})
	s.problem(403, "forbidden", call{"POST", "/v1/players/p2/plays", p1, "s2", `{"stake":"1.00"}`})
	s.problem(403, "forbidden", call{"GET", "/v1/players/p2/account", p1, "", ""})
	eventually(t, 10*time.Second, func() bool {
		page := s.must(200, call{"GET", "/v1/significant-events", op, "", ""})
		raw, _ := json.Marshal(page)
		return strings.Count(string(raw), `"subject":"user-81"`) == 2
	})

	kid, pub := provider.SigningKey()
	claims := testidp.Claims(t, op)
	expired := alice
	expired.Expired = true
	elsewhere := alice
	elsewhere.Audience = "another-api"
	for why, tok := range map[string]string{
		"another audience":              provider.Token(t, elsewhere),
		"another issuer":                other.Token(t, alice),
		"expired":                       provider.Token(t, expired),
		"alg none":                      testidp.Forge(t, jwt.SigningMethodNone, kid, claims, jwt.UnsafeAllowNoneSignatureType),
		"HS256 under the RSA key's kid": testidp.Forge(t, jwt.SigningMethodHS256, kid, claims, testidp.PublicKeyPEM(t, pub)),
	} {
		if got, m := s.do(call{"GET", "/v1/blocks", tok, "", ""}); got != 401 || m["code"] != "unauthorized" {
			t.Errorf("%s: %d %v, want 401 unauthorized", why, got, m)
		}
	}
	s.must(200, call{"GET", "/v1/blocks", s.token("operator", ""), "", ""})

	// The player's page learns who the token is for from the API, whatever
	// the claims' names.
	ctx := browser(t)
	do(t, ctx, "open the player's screen", chromedp.Navigate(s.url+"/play#token="+p1), chromedp.WaitVisible(chromedp.CSS("#balance[data-balance]")))
	if got := attr(t, ctx, "#balance", "data-balance"); got != "9.00" {
		t.Errorf("the provider's player sees the balance %q, want 9.00", got)
	}
	if who, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#who span"))); !strings.HasPrefix(who, "player p1") {
		t.Errorf("signed in as %q, want player p1", who)
	}

	provider.Rotate(t, jose.EdDSA)
	s.must(200, call{"GET", "/v1/blocks", provider.Token(t, alice), "", ""})
	s.stop()
}

// TestProviderTokensOnACluster: three serve on a three-node NATS cluster,
// given the same identity flags, take the provider's tokens on every node
// (an operator's command given to a standby, a player's play on another),
// and each node picks up a key the provider rotates to by itself.
func TestProviderTokensOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster and 3 processes: skipped in -short")
	}
	t.Parallel()
	data := t.TempDir()
	c, _ := clusterKeys(t, data)
	provider := testidp.Start(t)
	nodes := startNodes(t, data, "--nats", c.URLs(), "--replicas", "3",
		"--token-issuer", provider.Issuer, "--token-audience", "tresor-api")
	alice := testidp.Identity{Subject: "alice@fdj.fr", Role: "operator", Audience: "tresor-api"}
	op := provider.Token(t, alice)
	nodes[0].must(201, call{"POST", "/v1/emissions", op, "e1", `{"price":"1.00","blocks":1}`})
	nodes[1].must(200, call{"PUT", "/v1/players/p1", op, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"50.00"}`})
	nodes[1].must(200, call{"POST", "/v1/players/p1/deposits", op, "d1", `{"amount":"10.00"}`})
	p1 := provider.Token(t, testidp.Identity{Subject: "user-81", Role: "player", Player: "p1", Audience: "tresor-api"})
	nodes[2].must(201, call{"POST", "/v1/players/p1/plays", p1, "s1", `{"stake":"1.00"}`})
	nodes[2].problem(403, "forbidden", call{"POST", "/v1/players/p2/plays", p1, "s2", `{"stake":"1.00"}`})

	fetches := provider.KeySetFetches()
	provider.Rotate(t, jose.ES256)
	rotated := provider.Token(t, alice)
	for _, n := range nodes {
		n.must(200, call{"GET", "/v1/blocks", rotated, "", ""})
	}
	if n := provider.KeySetFetches() - fetches; n != 3 {
		t.Errorf("%d key set fetches for a rotation seen by three nodes, want one each", n)
	}
	stopNodes(nodes)
}

// TestTokenKeyRotationThroughTheBinary rotates the token key of the
// embedded default: the old key moved aside, serve creates a new one,
// tresor token mints with it; the old key's tokens verify until the grace
// given ends and are refused (and logged) once it has, the new key's
// throughout.
func TestTokenKeyRotationThroughTheBinary(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	old := s.token("operator", "")
	s.stop()
	previous := filepath.Join(data, "keys", "token-previous.key")
	if err := os.Rename(filepath.Join(data, "keys", "token.key"), previous); err != nil {
		t.Fatal(err)
	}
	grace := func(until time.Time) []string {
		return []string{"--token-key-previous-file", previous, "--token-key-previous-until", until.UTC().Format(time.RFC3339)}
	}
	s = startServe(t, data, grace(time.Now().Add(time.Hour))...)
	fresh := s.token("operator", "")
	if kidOf(t, fresh) == kidOf(t, old) {
		t.Fatalf("the new key's token names the old key %s", kidOf(t, old))
	}
	s.must(200, call{"GET", "/v1/blocks", old, "", ""})
	s.must(200, call{"GET", "/v1/blocks", fresh, "", ""})
	s.stop()

	s = startServe(t, data, grace(time.Now().Add(-time.Minute))...)
	s.problem(401, "unauthorized", call{"GET", "/v1/blocks", old, "", ""})
	s.must(200, call{"GET", "/v1/blocks", fresh, "", ""})
	reg := s.token("regulator", "")
	eventually(t, 10*time.Second, func() bool {
		page := s.must(200, call{"GET", "/v1/significant-events", reg, "", ""})
		raw, _ := json.Marshal(page)
		return strings.Contains(string(raw), "a replaced key past its grace")
	})
	s.stop()
}

// TestIdentityFlagsRefuseBadInput: an issuer without an audience, an
// issuer over plain http off the loopback, and a previous key without the
// end of its grace are refused before serve opens anything.
func TestIdentityFlagsRefuseBadInput(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	for _, tc := range []struct{ args []string }{
		{[]string{"--token-issuer", "https://id.example.com"}},
		{[]string{"--token-issuer", "http://id.example.com", "--token-audience", "tresor-api"}},
		{[]string{"--token-key-previous-file", filepath.Join(data, "old.key")}},
		{[]string{"--token-key-previous-file", filepath.Join(data, "old.key"), "--token-key-previous-until", "tomorrow"}},
	} {
		_, errOut, code := run(t, append([]string{"serve", "--data", data, "--http", "127.0.0.1:0"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, "--token-") {
			t.Errorf("serve %v: exit %d %s, want 2 naming the flag", tc.args, code, errOut)
		}
	}
}

// kidOf is the kid header of a token.
func kidOf(t *testing.T, token string) string {
	t.Helper()
	var h struct{ Kid string }
	head, _, _ := strings.Cut(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err == nil {
		err = json.Unmarshal(b, &h)
	}
	if err != nil || h.Kid == "" {
		t.Fatalf("token header: %v %s", err, b)
	}
	return h.Kid
}
